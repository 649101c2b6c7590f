"""The statistics of ``kvpilot simulate``'s report, streamed in bounded memory: O(running requests), not O(all).

:class:`ReportStats` is an ``on_step`` observer (:meth:`kvpilot.engine.core.Engine.run`). Counts, token sums and
peaks are kept exactly. The latency percentiles (TTFT, e2e, queue time, inter-token latency, each pass's TTFT)
come from :class:`Quantiles`, a DDSketch (DataDog's ``ddsketch`` package; Masson, Rim and Lee, "DDSketch: A
Fast and Fully-Mergeable Quantile Sketch with Relative-Error Guarantees", PVLDB 12(12), 2019): a count per
logarithmic bucket, so its size depends on the range of the values, never on how many there are (about 58,000
buckets, a few hundred KiB at most, from 1 ms to 100 s at :data:`RELATIVE_ACCURACY`).

**Error bound.** Every percentile printed is within :data:`RELATIVE_ACCURACY` (0.01 %) of the exact one, relative
to the exact value (:meth:`Quantiles.percentile` proves it), before the report rounds it (to 6 decimals of a
second, 0.1 ms for a pass's TTFT). Exact means numpy's default method, linear interpolation between the closest
ranks, over every value the report used to keep (every finished request's latency; every token's inter-token
gap, the requests still running at the end included, as vLLM's ``vllm:inter_token_latency_seconds`` observes each
token when it comes). Before the sketch those values were kept, 8 bytes per finished request and series plus
about 100 bytes per step for the gaps, so memory grew with the run (docs/performance.md, "Report memory").
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, TypedDict

from ddsketch import DDSketch

if TYPE_CHECKING:
    from kvpilot.engine.core import Engine, StepOutput
    from kvpilot.engine.request import Request

__all__ = ["RELATIVE_ACCURACY", "Peaks", "Quantiles", "ReportStats", "TagStats"]

#: ``alpha`` of the DDSketch paper: a percentile is within this fraction of the exact value (0.01 %).
RELATIVE_ACCURACY = 0.0001


class Quantiles:
    """Streamed percentiles of non-negative values (seconds), within :data:`RELATIVE_ACCURACY` of the exact ones.

    Memory: one count per logarithmic bucket ``(gamma^(k-1), gamma^k]`` with ``gamma = (1 + a) / (1 - a)``
    (``a`` = :data:`RELATIVE_ACCURACY`) between the smallest and the largest value seen, that is
    ``ln(max / min) / ln(gamma)`` buckets (about 58,000 from 1 ms to 100 s), plus one count of zeros; never
    the values themselves. :attr:`count` is exact.
    """

    def __init__(self) -> None:
        self._sketch = DDSketch(RELATIVE_ACCURACY)

    def add(self, value: float, count: int = 1) -> None:
        """Count ``value`` (>= 0) ``count`` times."""
        self._sketch.add(value, count)

    @property
    def count(self) -> int:
        """How many values were added (exact)."""
        return int(self._sketch.count)

    def _order_statistic(self, i: int) -> float:
        """The approximation of the ``i``-th smallest value (0-based): asking DDSketch for rank ``i + 1/2``
        selects the bucket holding it (the first whose cumulative count exceeds the rank), whatever float
        rounding does to the rank; the last value at quantile 1.
        """
        n = self.count
        value = self._sketch.get_quantile_value(1.0 if i >= n - 1 else (i + 0.5) / (n - 1))
        if value is None:  # DDSketch answers None only when empty
            raise IndexError(f"order statistic {i} of {n} values")
        return float(value)

    def percentile(self, q: float) -> float | None:
        """Percentile ``q`` (0-1), numpy's default definition, within :data:`RELATIVE_ACCURACY`; None if empty.

        Proof of the bound, for values ``x_0 <= ... <= x_(n-1)``, all >= 0, and ``a`` the relative accuracy:

        1. The exact percentile is ``p = (1 - f) x_lo + f x_hi`` with ``pos = (n - 1) q``, ``lo = floor(pos)``,
           ``hi = min(lo + 1, n - 1)``, ``f = pos - lo`` in [0, 1).
        2. :meth:`_order_statistic` returns for ``x_i`` the representative of its bucket: 0 for a zero (kept
           apart, exact); else for ``x_i`` in ``(gamma^(k-1), gamma^k]`` the value ``2 gamma^k / (1 + gamma)``.
           Since ``1 + gamma = 2 / (1 - a)``, that is ``(1 - a) gamma^k = (1 + a) gamma^(k-1)``: at most
           ``(1 + a) x_i`` and at least ``(1 - a) x_i``, so ``|x~_i - x_i| <= a x_i`` (the paper's
           Proposition 3; a value on a bucket's edge that float rounding puts in the next bucket gets the
           next representative, again within ``a``, up to about 1e-15 of float rounding).
        3. ``p~ = (1 - f) x~_lo + f x~_hi``, so ``|p~ - p| <= (1 - f) a x_lo + f a x_hi = a p``: the weights
           are non-negative and the values too.

        ``tests/unit/engine/test_report_stats.py`` checks the bound on random values against sorted lists.
        """
        n = self.count
        if not n:
            return None
        pos = (n - 1) * q
        lo = math.floor(pos)
        hi = min(lo + 1, n - 1)
        v_lo = self._order_statistic(lo)
        v_hi = v_lo if hi == lo else self._order_statistic(hi)
        return v_lo + (v_hi - v_lo) * (pos - lo)


class TagStats:
    """Finished requests of one tag: how many, their GPU / CPU-tier prefix hits (tokens, exact), their TTFTs (s)."""

    def __init__(self) -> None:
        self.requests = 0
        self.prefix_cache_hit_tokens = 0
        self.external_prefix_cache_hit_tokens = 0
        self.ttfts = Quantiles()


class Peaks(TypedDict):
    """The highest running and waiting requests and KV cache usage (0-1) a run reached (the report's ``peaks``)."""

    running: int
    waiting: int
    kv_cache_usage: float


class ReportStats:
    """What the report needs, accumulated step by step (pass :meth:`observe` as ``on_step``).

    Args:
        budget: ``max_num_batched_tokens``: a step with that many tokens counts in ``steps_at_budget``.

    Attributes: ``peaks`` {running, waiting, kv_cache_usage}, ``steps_at_budget`` (steps), ``ttft``, ``e2e``,
    ``queue`` (:class:`Quantiles` of the finished requests' latencies, s), ``itl`` (:class:`Quantiles` of every
    inter-token gap, s), ``tags`` (:class:`TagStats` per tag, in the order each tag first finished).
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.peaks: Peaks = {"running": 0, "waiting": 0, "kv_cache_usage": 0.0}
        self.steps_at_budget = 0
        self.ttft = Quantiles()
        self.e2e = Quantiles()
        self.queue = Quantiles()
        self.itl = Quantiles()
        self.tags: dict[str, TagStats] = {}

    def observe(self, _engine: Engine, out: StepOutput | None) -> None:
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
        add_gap = self.itl.add
        for gap, n in out.itl_counts:
            add_gap(gap, n)
        if out.finished:
            self.add_finished(out.finished)

    def add_finished(self, requests: Iterable[Request]) -> None:
        """Account for finished requests (their timings are final)."""
        for r in requests:
            if r.first_token_time is not None:
                self.ttft.add(r.first_token_time - r.arrival_time)
            if r.finish_time is not None:
                self.e2e.add(r.finish_time - r.arrival_time)
            if r.scheduled_time is not None:
                self.queue.add(r.scheduled_time - r.arrival_time)
            if r.tag is not None:
                tag = self.tags.get(r.tag)
                if tag is None:
                    tag = self.tags[r.tag] = TagStats()
                tag.requests += 1
                tag.prefix_cache_hit_tokens += r.prefix_hit_tokens
                tag.external_prefix_cache_hit_tokens += r.external_hit_tokens
                if r.first_token_time is not None:
                    tag.ttfts.add(r.first_token_time - r.arrival_time)

    def latency_s(self) -> dict[str, float | None]:
        """``ttft_p50``, ``ttft_p95``, ``itl_p50``, ``e2e_p50``, ``queue_p50`` (s, 6 decimals; None without data),
        each within :data:`RELATIVE_ACCURACY` of the exact percentile before rounding.
        """
        figures = {
            "ttft_p50": self.ttft.percentile(0.5),
            "ttft_p95": self.ttft.percentile(0.95),
            "itl_p50": self.itl.percentile(0.5),
            "e2e_p50": self.e2e.percentile(0.5),
            "queue_p50": self.queue.percentile(0.5),
        }
        return {k: (None if v is None else round(v, 6)) for k, v in figures.items()}
