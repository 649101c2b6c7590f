"""Facts: what the rules decide on, derived once per target from its signals and limits.

vLLM V1's scheduler (``vllm/v1/core/sched/scheduler.py`` ``Scheduler.schedule``, vLLM 0.29) first
schedules the running requests; when one of them needs a KV block and none is free it preempts, and
a step that preempted admits nobody. Then it takes waiting requests from the head of the queue
while, in this order (:data:`ADMISSION_ORDER`):

1. the step's token budget ``max_num_batched_tokens`` is not used up by running requests and earlier
   admissions (``while (self.waiting or self.skipped_waiting) and token_budget > 0``);
2. fewer than ``max_num_seqs`` requests run (``if num_running >= self.max_num_running_reqs: break``);
3. the request is not deferred: a structured-output grammar still compiling or a remote KV transfer
   (``_is_blocked_waiting_status``), or its LoRA adapter cannot join a batch that already holds
   ``max_loras`` adapters: skipped, counted in ``reason="deferred"`` of
   ``vllm:num_requests_waiting_by_reason``;
4. the KV cache can take its blocks: since vLLM PR #37307 (``scheduler_reserve_full_isl``, default
   True, ``vllm/config/scheduler.py``) the *whole prompt's* blocks must fit (``allocate_slots``).

Compute speed never makes a request wait, it makes steps slow. So a queue that costs requests time
means one of these refused admission, and the first one in that order that measures as binding is
what refused it: raising it would hand the queue to the next (the runner-up).

Reading vLLM's metrics as vLLM produces them (``vllm/v1/metrics/loggers.py``
``PrometheusStatLogger.record`` and ``vllm/v1/metrics/stats.py`` ``IterationStats``, vLLM 0.29):
``vllm:iteration_tokens_total`` observes, per step with output, the prompt tokens of prefills that
*completed* in that step plus the generated tokens. A step that only ran a partial prefill chunk
records nothing of that chunk; the chunk's tokens arrive with the completing step. So under
chunked prefill a budget cap does not show as mass in the budget's bucket. The window's *mean*
(``_sum`` / ``_count``) still counts every computed token once, over the steps that produced
output (every step while a request decodes): it is the fill measure used here; the bucket share is
used only when ``_sum``/``_count`` are missing. ``vllm:num_requests_running`` is set after each step
from the running list once that step's finished requests left it (``Scheduler.make_stats`` in
``update_from_output``), so at a pinned cap the gauge reads ``max_num_seqs`` less the requests that
finished in the step before the sample (:func:`running_dip`).

Pure functions, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kvpilot.diagnose.limits import Limits
from kvpilot.diagnose.model import detail
from kvpilot.diagnose.promql import histogram_quantile, share_above, share_in_bucket
from kvpilot.diagnose.severity import growing as queue_growing
from kvpilot.diagnose.signals import SignalName, Signals
from kvpilot.diagnose.steptime import StepFit, fit_step_time
from kvpilot.gpus import GPU_PROFILES, gpu_profile
from kvpilot.kv.spec import ModelConfig
from kvpilot.metrics.catalog import version_tuple
from kvpilot.text.numbers import count, fig, number, percent
from kvpilot.vllm.defaults import LARGE_GPU_MAX_NUM_BATCHED_TOKENS, has_max_num_active_seqs

#: the admission checks of ``Scheduler.schedule`` in the order vLLM 0.29 makes them for a waiting request
#: (module docstring): the first that measures as binding is what refused the queue
ADMISSION_ORDER: tuple[str, ...] = ("token_budget", "max_num_seqs", "lora", "kv_cache")

#: share of engine steps in the token budget's bucket (or above) from which the budget binds, when
#: only buckets are known: a majority of steps. The bucket is found from max_num_batched_tokens.
BUDGET_FULL_SHARE = 0.5

#: The low end of every batch limit's grey zone (docs/diagnosis.md, "Graded limits"): a limit at most half in use
#: on average (half the budget of the mean step, half the sequence slots of the mean batch) had room in most of
#: the window, so it is not what held a standing queue. From its full/pinned threshold up a limit binds (full
#: confidence); between this and that threshold the reading is graded (:func:`closeness`), the limit named from
#: the midpoint up with confidence falling towards it, ``unexplained_queue`` below it with the limit as the other
#: reading. No verdict flips between two causes a few percent apart.
GRADED_LOW = 0.5

#: a closeness at or above this names the limit (the midpoint of its grey zone); below it the queue is unexplained
GRADED_MID = 0.5

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

#: A request admitted in the first step after it arrives waits only for the running step to end: half a
#: step on average (arrivals fall anywhere in it), at most one (``vllm:request_queue_time_seconds``: arrival
#: to first scheduling, ``vllm/v1/metrics/stats.py``). A mean queue time of at least one step time means
#: requests were refused admission in later steps too: a queue that costs time. (vLLM's own healthy
#: recording: 0.49 step times; every limit-bound recording: 15 step times or more.)
QUEUE_STEP_TIMES = 1.0

#: running within this many requests of a cap counts as pinned at it when no request finishes (the
#: gauge is an integer: 3.6 of 4 is pinned)
PINNED_SLACK = 0.5

#: the mean dip of the running gauge below a pinned cap (requests finished per step, :func:`running_dip`)
#: varies from sample to sample like a count of independent finishes (variance = mean); its mean over n
#: samples is allowed this many standard deviations, sqrt(dip / n)
PINNED_NOISE_SD = 3.0

#: steps carrying at most this many tokens per running request are decode-only: each running request
#: computes one token per step (two allows for a few admissions among the decodes), so no prompt is being
#: prefilled and the budget is not what refuses the queue
DECODE_TOKENS_PER_RUNNING = 2.0

#: a mean step above this multiple of vLLM's default budget contradicts that default: a step computes at
#: most the budget, and only steps without output (a lone prompt's partial chunks) fold their tokens into a
#: later observation, so a mean a little above the budget is possible, one 10 % above it is not
DEFAULT_BUDGET_EXCEEDED = 1.1


#: vLLM refuses the head of the queue on KV when its prompt's blocks exceed the free ones
#: (``KVCacheManager.allocate_slots`` returns None), and the head is any request: the usage from which refusals come
#: is 1 less a long prompt's share of the cache, measured as this quantile of the window's prompt lengths
#: (``vllm:request_prompt_tokens``, interpolated within its bucket as PromQL's ``histogram_quantile`` does)
HEAD_PROMPT_QUANTILE = 0.9


def head_fits(signals: Signals, limits: Limits) -> bool:
    """The median prompt's blocks fit beside the KV usage of the batch at its plateau: the KV cache refused the head
    in fewer than half of the steps, whatever its peak did.

    A cap refuses only while the batch is at it, so the usage that counts is the plateau's: the average usage
    scaled by ``running_max / running_avg`` (each running request holding the average share). Read off the average
    alone, a batch that reached 2 now and then (1.29 on average) beside 2,592-token prompts in a 7,776-token cache
    looked like a cap of 2 with room; vLLM 0.29's scheduler refused its head on the KV cache in 96 % of the queued
    time and never on max_num_seqs.

    :func:`kv_ceiling` places the ceiling for a long prompt (:data:`HEAD_PROMPT_QUANTILE`), so a peak past it says
    the KV cache refused some heads; whether it refused most of them is the typical head against the typical usage
    (``KVCacheManager.allocate_slots``, vllm/v1/core/kv_cache_manager.py, vLLM 0.29.0: the prompt's blocks against
    the free ones). False when usage, the prompts or the pool are unknown.
    """
    kv_avg, kv_tokens = signals.get("kv_usage_avg"), limits.value("kv_cache_tokens")
    median = histogram_quantile(0.5, signals.buckets.get("prompt_tokens", []))
    if kv_avg is None or not kv_tokens or median is None or not math.isfinite(median.value):
        return False
    run_avg, run_max = signals.get("running_avg"), signals.get("running_max")
    if run_avg and run_max and run_max > run_avg:
        kv_avg *= run_max / run_avg
    return kv_avg + median.value / kv_tokens <= 1.0


def kv_ceiling(signals: Signals, limits: Limits) -> tuple[float | None, str]:
    """The KV usage at which new requests stop being admitted (ratio 0-1), and how it was derived.

    A new request needs room for its whole prompt (``scheduler_reserve_full_isl``, vLLM PR #37307)
    or, when it is smaller, a running request's share, so admission stops about two requests' worth
    below 1.0: ``1 - 2 x max(kv_avg / running_avg, prompt_tokens_per_request / kv_cache_tokens)``
    (``KVCacheManager.allocate_slots``, ``vllm/v1/core/kv_cache_manager.py``: cached-but-evictable blocks
    count as free). vLLM sets the usage gauge after each step, once that step's finished requests freed
    their blocks, so at the ceiling the gauge reads below it by their share: the requests finished per step
    (:func:`running_dip`, plus its noise over the window's samples, :data:`PINNED_NOISE_SD`) times one
    running request's share ``kv_avg / running_avg``. The ceiling returned is that reading, clamped to
    [0.5, 1].

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
    # the head's prompt measured: the window's prompts' HEAD_PROMPT_QUANTILE (vllm:request_prompt_tokens)
    head = histogram_quantile(HEAD_PROMPT_QUANTILE, signals.buckets.get("prompt_tokens", []))
    measured = head is not None and math.isfinite(head.value) and bool(kv_tokens) and head.value > 0
    if measured and head is not None and kv_tokens:
        share, reserve, what = head.value / kv_tokens, 1.0, "the window's p90 prompt's share of KV"
    else:
        reserve, what = 2.0, "one request's share of KV"
    # the gauge is set after each step once its finished requests freed their blocks (as the running gauge,
    # :func:`running_dip`): at the ceiling it reads that much below it, about the finished requests' share
    freed = (running_dip(signals) or 0.0) + _dip_noise(signals) if run_avg and run_avg > 0 else 0.0
    freed_share = freed * kv_avg / run_avg if run_avg and run_avg > 0 else 0.0
    ceiling = min(1.0, max(0.5, 1.0 - reserve * share - freed_share))
    how = (
        f"admission ceiling {number(ceiling, 3)}"
        + detail(
            f" = 1 - {fig(reserve)} x {number(share, 4)} ({what})"
            + (
                f" - {number(freed_share, 4)} (the {number(freed, 2)} requests a step finishes, freed before the "
                "gauge is set)"
                if freed_share > 0
                else ""
            )
        )
        if shares or measured
        else "admission ceiling 1.0 (no running requests to size a request's share)"
    )
    return ceiling, how


def little_queue_steps(signals: Signals) -> float | None:
    """The mean wait of every request in the queue, in step times, by Little's law: requests waiting on average over
    requests admitted per second (``vllm:request_queue_time_seconds``' count: first schedulings in the window), over
    the mean step time.

    ``vllm:request_queue_time_seconds`` observes a request only when it is first scheduled, so requests a limit
    keeps waiting (LoRA adapters deferred behind ``max_loras`` while others pass) are missing from its mean, which
    then reads a fraction of a step while the queue stands; the waiting gauge counts them. None when unknown.
    """
    waiting, admitted, step = (
        signals.get("waiting_avg"),
        signals.get("queue_time_count_increase"),
        signals.get("itl_mean_s"),
    )
    window = signals.window_seconds
    if waiting is None or not admitted or admitted <= 0 or not step or step <= 0 or not window:
        return None
    return waiting / (admitted / window) / step


def running_dip(signals: Signals) -> float | None:
    """How far vLLM's running gauge reads below a pinned ``max_num_seqs`` on average (requests).

    The gauge is set after each step once that step's finished requests left the running list
    (module docstring); with a queue, the next step admits their replacements. So a scrape at a
    pinned cap reads ``max_num_seqs`` less the requests that finished in the step before it, on
    average the requests finished per step: ``increase(vllm:request_success_total) /
    increase(vllm:iteration_tokens_total_count)`` over the window. A cap of 1,024 whose requests
    each decode 40 tokens reads about 1,024 / 40 = 25.6 below it (998); a cap of 4 whose requests
    decode 500 tokens, 0.008. ``None`` without either counter.
    """
    finished, steps = signals.get("requests_finished_increase"), signals.get("iteration_steps_increase")
    if finished is None or not steps or steps <= 0:
        return None
    return max(0.0, finished / steps)


def full_at_cap(signals: Signals, cap: int | None) -> bool | None:
    """The running list full at ``cap`` in at least half of the window's samples: the gauge's median plus its dip
    (:func:`running_dip`, the requests a step finishes before the gauge is set) within :data:`PINNED_SLACK` of the
    cap. None when the median or the cap is unknown.

    vLLM checks the cap before it asks the KV cache for blocks (``Scheduler.schedule``: ``num_running >=
    max_num_running_reqs`` breaks first, vllm/v1/core/sched/scheduler.py, vLLM 0.29.0), so while the list is full
    the cap refuses the head, and only in the steps between (a preemption took a request out, or a finish left a
    slot the head's blocks did not fit) can the KV cache. A drawn scenario at a cap of 8 with 33 preemptions: the
    gauge at 8 in most samples (median 8), the cap refused the head in 67 % of the queued time; at a cap of 4 with
    KV at its ceiling, median 3: the KV cache refused it in 74 %.
    """
    median = signals.get("running_median")
    if median is None or not cap:
        return None
    return median + (running_dip(signals) or 0.0) >= cap - PINNED_SLACK


def _dip_noise(signals: Signals) -> float:
    """:data:`PINNED_NOISE_SD` standard deviations of the mean dip over the window's samples, ``sqrt(dip / n)``."""
    dip = running_dip(signals) or 0.0
    samples = signals.get("samples_in_window") or 1.0
    return PINNED_NOISE_SD * math.sqrt(dip / max(1.0, samples))


def pinned_slack(signals: Signals) -> float:
    """Requests below a cap the running average may sit and still be pinned at it.

    :data:`PINNED_SLACK` (the gauge is an integer) plus the expected dip (:func:`running_dip`) plus
    :data:`PINNED_NOISE_SD` standard deviations of its mean over the window's samples,
    ``sqrt(dip / samples)``. Without the counters the dip is unknown and only :data:`PINNED_SLACK` is
    allowed.
    """
    return PINNED_SLACK + (running_dip(signals) or 0.0) + _dip_noise(signals)


def closeness(use: float, threshold: float) -> float:
    """Where a limit's use (a share of the limit: the mean step over the budget, the batch over max_num_seqs)
    stands in its grey zone: 0 at or below :data:`GRADED_LOW`, 1 at or above ``threshold`` (full, pinned),
    linear between (module constants for why).
    """
    if use >= threshold:
        return 1.0
    if threshold <= GRADED_LOW or use <= GRADED_LOW:
        return 0.0
    return (use - GRADED_LOW) / (threshold - GRADED_LOW)


def batch_per_step(signals: Signals) -> float | None:
    """Requests that ran in the average step, read off the counters: generated tokens per step with output.

    Every request a step runs to the end of its prompt samples one token in it (vLLM's
    ``IterationStats.num_generation_tokens``, counted into ``vllm:generation_tokens_total``; the step into
    ``vllm:iteration_tokens_total_count``), so the increase of the first over the second is the mean number of
    requests each step decoded: direct evidence of the batch, free of when the running gauge was sampled (a real
    server's gauge, set between steps and read at 1 Hz, averaged 1.24-1.32 at a cap of 2 whose both slots
    sampled a token every step). A request still in a partial prefill chunk samples nothing, so this is at most
    the batch. None without either counter.
    """
    gen, steps = signals.get("generation_tokens_per_s"), signals.get("iteration_steps_increase")
    window = signals.window_seconds
    if gen is None or not steps or steps <= 0 or not window:
        return None
    return gen * window / steps


def running_level(signals: Signals) -> float | None:
    """The running gauge's level over the window: the larger of its mean and its median (requests).

    The median keeps a window that starts cold or holds a short lull (a few samples of 0 or 21 before the cap
    fills) from reading a cap held in most samples as free; the mean keeps a large dip (a cap of 1,024 reading
    998) from hanging on which sample is the middle one.
    """
    avg, median = signals.get("running_avg"), signals.get("running_median")
    known = [v for v in (avg, median) if v is not None]
    return max(known) if known else None


def fits_a_cap_at(signals: Signals, cap: float) -> bool:
    """True when the running gauge is what a batch pinned at ``cap`` requests would show.

    At a pinned cap each step runs ``cap`` requests and the gauge reads ``cap`` less those that finished in it
    (:func:`running_dip`), so :func:`running_level` ``+ dip`` is the batch each step ran: within :func:`pinned_slack` of
    the cap from below, and never above it by more than :data:`PINNED_SLACK` and the noise (a batch cannot
    exceed its cap). Prefill-heavy traffic whose requests each live two steps (the compute-bound recording: 11.4
    running of a max of 12 with 10.6 finishing per step, a batch of 22) does not fit a cap of 12.
    """
    level = running_level(signals)
    if level is None:
        return False
    noise = _dip_noise(signals)
    # the gauge's batch, or the counters' requests per step (batch_per_step: a real server's gauge, read between
    # steps, dips further than the finishes explain)
    batches = [level + (running_dip(signals) or 0.0), batch_per_step(signals)]
    return any(b is not None and cap - PINNED_SLACK - noise <= b <= cap + PINNED_SLACK + noise for b in batches)


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
    :mod:`kvpilot.gpus` (datasheet figures); unknown GPU: the largest knee of those profiles
    (L4: 121e12 / 300e9 = 403). An unknown GPU's knee never makes a verdict: it only qualifies the effect
    of a larger budget; a named GPU's does past :data:`KNEE_COMPUTE_BOUND` knees (:func:`budget_binds`).
    """
    if known_knee(limits) is not None:
        gpu = gpu_profile(limits.gpu_name or "")
        return (
            gpu.peak_flops / gpu.bandwidth,
            f"{gpu.name}: {fig(gpu.peak_flops / 1e12, 1)} TFLOP/s / {fig(gpu.bandwidth / 1e12, 2)} TB/s",
        )
    knee = max(g.peak_flops / g.bandwidth for g in GPU_PROFILES.values())
    return knee, "GPU unknown: the largest knee of kvpilot's GPU profiles"


#: full steps at a budget of at least this many times a named GPU's compute knee are compute-bound: a step of
#: n tokens costs max(weights read, n x FLOP per token) (kvpilot.engine.hardware.CostModel.step_time, the
#: roofline), so past twice the knee the compute term is at least twice the weight read and the step's time grows
#: with its tokens; a larger budget lengthens the steps without adding tokens per second
KNEE_COMPUTE_BOUND = 2.0


def time_fill(fill: float | None, budget: int | None, knee: float | None) -> float | None:
    """The share of the window's time that steps spent at the budget, on a named GPU (``knee``:
    :func:`known_knee`) with prompts chunked by the budget (the caller's test); ``None`` where it is the step share
    itself (GPU unknown, a budget within the knee).

    vLLM's scheduler refuses the head on the budget in the steps that spend it, and a refusal lasts as long as its
    step: a step of ``n`` tokens lasts ``max(1, n / knee)`` weight reads (the roofline,
    ``kvpilot.engine.hardware.CostModel.step_time``), so a full step of a budget past the knee outlasts a decode
    step ``r = budget / knee`` times. Reading the mean fill ``p`` as the share of steps at the budget (the rest
    decoding a few tokens), their share of the time is ``p r / (p r + 1 - p)``: on an A100 (knee 153) a
    512-token budget filled 73 % on average (vLLM 0.29: 374 of 512) held the budget spent about 90 % of the time.
    """
    if fill is None or budget is None or knee is None or budget <= knee:
        return None
    p = min(max(fill, 0.0), 1.0)
    r = budget / knee
    return p * r / (p * r + 1 - p)


def known_knee(limits: Limits) -> float | None:
    """The compute knee (:func:`compute_knee`) of the GPU the user or the spec named; ``None`` when the GPU is
    unknown (the largest profile's knee is then only a bound, never a verdict).
    """
    if not limits.gpu_name:
        return None
    try:
        gpu = gpu_profile(limits.gpu_name)
    except ValueError:
        return None
    return gpu.peak_flops / gpu.bandwidth


def budget_binds(full: bool, budget: int | None, step_fit: StepFit | None = None, knee: float | None = None) -> bool:
    """True when full steps (``full``: :func:`steps_full`, or full by elimination) are a token-budget cap,
    False when they are compute-bound (or not full).

    The step-time fit decides when it measured either side of its thresholds
    (:mod:`kvpilot.diagnose.steptime`: ``step_fit.flat`` = a cap at any budget, ``step_fit.grows`` =
    compute-bound at any budget); otherwise, on a named GPU (``knee``: :func:`known_knee`), a budget of at
    least :data:`KNEE_COMPUTE_BOUND` knees is compute-bound; otherwise the budget's size: below
    :data:`LARGE_BUDGET` a cap.
    """
    if not full or budget is None:
        return False
    if step_fit is not None and (step_fit.grows or step_fit.flat):
        return step_fit.flat
    if knee is not None and budget >= KNEE_COMPUTE_BOUND * knee:
        return False
    return budget < LARGE_BUDGET


@dataclass(frozen=True)
class Inferred:
    """The two batch limits the rules use, each read or inferred from the gauges (:func:`infer_limits`).

    Attributes:
        n_seqs / n_seqs_how: max_num_seqs and its source (``inferred: ...`` when read off the gauges).
        budget / budget_how: max_num_batched_tokens (tokens) and its source.
        names: the limits inferred (lower confidence).
        budget_evidence: for an inferred budget, what shows it binds beyond the mean step it is set to
            (the prefill spans or the steps' mass at one size); "" otherwise.
        budget_bound: the budget is only a lower bound (a default the steps contradict: at least the mean
            step), so how full its steps are is not measured.
        seqs_bound: the same for max_num_seqs (a default the running gauge contradicts: at least
            ``running_max``), so running at it is pinned only with KV room (:func:`derive_facts`).
    """

    n_seqs: int | None
    n_seqs_how: str
    budget: int | None
    budget_how: str
    names: tuple[str, ...] = ()
    budget_evidence: str = ""
    budget_bound: bool = False
    seqs_bound: bool = False


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
            grew by at least one request; standing: queued and a request left waiting in at least half the samples
            (``waiting_median >= 1``; where the median is unknown, growing or ``waiting_avg >= 1``).
        queue_steps: mean queue time in step times (``queue_step_times``); queue: a standing queue whose
            requests waited at least :data:`QUEUE_STEP_TIMES` step times on average (or whose queue time
            is not exported): what every queue verdict needs.
        n_seqs / n_seqs_how: the max_num_seqs the rules use and its source (``inferred: ...`` when
            read from a flat running gauge), or the admission cap below it (:func:`active_cap`).
        cap_name / configured_seqs: ``max_num_active_seqs`` when n_seqs is that cap, with the configured
            max_num_seqs. vllm_version / has_active_cap: :func:`stated_release`.
        budget / budget_how: the same for max_num_batched_tokens (tokens).
        budget_evidence: for an inferred budget, the evidence that it binds (:class:`Inferred`).
        dip / slack: :func:`running_dip` and :func:`pinned_slack`.
        batch / batch_how: the requests each step ran: the running gauge's level plus its dip (``gauge``), or
            :func:`batch_per_step` from the counters (``counters``) where that is larger.
        seqs_close / budget_close: :func:`closeness` of the batch to max_num_seqs (threshold: within
            :data:`PINNED_SLACK` and the dip's noise of it) and of the mean step to the budget (threshold
            :data:`BUDGET_FULL_FILL`); None when not measured.
        pinned / free_slots: the batch at n_seqs (``seqs_close`` 1: within ``slack`` of it) / below it.
        tokens_per_step: mean tokens per engine step; fill: tokens_per_step / budget; time_fill: :func:`time_fill`
            (full too when it reaches :data:`BUDGET_FULL_FILL`).
        share / share_edge: share of steps in the budget's bucket and that bucket's lower edge.
        full: :func:`steps_full`, or ``full_by_elimination``: no step measurement (or a budget known only as
            at least the mean step), but a standing queue
            with free slots, KV room and nothing deferred leaves the budget as the only admission limit
            that can have refused it. budget_cap: :func:`budget_binds` (full steps are a cap, not compute).
        knee / knee_how: :func:`compute_knee`.
        ceiling / ceiling_how: :func:`kv_ceiling`; at_ceiling: ``kv_max >= ceiling``.
        capacity_blocked: requests waited for capacity with free slots and KV at the ceiling.
        kv_room: not at the ceiling and no preemption; kv_known: the KV gauge exists.
        full_at_cap: :func:`full_at_cap` at n_seqs (None: the median unknown).
        deferred: requests deferred on average (``reason="deferred"``); lora_max / lora_adapters /
            lora_seen: the server's ``max_loras``, the most LoRA adapters with scheduled requests at once (slots in
            use) and the distinct adapters seen over the window (``vllm:lora_requests_info``); lora_blocked:
            requests deferred while every LoRA slot held an adapter (vLLM defers a request whose adapter would
            exceed ``max_loras``); lora_head: :func:`deferred_head`.
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
    queue_steps: float | None
    queue: bool
    n_seqs: int | None
    n_seqs_how: str
    budget: int | None
    budget_how: str
    dip: float | None
    slack: float
    pinned: bool
    free_slots: bool
    tokens_per_step: float | None
    fill: float | None
    share: float | None
    share_edge: float | None
    full: bool
    budget_cap: bool
    knee: float
    knee_how: str
    ceiling: float | None
    ceiling_how: str
    at_ceiling: bool
    capacity_blocked: bool
    kv_room: bool
    kv_known: bool
    deferred: float | None
    lora_max: float | None
    lora_adapters: float | None
    lora_seen: float | None
    lora_blocked: bool
    lora_head: bool
    step_rate: float | None
    decode_per_step: float | None
    inferred: tuple[str, ...] = field(default=())
    budget_evidence: str = ""
    full_by_elimination: bool = False
    step_fit: StepFit = field(default_factory=lambda: fit_step_time(()))
    model_config: ModelConfig | None = None
    batch: float | None = None
    batch_how: str = ""
    cap_name: str = "max_num_seqs"
    configured_seqs: int | None = None
    vllm_version: str = ""
    has_active_cap: bool | None = None
    seqs_close: float | None = None
    budget_close: float | None = None
    time_fill: float | None = None
    full_at_cap: bool | None = None

    def s(self, name: SignalName) -> float | None:
        """One signal's value (None when unknown; a misspelt name is a mypy error)."""
        return self.signals.get(name)

    @property
    def evidence_queue(self) -> str:
        """The queue in one clause: average, max, trend and growth over the window, and its queue time."""
        if self.trend is None:  # one scrape of the gauge in the window: no trend to state
            trend = f"its trend unknown: one scrape in {fig(self.window)} s"
        else:
            trend = f"trend {fig(self.trend, 3)} req/s = {fig(self.growth, 1)} over {fig(self.window)} s"
        text = f"{fig(self.wait_avg, 1)} requests waiting on average (max {fig(self.wait_max)}, {trend})"
        wait = self.s("queue_time_mean_s")
        if wait is not None and self.queue_steps is not None:
            text += (
                f", each waiting {fig(wait, 3)} s on average = {number(self.queue_steps, 1)} step times "
                "(vllm:request_queue_time_seconds)"
            )
        return text


#: a budget of the mean step splits a P-token prompt over at least P / (mean step - decode tokens per step) steps
#: of about the mean step's length (every step full), so the prefill time measures at least that many step
#: times; measured below this share of it, prompts went through in fewer, longer steps than such a budget allows
SPAN_AGREEMENT = 0.8


def _prefill_spans(signals: Signals) -> float | None:
    """Mean prefill time in step times (``prefill_step_times``), or None."""
    return signals.get("prefill_step_times")


def steps_a_budget_needs(signals: Signals, budget: float) -> float | None:
    """Steps a budget of ``budget`` tokens takes to prefill the mean prompt: ``P / (budget - d)``, d the generated
    tokens per step (``generation_tokens_per_s`` over steps per second; 0 when unknown). None when unknown or
    when the decodes alone fill the budget.
    """
    prompt, gen, steps = (
        signals.get("prompt_tokens_per_request"),
        signals.get("generation_tokens_per_s"),
        signals.get("iteration_steps_increase"),
    )
    window = signals.window_seconds
    d = gen / (steps / window) if gen is not None and steps and window else 0.0
    if prompt is None or budget - d <= 0:
        return None
    return prompt / (budget - d)


def _plateau_steps(signals: Signals, run_max: float) -> tuple[bool, bool, str]:
    """Whether the steps under a running plateau at ``run_max`` show the budget refused none of the queue:
    ``(decode_only, whole, steps)``, ``steps`` saying so in a clause (see :func:`infer_limits`).
    """
    tps = signals.get("tokens_per_step_avg")
    # decode only: about one token per running request per step (no step data: not excluded)
    decode_only = tps is None or tps <= DECODE_TOKENS_PER_RUNNING * run_max
    spans, prompt = _prefill_spans(signals), signals.get("prompt_tokens_per_request")
    # prompts not split the way a budget of the mean step would split them: under 2 step times (the budget held
    # each whole prompt), or fewer than such a budget needs (one long prefill step reads as a couple of step
    # times, SPAN_AGREEMENT): that budget refused none of them
    needed = steps_a_budget_needs(signals, tps) if tps is not None else None
    whole = spans is not None and (
        spans < PREFILL_SPLIT_STEPS or (needed is not None and spans < SPAN_AGREEMENT * needed)
    )
    if tps is None:
        steps = "steps not measured (a small token budget would look the same)"
    elif decode_only:
        steps = f"steps carried {fig(tps, 1)} tokens (decode only, no prefill refused by the budget)"
    else:
        steps = (
            f"prompts of {number(prompt)} tokens were prefilled in {fig(spans, 1)} step times though steps "
            f"averaged {fig(tps, 1)} tokens"
            + (
                f" (a budget of that size would take {number(needed, 1)} steps; the budget refused none)"
                if needed is not None and spans is not None and spans >= PREFILL_SPLIT_STEPS
                else " (the budget holds a whole prompt and refused none)"
            )
        )
    return decode_only, whole, steps


def stated_release(limits: Limits) -> tuple[str, bool | None]:
    """The server's vLLM release as stated (``"vLLM 0.32.0 (cli)"``, "" when not) and whether it has
    ``max_num_active_seqs`` (None when not stated).
    """
    text = limits.value("vllm_version")
    release = version_tuple(str(text)) if text else ()
    if len(release) < 2:
        return "", None
    return f"vLLM {text} ({limits.vllm_version.source})", has_max_num_active_seqs(release)


def active_cap(signals: Signals, limits: Limits, inf: Inferred, queue: bool, kv_room: bool) -> tuple[int, str] | None:
    """The admission cap below the configured ``max_num_seqs`` (vLLM 0.31+ ``max_num_active_seqs``), or None.

    ``(cap, how)``: read when ``max_num_active_seqs`` is given below ``max_num_seqs``; else inferred when
    ``max_num_seqs`` was read (not assumed, not inferred), the server's vLLM is stated as 0.31 or later, and
    with a queue and KV room running plateaus at an integer below it (``running_max``, a batch pinned there:
    :func:`fits_a_cap_at`) while the steps show the budget refused none (:func:`_plateau_steps`).
    """
    has_it = stated_release(limits)[1]
    if has_it is False:
        return None
    active, n_seqs = limits.value("max_num_active_seqs"), inf.n_seqs
    if active is not None:
        if n_seqs is not None and active >= n_seqs:
            return None
        return active, f"max_num_active_seqs {count(active)} ({limits.max_num_active_seqs.source})"
    run_max = signals.get("running_max")
    # inferred only on a release stated to have the cap: a plateau under a read max_num_seqs is otherwise as much
    # what the causes outside the limits give (deferred requests, chunked prefill off, a policy)
    if (
        not has_it
        or n_seqs is None
        or limits.max_num_seqs.source == "default"
        or "max_num_seqs" in inf.names
        or not (queue and kv_room)
        or run_max is None
        or run_max < 1
        or run_max >= n_seqs - PINNED_SLACK
        or not fits_a_cap_at(signals, run_max)
    ):
        return None
    decode_only, whole, steps = _plateau_steps(signals, run_max)
    if not (decode_only or whole):
        return None
    how = (
        f"max_num_active_seqs {count(run_max)} inferred: running plateaued at {count(run_max)} under the configured "
        f"max_num_seqs {count(n_seqs)} ({limits.max_num_seqs.source}) while requests waited with KV room and {steps}"
    )
    return int(run_max), how


def infer_limits(signals: Signals, limits: Limits, queue: bool, kv_room: bool, room_how: str = "KV room") -> Inferred:
    """max_num_seqs and max_num_batched_tokens for the rules, rejected and inferred when vLLM's default is
    assumed and the gauges say otherwise.

    Only limits whose source is ``default`` (nothing read) are inferred:

    - **contradicted** defaults are rejected at any load: running above the default ``max_num_seqs`` means
      the server runs a larger one, at least ``running_max``; steps above :data:`DEFAULT_BUDGET_EXCEEDED` x
      the default budget mean a larger budget, at least the mean step;
    - with a queue (:attr:`Facts.queue`) and KV room (so one of the two batch limits refused it):
      ``max_num_seqs`` = N when running sits at an integer N below the default (N = ``running_max`` and the
      gauge is what a batch pinned there shows: :func:`fits_a_cap_at`) while steps are decode only (at most
      :data:`DECODE_TOKENS_PER_RUNNING` tokens per running request: no prompt is prefilled for the budget
      to refuse) or prompts are not split the way a budget of the mean step would split them (prefilled in under
      :data:`PREFILL_SPLIT_STEPS` step times, or in fewer than :data:`SPAN_AGREEMENT` of the steps such a budget
      needs, :func:`steps_a_budget_needs`: that budget refused none);
    - otherwise, with prefill in every step and the mean step below :data:`BUDGET_FULL_FILL` of the
      default, ``max_num_batched_tokens`` = the mean step, but only with evidence that a budget of that size
      binds beyond the mean itself (which a budget set to it fills by definition): prompts prefilled across
      :data:`PREFILL_SPLIT_STEPS` step times or more (chunked by the budget), or, with no prefill time
      exported, a majority of steps in the one bucket holding the mean (steps of one size).
    """
    n_seqs, budget = limits.value("max_num_seqs"), limits.value("max_num_batched_tokens")
    n_how, b_how = limits.max_num_seqs.source, limits.max_num_batched_tokens.source
    run_avg, run_max = signals.get("running_avg"), signals.get("running_max")
    tps = signals.get("tokens_per_step_avg")
    names: list[str] = []
    evidence = ""
    seqs_default = limits.max_num_seqs.source == "default"
    budget_default = limits.max_num_batched_tokens.source == "default"
    flat = run_max is not None and fits_a_cap_at(signals, run_max)
    if seqs_default and run_max is not None and n_seqs is not None and run_max > n_seqs:
        n_how = (
            f"inferred: running reached {count(run_max)}, above vLLM's default {count(n_seqs)} for this GPU tier, "
            f"so the server runs a larger max_num_seqs, at least {count(run_max)}"
        )
        n_seqs = int(run_max)
        names.append("max_num_seqs")
        seqs_default = False
    if budget_default and tps is not None and budget is not None and tps > budget * DEFAULT_BUDGET_EXCEEDED:
        b_how = (
            f"inferred: steps averaged {fig(tps, 1)} tokens, more than vLLM's default {count(budget)}, so "
            "the server runs a larger budget, at least that mean"
        )
        budget = max(budget, round(tps))
        names.append("max_num_batched_tokens")
        budget_default = False
    bound = "max_num_batched_tokens" in names
    seqs_bound = "max_num_seqs" in names
    if not (queue and kv_room and run_avg is not None and run_max and run_max >= 1):
        return Inferred(n_seqs, n_how, budget, b_how, tuple(names), budget_bound=bound, seqs_bound=seqs_bound)
    decode_only, whole, steps = _plateau_steps(signals, run_max)
    spans, prompt = _prefill_spans(signals), signals.get("prompt_tokens_per_request")
    if seqs_default and flat and (n_seqs is None or run_max < n_seqs) and (decode_only or whole):
        n_how = (
            f"inferred: running sat at {count(run_max)} while requests waited with {room_how} and {steps}; vLLM's "
            f"default would be {count(n_seqs)}"
        )
        n_seqs = int(run_max)
        names.append("max_num_seqs")
    elif (
        budget_default
        and tps is not None
        and not decode_only
        and not whole
        and (budget is None or tps < BUDGET_FULL_FILL * budget)
    ):
        if spans is not None:
            evidence = (
                f"prompts of {number(prompt)} tokens were prefilled over {number(spans, 1)} step times "
                "(vllm:request_prefill_time_seconds over the mean step): chunked across steps by the budget"
            )
        else:
            mass = share_in_bucket(signals.buckets.get("iteration_tokens", []), tps)
            if mass is not None and mass >= BUDGET_FULL_SHARE:
                evidence = (
                    f"{percent(mass)} of steps recorded a size in the one bucket of "
                    "vllm:iteration_tokens_total holding the mean: steps of one size, as a cap makes them"
                )
        if evidence:
            b_how = (
                f"inferred: steps averaged {fig(tps, 1)} tokens with a queue, free slots and KV room, and "
                f"{evidence}; vLLM's default would be {count(budget)}"
            )
            budget = max(1, round(tps))
            names.append("max_num_batched_tokens")
    return Inferred(n_seqs, n_how, budget, b_how, tuple(names), evidence, bound, seqs_bound)


def deferred_head(signals: Signals) -> bool:
    """A deferred request at the head of vLLM's waiting queue in at least half of the window's samples.

    vLLM keeps the requests it deferred (a LoRA adapter that cannot join a step holding ``max_loras`` adapters,
    among other transient reasons) in a queue of their own and, under FCFS, visits that queue first in the next
    step (``Scheduler._select_waiting_queue_for_scheduling``, vllm/v1/core/sched/scheduler.py, vLLM 0.29.0): while
    a request is deferred the head of the queue is a deferred one, whatever refuses the requests behind it. The
    ``reason="deferred"`` gauge counts that queue; its median at one or more puts a deferred head in half the
    samples or more (the same half-the-window line as a queue that costs time). Where the median is unknown, its
    mean stands in.
    """
    median = signals.get("waiting_deferred_median")
    if median is None:
        median = signals.get("waiting_deferred_avg")
    return median is not None and median >= 1


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
    # a request was left waiting in at least half the samples (the median of the waiting gauge; its mean only
    # where the median is unknown): a burst that lifts the mean while most samples see no queue is not standing,
    # nor is a queue that grew but was empty in most samples (a ramp's last seconds): vLLM's scheduler left a
    # request waiting in under half the window. Growth counts only where the median is unknown.
    median = s("waiting_median")
    held = median >= 1 if median is not None else (wait_avg or 0) >= 1
    standing = queued and (held if median is not None else growing or held)
    queue_steps = s("queue_step_times")
    little = little_queue_steps(signals)
    queue = standing and (
        queue_steps is None or queue_steps >= QUEUE_STEP_TIMES or (little is not None and little >= QUEUE_STEP_TIMES)
    )
    ceiling, ceiling_how = kv_ceiling(signals, limits)
    at_ceiling = kv_max is not None and ceiling is not None and kv_max >= ceiling
    kv_room = not at_ceiling and preempt < 1
    # a flat running gauge is read as a cap where the KV cache refused the head in fewer than half the steps: at
    # a peak past the long-prompt ceiling as well, when the median prompt fit beside the batch at its plateau
    head_room = not kv_room and preempt < 1 and head_fits(signals, limits)
    room_how = "room in the KV cache for the median prompt beside the batch at its plateau" if head_room else "KV room"
    # a deferred head on full LoRA slots is vLLM's own record that the adapters' slots refused the head, while a
    # cap read off a plateau is only a reading, which the adapters explain as well (a batch held to max_loras
    # adapters' requests sits at however many those are): no limit is inferred from the batch then
    deferred = s("waiting_deferred_avg")
    lora_max, lora_adapters = s("lora_max_loras"), s("lora_adapters_max")
    lora_blocked = (
        deferred is not None
        and deferred > 0
        and lora_max is not None
        and lora_adapters is not None
        and lora_adapters >= lora_max
    )
    lora_head = lora_blocked and deferred_head(signals)
    inf = infer_limits(signals, limits, queue, (kv_room or head_room) and not lora_head, room_how)
    n_seqs, budget = inf.n_seqs, inf.budget
    n_seqs_how, cap_name, configured_seqs = inf.n_seqs_how, "max_num_seqs", None
    version, has_active = stated_release(limits)
    active = active_cap(signals, limits, inf, queue, kv_room)
    if active is not None:
        configured_seqs, cap_name = n_seqs, "max_num_active_seqs"
        n_seqs, n_seqs_how = active[0], active[1]
    dip, slack = running_dip(signals), pinned_slack(signals)
    level = running_level(signals)
    # a max_num_seqs known only as at least running_max (a contradicted default) is where running stopped, which
    # the KV cache at its ceiling explains as well (vLLM's last check refused the head): pinned only with KV room
    # the batch each step ran: the gauge's level plus its dip, or the counters' requests per step (batch_per_step)
    # where larger; tokens per step above the cap are no request count (speculative decoding samples several per
    # request) and are not used
    noise = _dip_noise(signals)
    direct = batch_per_step(signals)
    if direct is not None and (n_seqs is None or direct > n_seqs + PINNED_SLACK + noise):
        direct = None
    gauge_batch = level + (dip or 0.0) if level is not None else None
    known = [b for b in (gauge_batch, direct) if b is not None]
    batch = max(known) if known else None
    batch_how = "counters" if direct is not None and (gauge_batch is None or direct >= gauge_batch) else "gauge"
    seqs_close = (
        closeness(batch / n_seqs, (n_seqs - PINNED_SLACK - noise) / n_seqs) if n_seqs and batch is not None else None
    )
    pinned = seqs_close == 1.0 and (not inf.seqs_bound or kv_room)
    free_slots = n_seqs is not None and run_avg is not None and not pinned
    cap_wait = s("waiting_capacity_avg")
    # vLLM's reason="capacity" counts every ordinary waiting request (SchedulerStats.num_waiting_reqs:
    # short of KV, slots or budget), "deferred" the skipped ones (LoRA, KV transfer): alone it does not
    # name KV. With free slots and KV at the ceiling it shows the ceiling binding below 1.0.
    capacity_blocked = cap_wait is not None and cap_wait > 0 and free_slots and at_ceiling
    tps = s("tokens_per_step_avg")
    if "max_num_batched_tokens" in inf.names:
        share, share_edge = None, None
    else:
        share, share_edge = budget_share(signals, limits)
    steps = s("iteration_steps_increase")
    step_rate = steps / window if steps and window else None
    gen = s("generation_tokens_per_s")
    knee, knee_how = compute_knee(limits)
    # a budget known only as "at least the mean step" says nothing of how full the steps are
    measured = tps is not None and not inf.budget_bound
    fill = tps / budget if measured and tps is not None and budget else None
    # steps are either spent by a prompt's chunk or decoding only where the mean prompt needs two steps of the
    # budget or more (chunked by it); otherwise a step carries whole prompts below the budget and its fill says
    # nothing of how long the budget was spent (vLLM 0.29: 8,192 tokens, a cap of 32, 2,700-token steps: the cap)
    needed = steps_a_budget_needs(signals, budget) if budget else None
    chunked = needed is not None and needed >= PREFILL_SPLIT_STEPS
    fill_time = time_fill(fill, budget, known_knee(limits)) if chunked else None
    full = steps_full(share, tps if measured else None, budget) or (
        fill_time is not None and fill_time >= BUDGET_FULL_FILL
    )
    # no step measurement at all: with a standing queue, free slots, KV room and nothing deferred, the budget
    # is the only admission limit left that can have refused the queue, so it was used up (full by elimination)
    by_elimination = (
        not measured
        and share is None
        and queue
        and free_slots
        and kv_room
        and not (deferred and deferred > 0)
        and budget is not None
    )
    step_fit = fit_step_time(signals.step_points)
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
        queue_steps=queue_steps,
        queue=queue,
        n_seqs=n_seqs,
        n_seqs_how=n_seqs_how,
        cap_name=cap_name,
        configured_seqs=configured_seqs,
        vllm_version=version,
        has_active_cap=has_active,
        budget=budget,
        budget_how=inf.budget_how,
        dip=dip,
        slack=slack,
        pinned=pinned,
        free_slots=free_slots,
        tokens_per_step=tps,
        fill=fill,
        budget_close=closeness(max(fill, fill_time or 0.0), BUDGET_FULL_FILL) if fill is not None else None,
        time_fill=fill_time,
        batch=batch,
        batch_how=batch_how,
        seqs_close=seqs_close,
        share=share,
        share_edge=share_edge,
        full=full or by_elimination,
        budget_cap=budget_binds(full or by_elimination, budget, step_fit, known_knee(limits)),
        full_by_elimination=by_elimination and not full,
        knee=knee,
        knee_how=knee_how,
        ceiling=ceiling,
        ceiling_how=ceiling_how,
        at_ceiling=at_ceiling,
        capacity_blocked=capacity_blocked,
        kv_room=kv_room,
        kv_known=kv_max is not None,
        deferred=deferred,
        lora_max=lora_max,
        lora_adapters=lora_adapters,
        lora_seen=s("lora_adapters_seen"),
        lora_blocked=lora_blocked,
        lora_head=lora_head,
        step_rate=step_rate,
        decode_per_step=gen / step_rate if gen is not None and step_rate else None,
        inferred=inf.names,
        budget_evidence=inf.budget_evidence,
        step_fit=step_fit,
        full_at_cap=full_at_cap(signals, n_seqs),
    )
