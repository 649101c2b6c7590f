"""PromQL's arithmetic, re-implemented for samples that never went through a Prometheus.

`kvpilot diagnose --recording` and `--metrics-url` compute their signals with these functions;
`--prometheus` asks Prometheus for the same functions in PromQL. A test backfills the same
recordings into a real Prometheus 2.42 and requires both paths to agree within 2 %.

Semantics follow Prometheus 2.42 (``promql/functions.go`` and ``promql/quantile.go``), the
version Debian ships and the tests run:

- a range ``[w]`` evaluated at ``t`` selects samples with ``t - w <= ts <= t`` (both ends
  inclusive in 2.x; Prometheus 3 made the start exclusive: the difference only matters for a
  sample exactly on the boundary);
- ``rate``/``increase``: :func:`extrapolated_delta` (counter resets, extrapolation to the range
  boundaries, never below zero at the start);
- ``deriv``: least-squares slope, per second;
- ``histogram_quantile``: :func:`histogram_quantile` (linear interpolation inside the bucket;
  the highest finite bound when the rank falls in ``+Inf``).

Pure functions, no I/O. Times are Unix seconds, values floats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kvpilot.text.numbers import significant

Point = tuple[float, float]  # (timestamp seconds, value)


def duration(seconds: float) -> str:
    """A PromQL duration of whole milliseconds: ``60s``, ``62500ms`` (no thousands separators, no exponent;
    Prometheus "Time durations", prometheus.io/docs/prometheus/latest/querying/basics/).
    """
    ms = int(round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def in_range(points: Sequence[Point], end: float, window: float) -> list[Point]:
    """The points a PromQL range selector ``[window]`` evaluated at ``end`` sees (``end-window <= t <= end``).

    NaN values are kept (Prometheus keeps them too); points must be in time order.
    """
    start = end - window
    return [(t, v) for t, v in points if start <= t <= end]


def extrapolated_delta(
    points: Sequence[Point], range_start: float, range_end: float, is_counter: bool = True, is_rate: bool = False
) -> float | None:
    """Prometheus's ``extrapolatedRate`` (2.42): ``increase`` (``is_rate=False``) or ``rate`` of a range.

    Args:
        points: the samples inside ``[range_start, range_end]``, time-ordered.
        range_start: the range's start (seconds).
        range_end: the range's end (seconds); ``range_end - range_start`` is the window.
        is_counter: apply counter-reset correction (a drop adds the value before the drop) and
            do not extrapolate below zero at the start.
        is_rate: divide by the window (per-second rate) instead of returning the increase.

    Returns:
        the extrapolated increase (or rate per second); ``None`` with fewer than two points (PromQL
        returns no sample then).

    Source: prometheus/prometheus v2.42 ``promql/functions.go`` ``extrapolatedRate``: the delta
    between first and last sample plus reset corrections, extrapolated to each boundary when the
    gap is < 1.1 x the average sample interval, else by half an interval; the start extrapolation
    is capped where the counter would reach zero.
    """
    if len(points) < 2:
        return None
    first_t, first_v = points[0]
    last_t, last_v = points[-1]
    result = last_v - first_v
    if is_counter:
        previous = 0.0
        for _, v in points:
            if v < previous:
                result += previous
            previous = v
    duration_to_start = first_t - range_start
    duration_to_end = range_end - last_t
    sampled = last_t - first_t
    if sampled <= 0:
        return None
    average_step = sampled / (len(points) - 1)
    if is_counter and result > 0 and first_v >= 0:
        duration_to_zero = sampled * (first_v / result)
        duration_to_start = min(duration_to_start, duration_to_zero)
    threshold = average_step * 1.1
    interval = sampled
    interval += duration_to_start if duration_to_start < threshold else average_step / 2
    interval += duration_to_end if duration_to_end < threshold else average_step / 2
    result *= interval / sampled
    if is_rate:
        result /= range_end - range_start
    return result


def deriv(points: Sequence[Point]) -> float | None:
    """PromQL ``deriv``: the least-squares slope of value over time, per second; ``None`` below two points.

    Source: prometheus v2.42 ``promql/functions.go`` ``linearRegression`` (slope of the simple
    linear regression, times relative to the evaluation time; the slope does not depend on it).
    """
    if len(points) < 2:
        return None
    n = float(len(points))
    t0 = points[0][0]
    sum_x = sum(t - t0 for t, _ in points)
    sum_y = sum(v for _, v in points)
    sum_xy = sum((t - t0) * v for t, v in points)
    sum_x2 = sum((t - t0) ** 2 for t, _ in points)
    cov_xy = sum_xy - sum_x * sum_y / n
    var_x = sum_x2 - sum_x * sum_x / n
    if var_x == 0:
        return None
    return cov_xy / var_x


def avg_over_time(points: Sequence[Point]) -> float | None:
    """PromQL ``avg_over_time`` (NaN propagates, as in Prometheus); ``None`` for no points."""
    if not points:
        return None
    return sum(v for _, v in points) / len(points)


def max_over_time(points: Sequence[Point]) -> float | None:
    """PromQL ``max_over_time``: NaN only when every value is NaN (Prometheus 2.42 skips NaN unless first)."""
    if not points:
        return None
    values = [v for _, v in points if not math.isnan(v)]
    return max(values) if values else math.nan


def quantile_over_time(q: float, points: Sequence[Point]) -> float | None:
    """PromQL ``quantile_over_time(q, ...)``: the q-quantile of the values, interpolated between neighbours.

    Source: prometheus v2.42 ``promql/quantile.go`` ``quantile``: sorted values, rank ``q x (n - 1)``, linear
    between the values at ``floor(rank)`` and the next; NaN values sort first (Go's ``sort.Float64s``).
    ``None`` for no points; q outside 0-1 gives -Inf/+Inf as Prometheus does.
    """
    if not points:
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    values = sorted((v for _, v in points), key=lambda v: (not math.isnan(v), v))
    rank = q * (len(values) - 1)
    lower = max(0, math.floor(rank))
    upper = min(len(values) - 1, lower + 1)
    weight = rank - math.floor(rank)
    return values[lower] * (1 - weight) + values[upper] * weight


def min_over_time(points: Sequence[Point]) -> float | None:
    """PromQL ``min_over_time`` (NaN handling as :func:`max_over_time`)."""
    if not points:
        return None
    values = [v for _, v in points if not math.isnan(v)]
    return min(values) if values else math.nan


def parse_le(text: str) -> float:
    """A bucket's ``le`` label as a float (``"+Inf"`` -> ``inf``, ``"2.5"``, ``"1024.0"``).

    Raises:
        ValueError: not a number.
    """
    return float(text.replace("Inf", "inf"))


@dataclass(frozen=True)
class Quantile:
    """A histogram quantile and the bucket it came from.

    Attributes:
        q: the quantile asked for (0-1).
        value: Prometheus's interpolated estimate (same unit as the buckets), or NaN.
        lower / upper: the bounds of the bucket holding the rank (``upper`` may be ``inf``, then
            ``value`` is the highest finite bound, as Prometheus returns); ``lower`` is 0 for the
            first bucket.
        observations: observations in the histogram over the window.
    """

    q: float
    value: float
    lower: float
    upper: float
    observations: float

    def bounds_text(self, unit: str = "s") -> str:
        """``"(2.5, 5] s"``: the interval the true quantile lies in (docs/background.md §8)."""
        upper = "+Inf" if math.isinf(self.upper) else significant(self.upper, 6)
        return f"({significant(self.lower, 6)}, {upper}] {unit}".rstrip()


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> Quantile | None:
    """PromQL ``histogram_quantile(q, ...)`` over cumulative buckets.

    Args:
        q: quantile, 0-1.
        buckets: ``(upper_bound, cumulative_count)`` pairs (any order; ``+Inf`` required), e.g. the
            ``increase`` of each ``_bucket`` series over the window.

    Returns:
        a :class:`Quantile`, or ``None`` when Prometheus would return NaN/nothing (no ``+Inf``
        bucket, fewer than two buckets, no observations).

    Source: prometheus v2.42 ``promql/quantile.go`` ``bucketQuantile``: buckets sorted by bound,
    equal bounds coalesced, counts forced monotonic, rank = q x total; the first bucket whose
    count reaches the rank is interpolated linearly (lower bound 0 for the first bucket unless its
    bound is <= 0); a rank in the ``+Inf`` bucket returns the highest finite bound.
    """
    if not 0 <= q <= 1 or not buckets:
        return None
    merged: dict[float, float] = {}
    for bound, count in buckets:
        if math.isnan(count):
            continue
        merged[bound] = merged.get(bound, 0.0) + count
    ordered = sorted(merged.items())
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return None
    monotonic: list[tuple[float, float]] = []
    running_max = -math.inf
    for bound, count in ordered:
        running_max = max(running_max, count)
        monotonic.append((bound, running_max))
    observations = monotonic[-1][1]
    if observations <= 0:
        return None
    rank = q * observations
    b = next((i for i in range(len(monotonic) - 1) if monotonic[i][1] >= rank), len(monotonic) - 1)
    if b == len(monotonic) - 1:
        lower = monotonic[-2][0]
        return Quantile(q, lower, lower, math.inf, observations)
    if b == 0 and monotonic[0][0] <= 0:
        return Quantile(q, monotonic[0][0], monotonic[0][0], monotonic[0][0], observations)
    start, end, count = 0.0, monotonic[b][0], monotonic[b][1]
    if b > 0:
        start = monotonic[b - 1][0]
        count -= monotonic[b - 1][1]
        rank -= monotonic[b - 1][1]
    value = start + (end - start) * (rank / count) if count > 0 else end
    return Quantile(q, value, start, end, observations)


def merged_buckets(buckets: Sequence[tuple[float, float]]) -> dict[float, float] | None:
    """``{upper bound: cumulative count}`` with duplicate bounds summed and NaN counts dropped; None without a
    ``+Inf`` bucket holding observations.
    """
    merged: dict[float, float] = {}
    for bound, count in buckets:
        if not math.isnan(count):
            merged[bound] = merged.get(bound, 0.0) + count
    if merged.get(math.inf, 0.0) <= 0:
        return None
    return merged


def share_above(buckets: Sequence[tuple[float, float]], threshold: float) -> tuple[float, float] | None:
    """Share of observations above the largest bucket bound strictly below ``threshold``.

    Used for "steps at the token budget": with ``vllm:iteration_tokens_total`` buckets
    (1, 8, ..., 1024, 2048, ...) and ``max_num_batched_tokens`` = 2048 it is the share of engine
    steps with more than 1024 tokens, i.e. in the budget's own bucket or above. The estimate is as
    coarse as the buckets (docs/background.md §8): a step of 1,100 tokens counts as full.

    Args:
        buckets: ``(upper_bound, cumulative_count)`` pairs with a ``+Inf`` bucket.
        threshold: the budget (tokens).

    Returns:
        ``(share 0-1, lower_bound_used)``, or ``None`` without observations or a ``+Inf`` bucket.
    """
    merged = merged_buckets(buckets)
    if merged is None:
        return None
    total = merged[math.inf]
    below = [b for b in merged if b < threshold]
    if not below:
        return 1.0, 0.0
    edge = max(below)
    return max(0.0, min(1.0, 1.0 - merged[edge] / total)), edge


def share_in_bucket(buckets: Sequence[tuple[float, float]], value: float) -> float | None:
    """Share of observations in the one bucket ``(lower, upper]`` that holds ``value``.

    "Steps of one size": with ``vllm:iteration_tokens_total`` buckets, a budget that every step fills puts
    most steps in the bucket holding their mean. As coarse as the buckets (docs/background.md §8).

    Args:
        buckets: ``(upper_bound, cumulative_count)`` pairs with a ``+Inf`` bucket.
        value: the value whose bucket is read (tokens).

    Returns:
        the share 0-1, or ``None`` without observations or a ``+Inf`` bucket.
    """
    merged = merged_buckets(buckets)
    if merged is None:
        return None
    bounds = sorted(merged)
    upper = min(b for b in bounds if b >= value)
    below = [b for b in bounds if b < upper]
    lower_count = merged[max(below)] if below else 0.0
    return max(0.0, min(1.0, (merged[upper] - lower_count) / merged[math.inf]))
