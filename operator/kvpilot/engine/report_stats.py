"""The statistics of ``kvpilot simulate``'s report, streamed: memory O(running requests), not O(all requests).

:class:`ReportStats` is an ``on_step`` observer (:meth:`kvpilot.engine.core.Engine.run`). It keeps counts,
peaks and, for the report's exact percentiles, only the numbers they need:

- per finished request one float per latency series (TTFT, e2e, queue) in an ``array('d')``: 8 bytes per
  request and series, where a kept :class:`~kvpilot.engine.request.Request` with its per-token inter-token
  latencies cost several KiB (docs/performance.md, engine section);
- the inter-token latencies of every token of the run as a multiset ``{gap: count}`` (the engine's
  ``StepOutput.itl_counts``): within a step every request that also produced a token in the previous step has the
  same gap, so the distinct gaps are bounded by the steps, not by the tokens (about 100 bytes per step);
- per request tag (``seed-lru``'s passes) a count, two token sums and its TTFTs.

The percentiles are linear interpolation between the closest ranks (numpy's default method) on exactly the values
the report used when it kept every finished request, except that ``itl_p50`` now counts the gaps of requests still
running at the end too, as vLLM's ``vllm:inter_token_latency_seconds`` does (on every built-in scenario the
printed figure is the same: tests/unit/engine/test_report_stats.py).
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvpilot.engine.core import Engine, StepOutput
    from kvpilot.engine.request import Request

__all__ = ["ReportStats", "TagStats", "percentile", "weighted_percentile"]


def percentile(values: Sequence[float], q: float) -> float | None:
    """Percentile ``q`` (0-1) with linear interpolation between closest ranks (numpy's default); None if empty."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def weighted_percentile(counts: Counter[float], q: float) -> float | None:
    """:func:`percentile` of the multiset ``{value: count}``: the same float as over the expanded list."""
    total = sum(counts.values())
    if not total:
        return None
    pos = (total - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, total - 1)
    v_lo = v_hi = None
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if v_lo is None and seen > lo:
            v_lo = value
        if seen > hi:
            v_hi = value
            break
    assert v_lo is not None and v_hi is not None  # lo <= hi < total
    return v_lo + (v_hi - v_lo) * (pos - lo)


@dataclass
class TagStats:
    """Finished requests of one tag: how many, their GPU / CPU-tier prefix hits (tokens), their TTFTs (s)."""

    requests: int = 0
    prefix_cache_hit_tokens: int = 0
    external_prefix_cache_hit_tokens: int = 0
    ttfts: array[float] = field(default_factory=lambda: array("d"))


class ReportStats:
    """What the report needs, accumulated step by step (pass :meth:`observe` as ``on_step``).

    Args:
        budget: ``max_num_batched_tokens``: a step with that many tokens counts in ``steps_at_budget``.

    Attributes: ``peaks`` {running, waiting, kv_cache_usage}, ``steps_at_budget`` (steps), ``ttft``, ``e2e``,
    ``queue`` (s, one per finished request, finish order), ``itl`` (``Counter`` of every gap, s), ``tags``
    (:class:`TagStats` per tag, in the order each tag first finished).
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.peaks: dict[str, Any] = {"running": 0, "waiting": 0, "kv_cache_usage": 0.0}
        self.steps_at_budget = 0
        self.ttft: array[float] = array("d")
        self.e2e: array[float] = array("d")
        self.queue: array[float] = array("d")
        self.itl: Counter[float] = Counter()
        self.tags: dict[str, TagStats] = {}

    def observe(self, engine: Engine, out: StepOutput | None) -> None:
        """``on_step``: fold one step (or one fast-forwarded stretch of ``out.num_steps`` steps) in."""
        if out is None:
            return
        if out.num_tokens >= self.budget:
            self.steps_at_budget += out.num_steps
        peaks = self.peaks
        if out.running > peaks["running"]:
            peaks["running"] = out.running
        if out.waiting > peaks["waiting"]:
            peaks["waiting"] = out.waiting
        if out.kv_cache_usage > peaks["kv_cache_usage"]:
            peaks["kv_cache_usage"] = out.kv_cache_usage
        itl = self.itl
        for gap, n in out.itl_counts:
            itl[gap] += n
        if out.finished:
            self.add_finished(out.finished)

    def add_finished(self, requests: Iterable[Request]) -> None:
        """Account for finished requests (their timings are final)."""
        for r in requests:
            if r.first_token_time is not None:
                self.ttft.append(r.first_token_time - r.arrival_time)
            if r.finish_time is not None:
                self.e2e.append(r.finish_time - r.arrival_time)
            if r.scheduled_time is not None:
                self.queue.append(r.scheduled_time - r.arrival_time)
            if r.tag is not None:
                tag = self.tags.get(r.tag)
                if tag is None:
                    tag = self.tags[r.tag] = TagStats()
                tag.requests += 1
                tag.prefix_cache_hit_tokens += r.prefix_hit_tokens
                tag.external_prefix_cache_hit_tokens += r.external_hit_tokens
                if r.first_token_time is not None:
                    tag.ttfts.append(r.first_token_time - r.arrival_time)

    def latency_s(self) -> dict[str, float | None]:
        """``ttft_p50``, ``ttft_p95``, ``itl_p50``, ``e2e_p50``, ``queue_p50`` (s, 6 decimals; None without data)."""
        figures = {
            "ttft_p50": percentile(self.ttft, 0.5),
            "ttft_p95": percentile(self.ttft, 0.95),
            "itl_p50": weighted_percentile(self.itl, 0.5),
            "e2e_p50": percentile(self.e2e, 0.5),
            "queue_p50": percentile(self.queue, 0.5),
        }
        return {k: (None if v is None else round(v, 6)) for k, v in figures.items()}
