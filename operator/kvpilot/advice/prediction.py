"""``P``: what a window of a vLLM server did, observed from its metrics or predicted by the engine model.

One shape for both sides (:class:`kvpilot.diagnose.model.Prediction`, docs/diagnose-output.schema.json
``$defs/prediction``), so a replay is checked against the window and a what-if compared with it key by key:

- ``requests_finished_per_s``, ``prompt_tokens_per_s``, ``generation_tokens_per_s``: the rates of
  ``vllm:request_success``, ``vllm:prompt_tokens`` (counted when a prompt's prefill completes) and
  ``vllm:generation_tokens`` over the window;
- ``queue_time_mean_s``: mean of ``vllm:request_queue_time_seconds`` (arrival to first scheduling, observed
  when the request finishes); ``ttft_mean_s``: mean of ``vllm:time_to_first_token_seconds`` (observed with
  the first token);
- ``mean_running``, ``mean_waiting``, ``max_kv_usage``: ``avg_over_time`` of ``vllm:num_requests_running`` /
  ``_waiting`` and ``max_over_time`` of ``vllm:kv_cache_usage_perc`` (0-1) over the scrapes;
  ``waiting_trend_per_s``: ``deriv`` of the waiting gauge; ``preemptions_per_s``: rate of
  ``vllm:num_preemptions`` (counted when a preempted request next produces output);
- ``binding_limit``: ``kv_cache`` | ``max_num_seqs`` | ``token_budget`` | ``lora`` | ``none``, the limit that
  refused the head of the waiting queue over most of the time requests waited (``none``: they waited less
  than half the window); ``binding_shares``: the share of the window's time each refused it (predictions only).

Metric semantics: ``PrometheusStatLogger.record`` (``vllm/v1/metrics/loggers.py``) and ``IterationStats`` /
``FinishedRequestStats`` (``vllm/v1/metrics/stats.py``), vLLM 0.29.0.

The tolerances and the check, pure arithmetic, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvpilot.diagnose.model import Prediction

#: a queue grows when the waiting gauge's trend over the window adds at least this many requests
#: (diagnose's "growing", docs/diagnosis.md) ...
GROWTH_MIN_REQUESTS = 1.0
#: ... and at least this share of the window's arrivals: a queue that fluctuates around a steady level
#: shows a trend of a few requests either way over any window, a queue that grows gains a share of the
#: arrivals it cannot serve (the issue's budget case: 961 of 9,600 arrivals, 10 %)
GROWTH_MIN_SHARE = 0.02


def queue_grows(trend_per_s: float | None, window_seconds: float, arrivals: float | None) -> bool | None:
    """Whether a queue with this trend (requests/s) grows over the window (:data:`GROWTH_MIN_REQUESTS`,
    :data:`GROWTH_MIN_SHARE` of ``arrivals``, the requests that arrived in the window); None when unknown.
    """
    if trend_per_s is None:
        return None
    gained = trend_per_s * window_seconds
    return gained >= max(GROWTH_MIN_REQUESTS, GROWTH_MIN_SHARE * (arrivals or 0.0))


#: replay check: key -> (relative tolerance, absolute tolerance); a key matches when either holds
TOLERANCES: dict[str, tuple[float, float]] = {
    "requests_finished_per_s": (0.10, 0.0),
    "prompt_tokens_per_s": (0.10, 0.0),
    "generation_tokens_per_s": (0.10, 0.0),
    "queue_time_mean_s": (0.30, 1.0),
    "mean_running": (0.10, 0.5),
    "mean_waiting": (0.30, 5.0),
    "max_kv_usage": (0.0, 0.10),
}

#: how each checked key reads in a sentence
LABELS: dict[str, str] = {
    "requests_finished_per_s": "requests finished per second",
    "prompt_tokens_per_s": "prompt tokens per second",
    "generation_tokens_per_s": "generated tokens per second",
    "queue_time_mean_s": "mean queue time (s)",
    "ttft_mean_s": "mean TTFT (s)",
    "mean_running": "mean running requests",
    "mean_waiting": "mean waiting requests",
    "max_kv_usage": "peak KV usage",
    "preemptions_per_s": "preemptions per second",
    "queue_growing": "the queue",
}


@dataclass(frozen=True)
class Miss:
    """One key of a replay outside its tolerance: ``key``, predicted and observed values, the allowed gap."""

    key: str
    predicted: float | str | None
    observed: float | str | None
    allowed: str

    def sentence(self) -> str:
        """``mean queue time (s): replay 12.0, window 30.5 (allowed 30 % or 1 s)``."""
        from kvpilot.text.numbers import significant

        def show(v: float | str | None) -> str:
            return v if isinstance(v, str) else significant(v, 3)

        label = LABELS.get(self.key, self.key.replace("_", " "))
        return f"{label}: replay {show(self.predicted)}, window {show(self.observed)} (allowed {self.allowed})"


def within(predicted: float | None, observed: float | None, rel: float, abs_: float) -> bool:
    """``|predicted - observed| <= max(rel x |observed|, abs_)``; True when the observation is unknown."""
    if observed is None:
        return True
    if predicted is None:
        return False
    return abs(predicted - observed) <= max(rel * abs(observed), abs_)


def allowed_text(rel: float, abs_: float) -> str:
    """``10 %``, ``0.1`` or ``30 % or 1``: a tolerance as the report states it."""
    from kvpilot.text.numbers import fig

    parts = []
    if rel:
        parts.append(f"{fig(rel * 100, 1)} %")
    if abs_:
        parts.append(fig(abs_, 3))
    return " or ".join(parts)


def compare(predicted: Prediction, observed: Prediction, sampling: dict[str, float] | None = None) -> list[Miss]:
    """The keys of :data:`TOLERANCES` (and the binding limit, which must be equal) where the replay misses the
    window; empty when it reproduces it.

    ``sampling``: key -> the sampling error a gauge's mean over the window's scrapes allows on top
    (``kvpilot.advice.observe.sampling_slack``); a key matches when it is within any of its tolerances.
    """
    misses = []
    for key, (rel, abs_) in TOLERANCES.items():
        p, o = getattr(predicted, key), getattr(observed, key)
        slack = (sampling or {}).get(key, 0.0)
        if not within(p, o, rel, max(abs_, slack)):
            allowed = allowed_text(rel, abs_)
            if slack > abs_:
                from kvpilot.text.numbers import significant

                allowed += f" or {significant(slack, 2)} (the scrapes' sampling error)"
            misses.append(Miss(key, p, o, allowed))
    if observed.binding_limit is not None and predicted.binding_limit != observed.binding_limit:
        misses.append(Miss("binding_limit", predicted.binding_limit, observed.binding_limit, "equal"))
    if observed.queue_growing is not None and predicted.queue_growing != observed.queue_growing:
        # every recommendation turns on whether a change stops the queue growing: the replay must agree
        misses.append(Miss("queue_growing", _growing(predicted), _growing(observed), "equal"))
    return misses


def _growing(p: Prediction) -> str:
    """``growing 33.6/s`` / ``not growing`` / ``unknown``: whether a queue grows, as a miss states it."""
    from kvpilot.text.numbers import significant

    if p.queue_growing is None:
        return "unknown"
    trend = "" if p.waiting_trend_per_s is None else f" {significant(p.waiting_trend_per_s, 3)}/s"
    return f"growing{trend}" if p.queue_growing else f"not growing ({trend.strip() or 'no trend'})"
