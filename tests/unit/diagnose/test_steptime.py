"""Step time against tokens per step: the fit, its thresholds on both sides, "no data", and the verdicts it flips.

Rule (kvpilot.diagnose.steptime, docs/diagnosis.md "compute_bound"): least squares t = a + b n over the
sub-windows' (tokens per step n, seconds per step t); elasticity E = b n_mean / t_mean; E >= 0.7: step time grows
in proportion (compute-bound at any budget); E <= 0.3: flat (the budget binds at any budget). No data with fewer
than 4 sub-windows or tokens per step varying by less than x1.5.
"""

from __future__ import annotations

import pytest

from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.rules import diagnose_target
from kvpilot.diagnose.signals import Signals, finish_signals
from kvpilot.diagnose.steptime import fit_step_time, subwindow_points
from tests.unit.diagnose.test_admission import QUEUE, steps
from tests.unit.diagnose.test_rules import WINDOW

N = (1000.0, 2000.0, 3000.0, 4000.0)  # tokens per step; mean 2,500
#: a live target (30 samples, fresh) with a standing queue, 10 of 256 running, KV room
LIVE = {
    "samples_in_window": 30.0,
    "last_sample_time": 1000.0,
    "preemptions_increase": 0.0,
    "running_avg": 10.0,
    "running_min": 10.0,
    "running_max": 12.0,
    **QUEUE,
}


def line(a: float, b: float) -> tuple[tuple[float, float], ...]:
    """Points on t = a + b n."""
    return tuple((n, a + b * n) for n in N)


def test_proportional_step_time_has_elasticity_1_and_flat_0():
    # t = 1e-4 n: b = 1e-4 s per token, a = 0; E = 1e-4 x 2,500 / 0.25 = 1
    fit = fit_step_time(line(0.0, 1e-4))
    assert fit.elasticity == pytest.approx(1.0)
    assert fit.slope_s_per_token == pytest.approx(1e-4)
    assert fit.intercept_s == pytest.approx(0.0, abs=1e-12)
    assert fit.grows
    assert not fit.flat
    # t = 0.05 s whatever the tokens: b = 0, E = 0
    fit = fit_step_time(line(0.05, 0.0))
    assert fit.elasticity == pytest.approx(0.0, abs=1e-12)
    assert fit.flat
    assert not fit.grows


def test_thresholds_on_both_sides():
    # b = 1e-4: b x n_mean = 0.25 s; E = 0.25 / (a + 0.25), so a = 0.25 / E - 0.25
    assert fit_step_time(line(0.25 / 0.71 - 0.25, 1e-4)).grows  # a = 0.10211 s: E = 0.71 >= 0.7
    mid = fit_step_time(line(0.25 / 0.69 - 0.25, 1e-4))  # a = 0.11232 s: E = 0.69
    assert mid.elasticity == pytest.approx(0.69)
    assert not mid.grows
    assert not mid.flat
    assert fit_step_time(line(0.25 / 0.29 - 0.25, 1e-4)).flat  # a = 0.61207 s: E = 0.29 <= 0.3
    mid = fit_step_time(line(0.25 / 0.31 - 0.25, 1e-4))  # a = 0.55645 s: E = 0.31
    assert mid.elasticity == pytest.approx(0.31)
    assert not mid.flat
    assert not mid.grows


def test_no_data_with_too_few_sub_windows_or_too_little_variation():
    three = fit_step_time(line(0.0, 1e-4)[:3])
    assert three.elasticity is None
    assert "3 sub-windows" in three.reason
    # tokens per step 1,000 .. 1,490: spread 1.49 < 1.5 -> no data, even on a perfect line
    narrow = fit_step_time(tuple((n, 1e-4 * n) for n in (1000.0, 1200.0, 1490.0, 1100.0)))
    assert narrow.elasticity is None
    assert narrow.spread == pytest.approx(1.49)
    assert narrow.reason == "tokens per step varied by 1.49x, needs 1.5x"
    # 1,000 .. 1,500: spread exactly 1.5 -> fitted
    assert fit_step_time(tuple((n, 1e-4 * n) for n in (1000.0, 1200.0, 1500.0, 1100.0))).elasticity == pytest.approx(1)


def test_sub_window_points_skip_windows_without_steps_or_gaps():
    # tokens 20,000 over 10 steps = 2,000 per step; 1.0 s over 50 gaps = 0.02 s per step
    pts = subwindow_points(
        [20000.0, 5.0, None, 8.0], [10.0, 0.0, 4.0, 2.0], [1.0, 1.0, 1.0, None], [50.0, 5.0, 5.0, 5.0]
    )
    assert pts == ((2000.0, 0.02),)


def diag(budget: int, points: tuple[tuple[float, float], ...]):
    """A standing queue, 10 of 256 running, KV room, steps 90.3 % full (mean 0.903 x budget), with step points."""
    values = {
        **LIVE,
        **steps(round(0.903 * budget)),
    }
    sig = finish_signals(Signals(values=values, step_points=points, window_seconds=WINDOW, end=1000.0))
    return diagnose_target(sig, resolve_limits(cli={"max_num_seqs": 256, "max_num_batched_tokens": budget}))


def test_growing_step_time_makes_full_steps_compute_bound_below_8192():
    # budget 4,096 (below 8,192): without step data a budget cap; step time proportional (E = 1): compute_bound
    assert diag(4096, ()).verdict == "token_budget_cap"
    d = diag(4096, line(0.0, 1e-4))
    assert d.verdict == "compute_bound"
    text = " ".join(d.evidence)
    assert "below vLLM's large-GPU default of 8,192, the measured step time already grows" in text
    assert "elasticity E = 1.00" in text
    assert "4 sub-windows (1,000 to 4,000 tokens per step)" in text
    assert d.signals["step_time_elasticity"] == pytest.approx(1.0)
    # E = 0.69 (between the thresholds): the budget's size decides, as without data
    assert diag(4096, line(0.25 / 0.69 - 0.25, 1e-4)).verdict == "token_budget_cap"
    # flat step time at 4,096: still the budget
    assert diag(4096, line(0.05, 0.0)).verdict == "token_budget_cap"


def test_flat_step_time_makes_full_steps_a_budget_cap_at_8192_and_above():
    # budget 8,192: without step data compute_bound (the size rule); flat step time (E = 0): token_budget_cap
    assert diag(8192, ()).verdict == "compute_bound"
    d = diag(8192, line(0.05, 0.0))
    assert d.verdict == "token_budget_cap"
    text = " ".join(d.evidence)
    assert "at or above vLLM's large-GPU default of 8,192, but the measured step time does not grow" in text
    assert "elasticity E = 0.00" in text
    # E = 0.31: not flat enough: the size rule (compute_bound)
    assert diag(8192, line(0.25 / 0.31 - 0.25, 1e-4)).verdict == "compute_bound"
    # E = 0.29: flat: the budget binds
    assert diag(8192, line(0.25 / 0.29 - 0.25, 1e-4)).verdict == "token_budget_cap"
    # no data is said, never guessed
    nodata = " ".join(diag(8192, line(0.0, 1e-4)[:3]).evidence)
    assert "Step time against tokens per step: no data (3 sub-windows with steps, needs 4;" in nodata


def budget_cap_with_prefill(prefill_sum: float, prefill_count: float):
    """A 4,096-token budget cap (steps 90.3 % full) with prefill and inter-token latency sums."""
    sig = finish_signals(
        Signals(
            values={
                **LIVE,
                **steps(3699, n=3000.0),  # 3,000 steps in 300 s = 10 steps/s
                "itl_sum_increase": 10.0,  # 10 s over 1,000 gaps = 0.01 s per step
                "itl_count_increase": 1000.0,
                "prefill_time_sum_increase": prefill_sum,
                "prefill_time_count_increase": prefill_count,
                "prompt_tokens_per_s": 800.0,  # / 0.1 req/s = 8,000 tokens per request
                "requests_finished_per_s": 0.1,
                "generation_tokens_per_s": 100.0,  # / 10 steps/s = 10 decode tokens per step
            },
            window_seconds=WINDOW,
            end=1000.0,
        )
    )
    return diagnose_target(sig, resolve_limits(cli={"max_num_seqs": 256, "max_num_batched_tokens": 4096}))


def test_prefill_time_spanning_many_step_times_is_named_a_budget_symptom():
    # 8 s over 100 prefills = 0.08 s; / 0.01 s per step = 8.0 step times >= 2: chunked across steps;
    # expected: ceil(8,000 / (4,096 - 10)) = ceil(1.958) = 2 steps
    d = budget_cap_with_prefill(8.0, 100.0)
    assert d.verdict == "token_budget_cap"
    assert d.signals["prefill_time_mean_s"] == pytest.approx(0.08)
    assert d.signals["prefill_step_times"] == 8.0
    text = " ".join(d.evidence)
    assert "Prefill took 0.08 s per request on average" in text
    assert "= 8.0 step times of 0.01 s" in text
    assert "prefilled across several steps (chunked by the budget)" in text
    assert "ceil(8,000 / 4,086.0) = 2 steps" in text
    # 1.5 s over 100 = 0.015 s = 1.5 step times < 2: about one step
    text = " ".join(budget_cap_with_prefill(1.5, 100.0).evidence)
    assert "= 1.5 step times" in text
    assert "prefilled in about one step, the budget does not split it" in text
    # no prefill histogram: no sentence, no guess
    assert "Prefill took" not in " ".join(budget_cap_with_prefill(0.0, 0.0).evidence)


def test_a_sub_window_reading_more_tokens_per_step_than_a_step_holds_is_no_point():
    # tokens 1e300 over 10 steps (a counter scaled or gone wrong): squared in the fit it overflowed (OverflowError)
    points = subwindow_points([1e300, 2**31 - 1, 100.0], [10.0, 1.0, 1.0], [1.0, 1.0, float("inf")], [1.0, 1.0, 1.0])
    assert points == ((2**31 - 1, 1.0),)  # the largest step kept; 1e300/step and infinite seconds dropped
