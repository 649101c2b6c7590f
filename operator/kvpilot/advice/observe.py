"""The observed side of a replay: ``P`` read off the window's signals (``kvpilot.advice.prediction``).

Rates and gauges are the signals of ``kvpilot.diagnose.signals`` (PromQL ``rate``, ``avg_over_time``,
``max_over_time``, ``deriv`` over the window); the means of queue time and TTFT are their histograms'
``increase(_sum) / increase(_count)``. The binding limit is the diagnosis': a verdict that names a limit
(kv_cache_exhaustion, max_num_seqs_cap, token_budget_cap, lora_slot_cap) decided it by the rules' own reading of
the window, and the replay is held to that, never to a second reading that could disagree with the report (a
window pinned at ``max_num_seqs`` with KV near full and a few preemptions is ``max_num_seqs`` in both). For the
other verdicts (a queue no rule explains, or none) it is read the way vLLM's scheduler refuses the head of
its queue, in its own order (``Scheduler.schedule``, ``vllm/v1/core/sched/scheduler.py``, vLLM 0.29.0): no
admission in a step that preempted (any preemption in the window: ``kv_cache``); the loop runs while the
token budget lasts (steps full: ``token_budget``); then ``max_num_seqs`` requests running (running pinned at
it: ``max_num_seqs``); then the KV cache (at its admission ceiling: ``kv_cache``); ``none`` without a standing
queue (fewer than half a request waiting on average); ``lora`` when at least half the queue is deferred
(``vllm:num_requests_waiting_by_reason{reason="deferred"}``: LoRA slots, KV transfer, which the engine model does
not have, so such a window is never replayed as matching). A queue none of these explains keeps the verdict's
nearest limit, and a window without the gauges reads unknown (not checked).

Pure functions, no I/O.
"""

from __future__ import annotations

import math

from kvpilot.advice.prediction import queue_grows
from kvpilot.diagnose.facts import BUDGET_FULL_FILL, PINNED_SLACK
from kvpilot.diagnose.model import BindingLimit, Prediction, Verdict
from kvpilot.diagnose.signals import FitName, SignalName, Signals

#: a standing queue: at least this many requests waiting on average (else ``none`` binds)
STANDING_QUEUE = 0.5

#: verdict -> the limit it names (the fallback when no gauge decides)
VERDICT_LIMITS: dict[Verdict, BindingLimit] = {
    "kv_cache_exhaustion": "kv_cache",
    "max_num_seqs_cap": "max_num_seqs",
    "token_budget_cap": "token_budget",
    "compute_bound": "token_budget",
    "lora_slot_cap": "lora",
    "healthy": "none",
    "idle": "none",
    "prefix_cache_ineffective": "none",
}


#: the queue verdicts that name the limit their rule found binding: the window's binding limit is the verdict's
NAMED_BY_VERDICT: dict[Verdict, BindingLimit] = {
    v: VERDICT_LIMITS[v] for v in ("kv_cache_exhaustion", "max_num_seqs_cap", "token_budget_cap", "lora_slot_cap")
}


def observed_binding(
    signals: Signals,
    max_num_seqs: float | None,
    max_num_batched_tokens: float | None,
    kv_ceiling: float | None,
    verdict: Verdict,
) -> BindingLimit | None:
    """The limit that refused the window's queue (module docstring), None when the gauges do not say."""
    v = signals.values
    waiting = v.get("waiting_avg")
    if waiting is None:
        return None
    if waiting < STANDING_QUEUE:
        return "none"
    deferred = v.get("waiting_deferred_avg")
    if deferred is not None and deferred >= waiting / 2:  # set aside (LoRA slots, KV transfer): not admitted at all
        return "lora"
    named = NAMED_BY_VERDICT.get(verdict)
    if named is not None:  # the diagnosis of this window decided what binds: the replay is held to it
        return named
    if (v.get("preemptions_increase") or 0) > 0:
        return "kv_cache"
    per_step = v.get("tokens_per_step_avg")
    if per_step is not None and max_num_batched_tokens and per_step >= BUDGET_FULL_FILL * max_num_batched_tokens:
        return "token_budget"
    running = v.get("running_avg")
    if running is not None and max_num_seqs and running >= max_num_seqs - PINNED_SLACK:
        return "max_num_seqs"
    kv_max = v.get("kv_usage_max")
    if kv_max is not None and kv_ceiling is not None and kv_max >= kv_ceiling:
        return "kv_cache"
    return VERDICT_LIMITS.get(verdict)


def sampling_slack(signals: Signals) -> dict[str, float]:
    """How far apart two means of a gauge over the window's scrapes may be by sampling alone (requests).

    ``mean_running`` and ``mean_waiting`` are means of ``n`` scrapes; with the gauge's spread taken as a quarter of
    its range (``max - min``: a normal sample's range is about 4 standard deviations), each mean's standard error
    is ``spread / sqrt(n)`` and the difference of two (the window's and the replay's, sampled at the same
    instants of different draws) has ``sqrt(2)`` times that; twice it is allowed.
    """
    v = signals.values
    n = v.get("samples_in_window") or 0.0
    if n < 2:
        return {}
    out = {}
    gauges: tuple[tuple[str, SignalName, SignalName | None], ...] = (
        ("mean_running", "running_max", "running_min"),
        ("mean_waiting", "waiting_max", None),
    )
    for key, top, bottom in gauges:
        hi, lo = v.get(top), (v.get(bottom) if bottom else 0.0)
        if hi is not None and lo is not None:
            out[key] = 2 * math.sqrt(2) * (hi - lo) / 4 / math.sqrt(n)
    return out


def observed_prediction(signals: Signals, binding: BindingLimit | None) -> Prediction:
    """The window's ``P`` from its signals (``signals.fit`` holds the TTFT histogram's sum and count)."""
    v, fv = signals.values, signals.fit

    def mean(total: FitName, n: FitName) -> float | None:
        s, c = fv.get(total), fv.get(n)
        return s / c if s is not None and c else None

    trend = v.get("waiting_trend_per_s")
    finished = v.get("requests_finished_increase")
    arrived = (finished or 0.0) + (trend or 0.0) * signals.window_seconds
    return Prediction(
        requests_finished_per_s=v.get("requests_finished_per_s"),
        prompt_tokens_per_s=v.get("prompt_tokens_per_s"),
        generation_tokens_per_s=v.get("generation_tokens_per_s"),
        queue_time_mean_s=v.get("queue_time_mean_s"),
        ttft_mean_s=mean("ttft_sum_increase", "ttft_count_increase"),
        mean_running=v.get("running_avg"),
        max_kv_usage=v.get("kv_usage_max"),
        preemptions_per_s=v.get("preemptions_per_s"),
        binding_limit=binding,
        mean_waiting=v.get("waiting_avg"),
        waiting_trend_per_s=trend,
        queue_growing=queue_grows(trend, signals.window_seconds, arrived),
    )
