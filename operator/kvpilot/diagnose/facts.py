"""Facts: what the rules decide on, derived once per target from its signals and limits.

vLLM V1's scheduler admits a waiting request in a step only when all of these hold
(``vllm/v1/core/sched/scheduler.py`` ``Scheduler.schedule``, vLLM 0.29): fewer than
``max_num_seqs`` requests run (``num_running >= self.max_num_running_reqs: break``); the step's
token budget ``max_num_batched_tokens`` is not used up by running requests and earlier admissions
(``while ... token_budget > 0``); the KV cache can take its blocks - since vLLM PR #37307
(``scheduler_reserve_full_isl``, default True, ``vllm/config/scheduler.py``) the *whole prompt's*
blocks must fit; and it is not deferred (LoRA slots, KV transfer: ``reason="deferred"`` of
``vllm:num_requests_waiting_by_reason``). Compute speed never makes a request wait, it makes
steps slow. So a standing queue means one of these limits refused admission in every step, and
each fact below measures how close one limit is to refusing.

Reading vLLM's metrics as vLLM produces them (``vllm/v1/metrics/loggers.py``
``PrometheusStatLogger.record`` and ``vllm/v1/metrics/stats.py`` ``IterationStats``, vLLM 0.29):
``vllm:iteration_tokens_total`` observes, per step with output, the prompt tokens of prefills that
*completed* in that step plus the generated tokens. A step that only ran a partial prefill chunk
records nothing of that chunk; the chunk's tokens arrive with the completing step. So under
chunked prefill a budget cap does not show as mass in the budget's bucket. The window's *mean*
(``_sum`` / ``_count``) still counts every computed token once, over the steps that produced
output (every step while a request decodes): it is the fill measure used here; the bucket share is
used only when ``_sum``/``_count`` are missing.

Pure functions, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kvpilot.diagnose.limits import Limits
from kvpilot.diagnose.promql import share_above
from kvpilot.diagnose.severity import growing as queue_growing
from kvpilot.diagnose.signals import Signals
from kvpilot.diagnose.steptime import StepFit, fit_step_time
from kvpilot.gpus import GPU_PROFILES, gpu_profile
from kvpilot.text.numbers import count, fig, number
from kvpilot.vllm.defaults import LARGE_GPU_MAX_NUM_BATCHED_TOKENS

#: share of engine steps in the token budget's bucket (or above) from which the budget binds, when
#: only buckets are known: a majority of steps. The bucket is found from max_num_batched_tokens.
BUDGET_FULL_SHARE = 0.5

#: mean tokens per step / max_num_batched_tokens from which steps count as full: with a queue, the
#: scheduler hands what running requests leave of the budget to waiting prompts (chunked), so a
#: binding budget fills every step; 10 % covers steps a completing request leaves short.
BUDGET_FULL_FILL = 0.9

#: vLLM's token budget of the OpenAI server on a large GPU (``EngineArgs.get_batch_defaults``,
#: ``vllm/engine/arg_utils.py``, vLLM 0.29: 8192 at >= 70 GiB). vLLM's tuning guide ("Optimization
#: and Tuning", Chunked Prefill, docs.vllm.ai v0.9-v0.29) recommends a budget above 8192 for
#: throughput on small models and large GPUs: steps full at a budget this large are compute-bound
#: (raising it only lengthens the steps); full steps below it are a token-budget cap.
LARGE_BUDGET = LARGE_GPU_MAX_NUM_BATCHED_TOKENS

#: a mean prefill spanning at least this many step times was split across steps (chunked prefill by the
#: budget); below it a prompt is prefilled in about one step (``prefill_step_times``: mean
#: ``vllm:request_prefill_time_seconds`` over the mean step, ``vllm/v1/metrics/stats.py``)
PREFILL_SPLIT_STEPS = 2.0

#: running within this many requests of a cap counts as pinned at it (running rounds to the cap:
#: 3.6 of 4 is pinned, 250 of 256 is not)
PINNED_SLACK = 0.5


def kv_ceiling(signals: Signals, limits: Limits) -> tuple[float | None, str]:
    """The KV usage at which new requests stop being admitted (ratio 0-1), and how it was derived.

    A new request needs room for its whole prompt (``scheduler_reserve_full_isl``, vLLM PR #37307)
    or, when it is smaller, a running request's share, so admission stops about two requests' worth
    below 1.0: ``ceiling = 1 - 2 x max(kv_avg / running_avg, prompt_tokens_per_request /
    kv_cache_tokens)``, clamped to [0.5, 1] (``KVCacheManager.allocate_slots``,
    ``vllm/v1/core/kv_cache_manager.py``: cached-but-evictable blocks count as free).

    Returns ``(None, reason)`` when KV usage is unknown.
    """
    kv_avg, run_avg = signals.get("kv_usage_avg"), signals.get("running_avg")
    if kv_avg is None:
        return None, "KV usage unknown"
    shares = []
    if run_avg and run_avg > 0:
        shares.append(kv_avg / run_avg)
    prompt, kv_tokens = signals.get("prompt_tokens_per_request"), limits.value("kv_cache_tokens")
    if prompt and kv_tokens:
        shares.append(prompt / kv_tokens)
    share = max(shares) if shares else 0.0
    ceiling = min(1.0, max(0.5, 1.0 - 2.0 * share))
    how = (
        f"admission ceiling {number(ceiling, 3)} = 1 - 2 x {number(share, 4)} (one request's share of KV)"
        if shares
        else "admission ceiling 1.0 (no running requests to size a request's share)"
    )
    return ceiling, how


def budget_share(signals: Signals, limits: Limits) -> tuple[float | None, float | None]:
    """Share of engine steps in ``max_num_batched_tokens``' bucket or above, and that bucket's lower edge.

    ``(None, None)`` when unknown: no ``vllm:iteration_tokens_total`` buckets, or the budget lies
    beyond twice the largest finite bucket bound (vLLM's buckets end at 16,384: with a 65,000
    budget the ``+Inf`` bucket holds steps of 20,000 tokens as well as full ones).
    """
    budget = limits.value("max_num_batched_tokens")
    buckets = signals.buckets.get("iteration_tokens")
    if not budget or not buckets:
        return None, None
    finite_edges = [b for b, _ in buckets if not math.isinf(b)]
    if finite_edges and budget > 2 * max(finite_edges):
        return None, None
    result = share_above(buckets, float(budget))
    return (result[0], result[1]) if result else (None, None)


def steps_full(share: float | None, tokens_per_step: float | None, budget: int | None) -> bool:
    """True when the engine steps are full at the token budget.

    Full: the mean step (``vllm:iteration_tokens_total`` ``_sum``/``_count``) carries at least
    :data:`BUDGET_FULL_FILL` of the budget. The bucket share is not required with it: vLLM records
    a prefill chunk only in the step its prefill completes (module docstring), so a binding budget
    need not show in its own bucket. Without ``_sum``/``_count``, a majority of steps
    (:data:`BUDGET_FULL_SHARE`) in the budget's bucket.
    """
    if tokens_per_step is not None and budget:
        return tokens_per_step / budget >= BUDGET_FULL_FILL
    return share is not None and share >= BUDGET_FULL_SHARE


def compute_knee(limits: Limits) -> tuple[float, str]:
    """Tokens per step from which a step is compute-bound on this GPU, and where the figure comes from.

    A step of n tokens does about 2 FLOP per weight per token, n FLOP per byte of bf16 weights read,
    so it turns compute-bound at n = peak FLOP/s / memory bandwidth (H100 SXM: 989e12 / 3.35e12 =
    295 tokens; the roofline model, Williams et al., CACM 52(4), 2009). GPU profiles from
    kvpilot.engine.hardware (datasheet figures); unknown GPU: the largest knee of those profiles
    (L4: 121e12 / 300e9 = 403). The knee alone never makes a verdict: it only qualifies the effect
    of a larger budget (:func:`budget_binds`).
    """
    if limits.gpu_name:
        try:
            gpu = gpu_profile(limits.gpu_name)
            return (
                gpu.peak_flops / gpu.bandwidth,
                f"{gpu.name}: {fig(gpu.peak_flops / 1e12, 1)} TFLOP/s / {fig(gpu.bandwidth / 1e12, 2)} TB/s",
            )
        except ValueError:
            pass
    knee = max(g.peak_flops / g.bandwidth for g in GPU_PROFILES.values())
    return knee, "GPU unknown: the largest knee of kvpilot's GPU profiles"


def budget_binds(
    share: float | None, tokens_per_step: float | None, budget: int | None, step_fit: StepFit | None = None
) -> bool:
    """True when full steps are a token-budget cap: full (:func:`steps_full`) at a budget below
    :data:`LARGE_BUDGET`, unless the step time measurably grows in proportion to tokens per step
    (``step_fit.grows``: compute-bound at any budget); at or above it only when the step time measurably
    stays flat as tokens per step grow (``step_fit.flat``). Otherwise full steps are compute-bound.
    """
    if not steps_full(share, tokens_per_step, budget) or budget is None:
        return False
    if step_fit is not None and (step_fit.grows or step_fit.flat):
        return step_fit.flat
    return budget < LARGE_BUDGET


@dataclass
class Facts:
    """What the rules decide on for one target (module docstring for what each limit means).

    Attributes (requests unless said; ``None`` = unknown):
        signals / limits: the inputs.
        window: seconds.
        run_avg / run_max / wait_avg / wait_max: running and waiting gauges over the window.
        kv_avg / kv_max: KV usage, ratio 0-1. preempt: preemptions in the window.
        trend: queue growth, req/s; growth: over the window.
        queued: a request waited (``waiting_avg > 0`` and ``waiting_max >= 1``); growing: the queue
            grew by at least one request; standing: queued and (growing or ``waiting_avg >= 1``).
        n_seqs / n_seqs_how: the max_num_seqs the rules use and its source (``inferred: ...`` when
            read from a flat running gauge).
        budget / budget_how: the same for max_num_batched_tokens (tokens).
        pinned / free_slots: running at / below n_seqs.
        tokens_per_step: mean tokens per engine step; fill: tokens_per_step / budget.
        share / share_edge: share of steps in the budget's bucket and that bucket's lower edge.
        full: :func:`steps_full`, or ``full_by_elimination``: no step measurement, but a standing queue
            with free slots and KV room leaves the budget as the only admission limit that can have
            refused it. knee / knee_how: :func:`compute_knee`.
        ceiling / ceiling_how: :func:`kv_ceiling`; at_ceiling: ``kv_max >= ceiling``.
        capacity_blocked: requests waited for capacity with free slots and KV at the ceiling.
        kv_room: not at the ceiling and no preemption; kv_known: the KV gauge exists.
        step_rate: engine steps per second with output; decode_per_step: generated tokens per step.
        step_fit: seconds per step fitted on tokens per step over the sub-windows
            (:func:`kvpilot.diagnose.steptime.fit_step_time`): ``grows`` = compute-bound at any budget,
            ``flat`` = the budget binds at any budget.
        inferred: names of limits inferred from the gauges (lower confidence).
        model_config: the served model's config.json when given (for quantified recommendations).
    """

    signals: Signals
    limits: Limits
    window: float
    run_avg: float | None
    run_max: float | None
    wait_avg: float | None
    wait_max: float | None
    kv_avg: float | None
    kv_max: float | None
    preempt: float
    trend: float | None
    growth: float | None
    queued: bool
    growing: bool
    standing: bool
    n_seqs: int | None
    n_seqs_how: str
    budget: int | None
    budget_how: str
    pinned: bool
    free_slots: bool
    tokens_per_step: float | None
    fill: float | None
    share: float | None
    share_edge: float | None
    full: bool
    knee: float
    knee_how: str
    ceiling: float | None
    ceiling_how: str
    at_ceiling: bool
    capacity_blocked: bool
    kv_room: bool
    kv_known: bool
    step_rate: float | None
    decode_per_step: float | None
    inferred: tuple[str, ...] = field(default=())
    full_by_elimination: bool = False
    step_fit: StepFit = field(default_factory=lambda: fit_step_time(()))
    model_config: dict[str, Any] | None = None

    def s(self, name: str) -> float | None:
        """One signal's value (None when unknown)."""
        return self.signals.get(name)

    @property
    def evidence_queue(self) -> str:
        """The queue in one clause: average, max, trend and growth over the window."""
        return (
            f"{fig(self.wait_avg, 1)} requests waiting on average (max {fig(self.wait_max)}, "
            f"trend {fig(self.trend, 3)} req/s = {fig(self.growth, 1)} over {fig(self.window)} s)"
        )


def _infer_limits(
    signals: Signals, limits: Limits, queued: bool, kv_room: bool
) -> tuple[int | None, str, int | None, str, tuple[str, ...]]:
    """max_num_seqs and max_num_batched_tokens for the rules, inferred from the gauges when unknown.

    Only limits whose source is ``default`` (vLLM's default assumed, nothing read) are inferred, and
    only with a queue and KV room (so one of the other two admission limits refused the queue):

    - running sits at an integer N (``running_avg >= N - 0.5`` with N = ``running_max``, below the
      default) while steps carry about one token per running request (decode only: no prompt is
      being prefilled, so the budget is not what refuses them), or while prompts longer than the mean
      step are each prefilled in under :data:`PREFILL_SPLIT_STEPS` step times (the budget holds a whole
      prompt, so it is not what refuses them either): ``max_num_seqs`` = N;
    - otherwise, unless whole prompts are prefilled in one step as above, steps carry far more tokens than
      requests run (prefill in every step) and the mean
      step is below 90 % of the default budget: the budget is the mean step (a binding budget fills
      every step); a mean step above the default budget means the server runs a larger one, at least
      that mean.

    Returns ``(n_seqs, n_seqs_how, budget, budget_how, inferred_names)``.
    """
    n_seqs, budget = limits.value("max_num_seqs"), limits.value("max_num_batched_tokens")
    n_how, b_how = limits.max_num_seqs.source, limits.max_num_batched_tokens.source
    run_avg, run_max = signals.get("running_avg"), signals.get("running_max")
    tps = signals.get("tokens_per_step_avg")
    inferred: list[str] = []
    if not (queued and kv_room and run_avg is not None and run_max and run_max >= 1):
        return n_seqs, n_how, budget, b_how, ()
    # decode only: about one token per running request per step (no step data: not excluded)
    decode_only = tps is None or tps <= 2 * run_max
    # prompts longer than the mean step, each prefilled in about one step: the budget holds a whole prompt,
    # so a budget of the mean step (the inference below) cannot be what refused the queue
    prompt, split = signals.get("prompt_tokens_per_request"), signals.get("prefill_step_times")
    whole_prompts = (
        tps is not None and prompt is not None and split is not None and split < PREFILL_SPLIT_STEPS and prompt > tps
    )
    flat = run_avg >= run_max - PINNED_SLACK
    if (
        limits.max_num_seqs.source == "default"
        and flat
        and (n_seqs is None or run_max < n_seqs)
        and (decode_only or whole_prompts)
    ):
        if tps is None:
            steps = "steps not measured (a small token budget would look the same)"
        elif decode_only:
            steps = f"steps carried {fig(tps, 1)} tokens (decode only, no prefill refused by the budget)"
        else:
            steps = (
                f"prompts of {number(prompt)} tokens were prefilled in {fig(split, 1)} step times though steps "
                f"averaged {fig(tps, 1)} tokens (the budget holds a whole prompt and refused none)"
            )
        n_how = (
            f"inferred: running sat at {count(run_max)} while requests waited with KV room and {steps}; vLLM's "
            f"default would be {count(n_seqs)}"
        )
        n_seqs = int(run_max)
        inferred.append("max_num_seqs")
    elif (
        limits.max_num_batched_tokens.source == "default" and tps is not None and not decode_only and not whole_prompts
    ):
        if budget is None or tps < BUDGET_FULL_FILL * budget:
            b_how = (
                f"inferred: steps averaged {fig(tps, 1)} tokens with a queue, free slots and KV room, which only "
                f"a budget of that size explains; vLLM's default would be {count(budget)}"
            )
            budget = max(1, round(tps))
            inferred.append("max_num_batched_tokens")
        elif tps > budget * 1.1:
            b_how = (
                f"inferred: steps averaged {fig(tps, 1)} tokens, more than vLLM's default {count(budget)}, so "
                "the server runs a larger budget, at least that mean"
            )
            budget = max(budget, round(tps))
            inferred.append("max_num_batched_tokens")
    return n_seqs, n_how, budget, b_how, tuple(inferred)


def derive_facts(signals: Signals, limits: Limits) -> Facts:
    """Every fact the rules read, derived once (class and module docstrings for the definitions)."""
    s = signals.get
    window = signals.window_seconds
    run_avg, run_max, wait_avg, wait_max = s("running_avg"), s("running_max"), s("waiting_avg"), s("waiting_max")
    kv_avg, kv_max = s("kv_usage_avg"), s("kv_usage_max")
    preempt = s("preemptions_increase") or 0.0
    trend = s("waiting_trend_per_s")
    growth = trend * window if trend is not None else None
    queued = (wait_avg or 0) > 0 and (wait_max or 0) >= 1
    growing = queue_growing(growth)
    standing = queued and (growing or (wait_avg or 0) >= 1)
    ceiling, ceiling_how = kv_ceiling(signals, limits)
    at_ceiling = kv_max is not None and ceiling is not None and kv_max >= ceiling
    kv_room = not at_ceiling and preempt < 1
    n_seqs, n_how, budget, b_how, inferred = _infer_limits(signals, limits, queued, kv_room)
    free_slots = n_seqs is not None and run_avg is not None and run_avg < n_seqs - PINNED_SLACK
    pinned = n_seqs is not None and run_avg is not None and run_avg >= n_seqs - PINNED_SLACK
    cap_wait = s("waiting_capacity_avg")
    # vLLM's reason="capacity" counts every ordinary waiting request (SchedulerStats.num_waiting_reqs:
    # short of KV, slots or budget), "deferred" the skipped ones (LoRA, KV transfer): alone it does not
    # name KV. With free slots and KV at the ceiling it shows the ceiling binding below 1.0.
    capacity_blocked = cap_wait is not None and cap_wait > 0 and free_slots and at_ceiling
    tps = s("tokens_per_step_avg")
    if "max_num_batched_tokens" in inferred:
        share, share_edge = None, None
    else:
        share, share_edge = budget_share(signals, limits)
    steps = s("iteration_steps_increase")
    step_rate = steps / window if steps and window else None
    gen = s("generation_tokens_per_s")
    knee, knee_how = compute_knee(limits)
    full = steps_full(share, tps, budget)
    # no step measurement at all: with a standing queue, free slots and KV room, the budget is the only
    # admission limit left that can have refused the queue, so it was used up (full by elimination)
    by_elimination = tps is None and share is None and standing and free_slots and kv_room and budget is not None
    return Facts(
        signals=signals,
        limits=limits,
        window=window,
        run_avg=run_avg,
        run_max=run_max,
        wait_avg=wait_avg,
        wait_max=wait_max,
        kv_avg=kv_avg,
        kv_max=kv_max,
        preempt=preempt,
        trend=trend,
        growth=growth,
        queued=queued,
        growing=growing,
        standing=standing,
        n_seqs=n_seqs,
        n_seqs_how=n_how,
        budget=budget,
        budget_how=b_how,
        pinned=pinned,
        free_slots=free_slots,
        tokens_per_step=tps,
        fill=tps / budget if tps is not None and budget else None,
        share=share,
        share_edge=share_edge,
        full=full or by_elimination,
        full_by_elimination=by_elimination and not full,
        knee=knee,
        knee_how=knee_how,
        ceiling=ceiling,
        ceiling_how=ceiling_how,
        at_ceiling=at_ceiling,
        capacity_blocked=capacity_blocked,
        kv_room=kv_room,
        kv_known=kv_max is not None,
        step_rate=step_rate,
        decode_per_step=gen / step_rate if gen is not None and step_rate else None,
        inferred=inferred,
        step_fit=fit_step_time(signals.step_points),
    )
