"""Does the step time grow with the tokens per step? The second test of ``compute_bound``.

vLLM exports no per-step time, but two histograms give a step's tokens and its duration per sub-window:

* tokens per step: ``increase(vllm:iteration_tokens_total_sum) / increase(vllm:iteration_tokens_total_count)``
  (every step with output; ``PrometheusStatLogger.record``, ``vllm/v1/metrics/loggers.py``, vLLM 0.29);
* seconds per step: ``increase(vllm:inter_token_latency_seconds_sum) / increase(..._count)``: vLLM observes,
  for every decoding request in every step, ``engine_core_timestamp - last_token_ts`` (``IterationStats.
  update_from_output``, ``vllm/v1/metrics/stats.py``, vLLM 0.29), i.e. the gap between two consecutive steps.

Over the window's :data:`SUBWINDOWS` equal sub-windows the points ``(n_i, t_i)`` are fitted by least squares
``t = a + b n`` (the roofline's step: a fixed part, reading the weights once, plus a part per token; Williams,
Waterman and Patterson, CACM 52(4), 2009). The **elasticity** of step time with tokens at the mean,
``E = b n_mean / t_mean`` (least squares passes through the means, so ``t_mean = a + b n_mean``), says how much
of a step's time grows with its tokens:

* ``E >= STEP_TIME_GROWS`` (0.7): step time grows in proportion to tokens per step, so tokens per second
  (``n / t``) stay flat while steps vary: the GPU is compute-bound and a larger budget only lengthens steps;
* ``E <= STEP_TIME_FLAT`` (0.3): step time stays flat as steps carry more tokens, so more tokens per step are
  almost free: the budget, not the GPU, limits the work done per second;
* between: not decided by this test (the budget's size decides, docs/diagnosis.md).

No data (never a guess) with fewer than :data:`MIN_POINTS` sub-windows that have both steps and inter-token
gaps, or when tokens per step vary by less than :data:`MIN_SPREAD` (max / min): a fit over steps of one size
cannot tell a fixed cost from a per-token one.

Pure functions, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvpilot.text.numbers import times

#: sub-windows the window is cut into (5 x 60 s for the default 5 m window)
SUBWINDOWS = 5
#: sub-windows with data the fit needs
MIN_POINTS = 4
#: max / min tokens per step across the sub-windows below which the steps did not vary enough to fit
MIN_SPREAD = 1.5
#: elasticity from which step time grows in proportion to tokens per step (compute-bound)
STEP_TIME_GROWS = 0.7
#: elasticity up to which step time stays flat as tokens per step grow (the budget binds)
STEP_TIME_FLAT = 0.3


@dataclass(frozen=True)
class StepFit:
    """The least-squares fit of seconds per step on tokens per step over the sub-windows.

    Attributes:
        points: ``(tokens per step, seconds per step)`` per sub-window with data, oldest first.
        elasticity: ``E = b n_mean / t_mean`` (ratio), None when there is no data (``reason`` says why).
        slope_s_per_token / intercept_s: ``b`` (seconds per token) and ``a`` (seconds), or None.
        spread: max / min tokens per step, or None.
        reason: why there is no data ("" when the fit exists).
    """

    points: tuple[tuple[float, float], ...]
    elasticity: float | None
    slope_s_per_token: float | None
    intercept_s: float | None
    spread: float | None
    reason: str = ""

    @property
    def grows(self) -> bool:
        """Step time grows in proportion to tokens per step (``E >= STEP_TIME_GROWS``)."""
        return self.elasticity is not None and self.elasticity >= STEP_TIME_GROWS

    @property
    def flat(self) -> bool:
        """Step time stays flat as tokens per step grow (``E <= STEP_TIME_FLAT``)."""
        return self.elasticity is not None and self.elasticity <= STEP_TIME_FLAT


def subwindow_points(
    tokens_sum: list[float | None],
    steps: list[float | None],
    itl_sum: list[float | None],
    itl_count: list[float | None],
) -> tuple[tuple[float, float], ...]:
    """``(tokens per step, seconds per step)`` of each sub-window from the four increases (same order);
    sub-windows missing a value, without steps or without inter-token gaps are skipped.
    """
    points = []
    for tok, n, s, c in zip(tokens_sum, steps, itl_sum, itl_count, strict=True):
        if tok is None or n is None or s is None or c is None or n <= 0 or c <= 0 or tok < 0 or s < 0:
            continue
        per_step, seconds = tok / n, s / c
        if not (per_step <= _MAX_TOKENS_PER_STEP and seconds < float("inf")):  # no step: scaled or broken counters
            continue
        points.append((per_step, seconds))
    return tuple(points)


#: the most tokens one step schedules: max_num_batched_tokens, a signed 32-bit int (vLLM's scheduler); a
#: sub-window reading more per step (1e300 from a counter scaled or gone wrong) is no step, and its square
#: would overflow the fit's float
_MAX_TOKENS_PER_STEP = 2**31 - 1


def fit_step_time(points: tuple[tuple[float, float], ...]) -> StepFit:
    """Fit ``seconds per step = a + b x tokens per step`` (module docstring for the rule and thresholds)."""
    if len(points) < MIN_POINTS:
        return StepFit(points, None, None, None, None, f"{len(points)} sub-windows with steps, needs {MIN_POINTS}")
    ns = [n for n, _ in points]
    spread = max(ns) / min(ns) if min(ns) > 0 else None
    if spread is None or spread < MIN_SPREAD:
        return StepFit(
            points,
            None,
            None,
            None,
            spread,
            f"tokens per step varied by {times(spread, 2)}, needs {times(MIN_SPREAD, 1)}",
        )
    n_mean = sum(ns) / len(ns)
    t_mean = sum(t for _, t in points) / len(points)
    sxx = sum((n - n_mean) ** 2 for n in ns)
    sxy = sum((n - n_mean) * (t - t_mean) for n, t in points)
    if t_mean <= 0:
        return StepFit(points, None, None, None, spread, "no step time measured")
    slope = sxy / sxx
    return StepFit(points, slope * n_mean / t_mean, slope, t_mean - slope * n_mean, spread)


__all__ = [
    "MIN_POINTS",
    "MIN_SPREAD",
    "STEP_TIME_FLAT",
    "STEP_TIME_GROWS",
    "SUBWINDOWS",
    "StepFit",
    "fit_step_time",
    "subwindow_points",
]
