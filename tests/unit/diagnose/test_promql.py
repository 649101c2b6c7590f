"""PromQL arithmetic re-implemented for replayed samples; expected values worked out by hand.

Reference semantics: Prometheus 2.42 promql/functions.go (extrapolatedRate, linearRegression) and
promql/quantile.go (bucketQuantile). The integration test test_prometheus_equivalence.py checks
the same functions against a real Prometheus.
"""

from __future__ import annotations

import math

import pytest

from kvpilot.diagnose import promql


def test_increase_without_extrapolation_when_samples_touch_the_range():
    # samples at 0, 10, 20, 30 in range [0, 30]: no gap to either boundary -> plain delta 30 - 0 = 30
    pts = [(0.0, 0.0), (10.0, 10.0), (20.0, 20.0), (30.0, 30.0)]
    assert promql.extrapolated_delta(pts, 0.0, 30.0) == pytest.approx(30.0)
    # rate = 30 / 30 s
    assert promql.extrapolated_delta(pts, 0.0, 30.0, is_rate=True) == pytest.approx(1.0)


def test_increase_extrapolates_to_boundaries_within_1_1_intervals():
    # samples at 5, 15, 25 (values 105, 115, 125) in range [0, 30]; average interval 10 s.
    # to start 5 s (< 11 s threshold) but the counter would reach zero 105 s back
    # (20 * 105 / 20 = 105 s), so 5 s counts; to end 5 s counts: interval 20 + 5 + 5 = 30;
    # increase = 20 * 30 / 20 = 30
    pts = [(5.0, 105.0), (15.0, 115.0), (25.0, 125.0)]
    assert promql.extrapolated_delta(pts, 0.0, 30.0) == pytest.approx(30.0)


def test_increase_never_extrapolates_below_zero_at_the_start():
    # counter starting at 0 at t=20 in range [0, 60]: duration to zero = 0, so no start extrapolation;
    # samples 20, 40, 60 -> 0, 20, 40; end gap 0: increase = 40 * (40 + 0 + 0) / 40 = 40
    pts = [(20.0, 0.0), (40.0, 20.0), (60.0, 40.0)]
    assert promql.extrapolated_delta(pts, 0.0, 60.0) == pytest.approx(40.0)


def test_increase_uses_half_interval_when_the_gap_is_large():
    # samples at 30 and 40 (average interval 10) in range [0, 40]: start gap 30 > 11 -> add 5;
    # duration to zero = 10 * 100/10 = 100 > 30, so the start gap stands at 30 -> half interval 5.
    # interval = 10 + 5 + 0 = 15; increase = 10 * 15/10 = 15
    pts = [(30.0, 100.0), (40.0, 110.0)]
    assert promql.extrapolated_delta(pts, 0.0, 40.0) == pytest.approx(15.0)


def test_counter_reset_adds_the_value_before_the_drop():
    # 0, 10, 20, reset to 5, 15 at t = 0..40: delta 15 - 0 + 20 (value before the reset) = 35
    pts = [(0.0, 0.0), (10.0, 10.0), (20.0, 20.0), (30.0, 5.0), (40.0, 15.0)]
    assert promql.extrapolated_delta(pts, 0.0, 40.0) == pytest.approx(35.0)


def test_fewer_than_two_points_give_nothing():
    assert promql.extrapolated_delta([(1.0, 5.0)], 0.0, 10.0) is None
    assert promql.deriv([(1.0, 5.0)]) is None


def test_deriv_is_the_least_squares_slope():
    # C12's waiting queue: 5, 95, 185, 275 at 0, 60, 120, 180 s -> exactly 1.5 req/s
    assert promql.deriv([(0, 5), (60, 95), (120, 185), (180, 275)]) == pytest.approx(1.5)
    # noisy: points (0,0) (1,2) (2,1): x mean 1, y mean 1; cov = (-1)(-1)+0+(1)(0) = 1; var = 2 -> 0.5
    assert promql.deriv([(0, 0), (1, 2), (2, 1)]) == pytest.approx(0.5)


def test_range_selection_is_inclusive_at_both_ends():
    pts = [(0.0, 1.0), (10.0, 2.0), (20.0, 3.0)]
    assert promql.in_range(pts, 20.0, 20.0) == pts
    assert promql.in_range(pts, 20.0, 19.0) == pts[1:]


def test_histogram_quantile_interpolates_inside_the_bucket():
    # buckets le=1: 10, le=2: 30, le=+Inf: 40. q=0.5 -> rank 20, bucket (1, 2] holds 20 -> 1 + 1 * (10/20) = 1.5
    q = promql.histogram_quantile(0.5, [(1.0, 10.0), (2.0, 30.0), (math.inf, 40.0)])
    assert q.value == pytest.approx(1.5)
    assert (q.lower, q.upper) == (1.0, 2.0)
    assert q.observations == 40
    assert q.bounds_text("s") == "(1, 2] s"
    # first bucket starts at 0: q=0.1 -> rank 4 of 10 in (0, 1] -> 0.4
    assert promql.histogram_quantile(0.1, [(1.0, 10.0), (2.0, 30.0), (math.inf, 40.0)]).value == pytest.approx(0.4)


def test_histogram_quantile_in_the_inf_bucket_returns_the_highest_finite_bound():
    # q=0.99 -> rank 39.6 > 30: the +Inf bucket -> 2.0, reported as (2, +Inf]
    q = promql.histogram_quantile(0.99, [(1.0, 10.0), (2.0, 30.0), (math.inf, 40.0)])
    assert q.value == 2.0
    assert q.bounds_text() == "(2, +Inf] s"


def test_histogram_quantile_without_inf_or_observations_is_none():
    assert promql.histogram_quantile(0.5, [(1.0, 10.0), (2.0, 30.0)]) is None
    assert promql.histogram_quantile(0.5, [(1.0, 0.0), (math.inf, 0.0)]) is None


def test_histogram_quantile_forces_monotonic_counts():
    # a decreasing bucket (scrape skew) is raised to its predecessor: le=2 read as 10 -> rank 10 (q=0.5 of 20)
    # falls in (0, 1] with count 10 -> value 1.0
    q = promql.histogram_quantile(0.5, [(1.0, 10.0), (2.0, 5.0), (math.inf, 20.0)])
    assert q.value == pytest.approx(1.0)


def test_share_above_uses_the_budget_bucket():
    # iteration tokens: le=128: 10, le=256: 100, +Inf: 100; budget 256 -> edge 128 -> 1 - 10/100 = 0.9
    share, edge = promql.share_above([(128.0, 10.0), (256.0, 100.0), (math.inf, 100.0)], 256)
    assert share == pytest.approx(0.9)
    assert edge == 128.0
    assert promql.share_above([(128.0, 0.0), (math.inf, 0.0)], 256) is None


def test_quantile_over_time_interpolates_between_sorted_values():
    # values 0, 0, 0, 3, 5 -> sorted; median rank 0.5 x 4 = 2 -> the third value, 0
    pts = [(float(i), v) for i, v in enumerate([3.0, 0.0, 5.0, 0.0, 0.0])]
    assert promql.quantile_over_time(0.5, pts) == 0.0
    # four values 0, 1, 2, 4: rank 0.5 x 3 = 1.5 -> halfway between 1 and 2 = 1.5
    pts = [(float(i), v) for i, v in enumerate([4.0, 0.0, 2.0, 1.0])]
    assert promql.quantile_over_time(0.5, pts) == 1.5
    # one value is its own quantile; none is unknown; q outside 0-1 is -Inf / +Inf as in Prometheus
    assert promql.quantile_over_time(0.5, [(0.0, 7.0)]) == 7.0
    assert promql.quantile_over_time(0.5, []) is None
    assert promql.quantile_over_time(-0.1, [(0.0, 7.0)]) == -math.inf
    assert promql.quantile_over_time(1.1, [(0.0, 7.0)]) == math.inf


def test_share_in_the_bucket_holding_a_value():
    # cumulative 5, 15, 95, 100 at 256, 512, 1024, +Inf: 600 lies in (512, 1024], holding 95 - 15 = 80 of 100
    buckets = [(256.0, 5.0), (512.0, 15.0), (1024.0, 95.0), (math.inf, 100.0)]
    assert promql.share_in_bucket(buckets, 600.0) == pytest.approx(0.8)
    # 100 lies in the first bucket (-Inf, 256]: 5 of 100; 5,000 in (1024, +Inf]: 5 of 100
    assert promql.share_in_bucket(buckets, 100.0) == pytest.approx(0.05)
    assert promql.share_in_bucket(buckets, 5000.0) == pytest.approx(0.05)
    # no observations: unknown
    assert promql.share_in_bucket([(1.0, 0.0), (math.inf, 0.0)], 1.0) is None
