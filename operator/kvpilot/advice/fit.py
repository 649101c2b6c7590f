"""The workload of a window, fitted from the metrics vLLM exports (docs/diagnosis.md, "Predictions").

What the engine model needs to replay a window, and where each comes from (vLLM 0.29.0's
``PrometheusStatLogger``, ``vllm/v1/metrics/loggers.py``; the signals of ``kvpilot.diagnose.signals``):

- **arrivals**: every request that arrived in the window either finished in it, or is running or waiting
  at its end, so ``arrivals = finished + (running at end - running at start) + (waiting at end - waiting at
  start)`` (``vllm:request_success`` and the two gauges), and the same holds for each scrape interval of it
  (:func:`arrival_profile`): the replay gets each interval's own number of arrivals, at uniformly drawn times
  inside it (a Poisson process given its counts), so a burst or a lull of the window is replayed as it was;
- **prompt and output lengths**: the ``vllm:request_prompt_tokens`` / ``vllm:request_generation_tokens``
  histograms of the requests finished in the window. Their buckets (1, 2, 5, 10, 20, 50, ... up to
  ``max_model_len``: ``build_1_2_5_buckets``) give the share of requests in each bucket and their ``_sum`` the
  exact mean: each bucket becomes one length at the same relative place in every bucket, so the lengths' mean
  is the histogram's (:func:`length_distribution`): exact for fixed lengths, and no length leaves its bucket.
  Without buckets, the mean alone (a fixed length);
- **prefix reuse**: the prefix cache's hit rate (``vllm:prefix_cache_hits`` / ``_queries``, tokens) as one
  prefix every request shares, ``hit rate x mean prompt`` tokens long, rounded to whole KV blocks (only full
  blocks hit, ``vllm/v1/core/kv_cache_manager.py``): right for a hot system prompt, and says nothing about how
  a larger cache would change the hit rate;
- **the window's start**: the running and waiting gauges at its first instant (``offset``), so a replay
  starts with the queue the window started with.

Pure functions, no I/O.
"""

from __future__ import annotations

import math
import random
from bisect import bisect
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate

from kvpilot.diagnose.limits import Limits
from kvpilot.diagnose.signals import FitName, Signals
from kvpilot.text.documents import JsonObject
from kvpilot.text.numbers import count, fig, number, percent


class FitError(ValueError):
    """The window does not hold what a workload fit needs (one sentence naming what is missing)."""


@dataclass(frozen=True)
class LengthDistribution:
    """Token lengths as point masses: ``values`` with probabilities ``weights`` (summing to 1).

    ``mean``: the histogram's exact mean (tokens); ``source``: ``histogram`` or ``mean``.
    """

    values: tuple[int, ...]
    weights: tuple[float, ...]
    mean: float
    source: str

    @cached_property
    def _cumulative(self) -> tuple[list[float], float]:
        cum = list(accumulate(self.weights))
        return cum, cum[-1] + 0.0

    def sample(self, rng: random.Random) -> int:
        """One length drawn with ``rng``: ``rng.choices(values, weights)[0]``, its cumulative weights summed once."""
        if len(self.values) == 1:
            return self.values[0]
        cum, total = self._cumulative
        return self.values[bisect(cum, rng.random() * total, 0, len(cum) - 1)]

    @property
    def max(self) -> int:
        """The longest length."""
        return max(self.values)

    def to_json(self) -> JsonObject:
        """``{"values", "weights"}`` (the ``replay.workload`` lengths of ``-o json``)."""
        return {"values": list(self.values), "weights": [round(w, 4) for w in self.weights]}

    def describe(self) -> str:
        """``4,000 tokens`` or ``1,250 (50 %), 2,750 (50 %) tokens; mean 2,000``."""
        if len(self.values) == 1:
            return count(self.values[0], "tokens")
        parts = ", ".join(f"{count(v)} ({percent(w, 0)})" for v, w in zip(self.values, self.weights, strict=True))
        return f"{parts} tokens; mean {count(self.mean)}"


def length_distribution(
    buckets: list[tuple[float, float]] | None,
    total: float | None,
    n: float | None,
    fallback_mean: float | None,
    max_len: int,
) -> LengthDistribution | None:
    """Lengths from a histogram's bucket increases ``[(le, cumulative count)]``, ``_sum`` and ``_count``.

    Bucket ``i`` holds lengths in ``(lo_i, hi_i]`` (``lo_i`` the previous edge; the ``+Inf`` bucket ends at
    ``max_len``); its requests all get the length ``lo_i + 1 + a (hi_i - lo_i - 1)``, one relative position
    ``a`` in [0, 1] for every bucket, solved so the mean is ``total / n``: the buckets' widths differ tenfold
    (1, 2, 5, 10, ...), and the same relative place in each puts no bucket's share of the mean on another
    (fixed lengths come back exactly; 80 % chats of 150-250 tokens and 20 % documents of 7,000-9,000 as 155,
    365 and 7,750). Counts are rates extrapolated by PromQL, so differences are clamped at 0. Without buckets,
    a point mass at ``total / n`` or ``fallback_mean``.

    A count, sum or mean that is not a finite number (a hostile or broken exporter) is unknown: no histogram,
    no mean from it.

    Returns:
        None when neither a histogram nor a mean is known.
    """
    mean = total / n if total is not None and n else fallback_mean
    if mean is not None and not math.isfinite(mean):
        mean = fallback_mean if fallback_mean is not None and math.isfinite(fallback_mean) else None
    rows = sorted(buckets or [])
    if any(not math.isfinite(cum) for _, cum in rows):
        rows = []
    masses: list[tuple[float, float, float]] = []  # (lo, hi, count)
    prev_le, prev_cum = 0.0, 0.0
    for le, cum in rows:
        hi = float(max_len) if math.isinf(le) else le
        k = max(0.0, cum - prev_cum)
        if k > 0 and hi > prev_le:
            masses.append((prev_le, min(hi, float(max_len)), k))
        prev_le, prev_cum = (le if not math.isinf(le) else prev_le), max(prev_cum, cum)
    total_k = sum(k for _, _, k in masses)
    if not masses or total_k <= 0:
        if mean is None or mean <= 0:
            return None
        value = max(1, min(max_len, round(mean)))
        return LengthDistribution((value,), (1.0,), float(value), "mean")
    if mean is None:
        mean = sum((lo + hi) / 2 * k for lo, hi, k in masses) / total_k

    # one relative position a in [0, 1] for every bucket, solved so the mean is the histogram's
    base = sum((lo + 1) * k for lo, _, k in masses)
    span = sum(max(0.0, hi - lo - 1) * k for lo, hi, k in masses)
    a = min(1.0, max(0.0, (mean * total_k - base) / span)) if span > 0 else 0.0
    values: dict[int, float] = {}
    for lo, hi, k in masses:
        v = max(1, min(max_len, round(lo + 1 + a * max(0.0, hi - lo - 1))))
        values[v] = values.get(v, 0.0) + k
    keys = tuple(sorted(values))
    weights = tuple(values[v] / total_k for v in keys)
    return LengthDistribution(keys, weights, float(mean), "histogram")


@dataclass(frozen=True)
class WorkloadFit:
    """A window's traffic as the engine model replays it (module docstring for each part).

    Attributes:
        window_seconds: the window (s); ``sample_interval``: seconds between its scrapes.
        arrival_rate: requests per second arriving; ``arrivals``: in the window.
        served_rate: requests finished per second.
        prompt / output: the length distributions (tokens).
        shared_prefix_tokens: the prefix every request shares (0: none); ``prefix_hit_rate`` (0-1) it
            stands for, None without prefix-cache queries.
        running_start / waiting_start: the gauges at the window's start.
        notes: sentences saying what was assumed.
        profile: ``(from, to, arrivals)`` per stretch of the window (seconds from its start), from the
            window's series (:func:`arrival_profile`); () when they are missing (arrivals spread evenly).
    """

    window_seconds: float
    sample_interval: float
    arrival_rate: float
    arrivals: float
    served_rate: float
    prompt: LengthDistribution
    output: LengthDistribution
    shared_prefix_tokens: int
    prefix_hit_rate: float | None
    running_start: float
    waiting_start: float
    notes: tuple[str, ...] = field(default=())
    profile: tuple[tuple[float, float, int], ...] = ()

    def describe(self) -> str:
        """One sentence: arrivals, lengths, prefix, start."""
        prefix = "no shared prefix"
        if self.shared_prefix_tokens:
            tokens, rate = count(self.shared_prefix_tokens, "tokens"), percent(self.prefix_hit_rate)
            prefix = f"a shared prefix of {tokens} (hit rate {rate})"
        when = (
            f"each of {count(len(self.profile))} scrape intervals' own count at random times in it"
            if self.profile
            else "spread evenly"
        )
        return (
            f"Workload fitted from the window: {number(self.arrival_rate, 2, 'req/s')} arriving "
            f"({count(self.arrivals)} in {fig(self.window_seconds, 1)} s, {when}; "
            f"{number(self.served_rate, 2, 'req/s')} served), prompts {self.prompt.describe()}, outputs "
            f"{self.output.describe()}, {prefix}; {fig(self.running_start, 1)} running and "
            f"{fig(self.waiting_start, 1)} waiting at the start."
        )

    def to_json(self) -> JsonObject:
        """The ``replay.workload`` object of ``-o json``."""
        return {
            "arrival_rate_per_s": round(self.arrival_rate, 6),
            "arrivals": round(self.arrivals, 3),
            "served_per_s": round(self.served_rate, 6),
            "prompt_tokens": {
                "values": list(self.prompt.values),
                "weights": [round(w, 4) for w in self.prompt.weights],
            },
            "output_tokens": {
                "values": list(self.output.values),
                "weights": [round(w, 4) for w in self.output.weights],
            },
            "shared_prefix_tokens": self.shared_prefix_tokens,
            "running_start": self.running_start,
            "waiting_start": self.waiting_start,
        }


#: the prompt's part every request shares is at most this share of the shortest prompt, so each request
#: keeps tokens of its own
_MAX_PREFIX_SHARE = 0.95


def _require_finite(signals: Signals) -> None:
    """A gauge or counter at +Inf or NaN in the window is nothing real to replay (it would round an infinity).

    Raises:
        FitError: naming the series.
    """
    for name, series in signals.fit_series.items():
        if any(x is not None and not math.isfinite(x) for x in series):
            raise FitError(f"the window's {name} series holds a value that is not a finite number: no workload to fit")


def fit_workload(signals: Signals, limits: Limits, max_model_len: int) -> WorkloadFit:
    """The window's workload (module docstring).

    Args:
        signals: the target's signals, with ``fit`` values (``compute_signals(fit=True)`` or
            ``PrometheusSource.fetch_fit``).
        limits: its limits (block size, prefix caching).
        max_model_len: the longest request the replay accepts (tokens): lengths are clipped below it.

    Raises:
        FitError: no finished request and no queue (nothing to fit), or no prompt length.
    """
    v, fv = signals.values, signals.fit
    window = signals.window_seconds
    notes: list[str] = []
    _require_finite(signals)
    finished = v.get("requests_finished_increase")
    if finished is None:
        raise FitError(
            "no increase of vllm:request_success in the window (none, or one scrape: an increase needs two): "
            "the arrival rate is unknown"
        )
    run_end, wait_end = v.get("running_last") or 0.0, v.get("waiting_last") or 0.0
    run_start, wait_start = fv.get("running_first"), fv.get("waiting_first")
    if run_start is None or wait_start is None:
        notes.append("No gauge sample at or before the window's start: the server is taken as empty then.")
    run_start, wait_start = run_start or 0.0, wait_start or 0.0
    arrivals = max(0.0, finished + (run_end - run_start) + (wait_end - wait_start))
    if not math.isfinite(arrivals):
        raise FitError("the window's request counts are not finite numbers: no workload to fit")
    if arrivals <= 0 and finished <= 0:
        raise FitError("no request arrived or finished in the window: nothing to replay")
    served = v.get("requests_finished_per_s") or finished / window
    prompt_fallback = v.get("prompt_tokens_per_request")
    prompt = length_distribution(
        signals.buckets.get("prompt_tokens"),
        fv.get("prompt_len_sum_increase"),
        fv.get("prompt_len_count_increase"),
        prompt_fallback,
        max_model_len - 1,
    )
    if prompt is None:
        raise FitError("no prompt length in the window (vllm:request_prompt_tokens, vllm:prompt_tokens)")
    gen, fin_rate = v.get("generation_tokens_per_s"), v.get("requests_finished_per_s")
    output = length_distribution(
        signals.fit_buckets.get("output_len"),
        fv.get("output_len_sum_increase"),
        fv.get("output_len_count_increase"),
        gen / fin_rate if gen is not None and fin_rate else None,
        max(1, max_model_len - prompt.max),
    )
    if output is None:
        output = LengthDistribution((1,), (1.0,), 1.0, "mean")
        notes.append("No generated-token count in the window: one output token a request assumed.")
    if prompt.source == "mean":
        notes.append("No vllm:request_prompt_tokens histogram: every prompt taken at the mean length.")
    hit_rate = v.get("prefix_hit_rate")
    block = int(limits.value("block_size") or 16)
    shared = 0
    if hit_rate and hit_rate > 0:
        shortest = min(prompt.values)
        shared = int(round(hit_rate * prompt.mean / block)) * block
        shared = min(shared, int(_MAX_PREFIX_SHARE * shortest) // block * block)
    interval = _sample_interval(v.get("samples_in_window"), window)
    profile = arrival_profile(signals.fit_series, window, interval)
    if profile:
        arrivals = float(sum(n for _, _, n in profile))
    else:
        notes.append("No gauge series over the window: its arrivals are spread evenly over it.")
    return WorkloadFit(
        window_seconds=window,
        sample_interval=interval,
        arrival_rate=arrivals / window,
        arrivals=arrivals,
        profile=profile,
        served_rate=served,
        prompt=prompt,
        output=output,
        shared_prefix_tokens=max(0, shared),
        prefix_hit_rate=hit_rate,
        running_start=run_start,
        waiting_start=wait_start,
        notes=tuple(notes),
    )


def arrival_profile(
    series: dict[FitName, list[float | None]], window: float, sample_interval: float
) -> tuple[tuple[float, float, int], ...]:
    """Arrivals per stretch of the window: ``(from, to, count)`` (seconds from its start, requests).

    ``series`` holds ``finished`` (``vllm:request_success``, cumulative), ``running`` and ``waiting`` at evenly
    spaced instants from the window's start to its end (``Signals.fit_series``: the last scrape at or before each).
    What arrived between two scrapes either finished or is still running or waiting at the later one:
    ``arrivals = d finished + d running + d waiting`` (a counter that went down restarted: its value is what
    finished since). A scrape shows at the first instant after it, so a stretch runs from one instant where a
    value changed to the next (at most one scrape interval: a stretch where nothing changed for that long had no
    arrival), which places each scrape's arrivals within one instant's step of where they were. () when a point
    is missing.
    """
    f, r, q = series.get("finished"), series.get("running"), series.get("waiting")
    if not f or not r or not q or len({len(f), len(r), len(q)}) != 1 or len(f) < 2:
        return ()
    if any(x is None for x in (*f, *r, *q)):
        return ()
    fs, rs, qs = [float(x or 0.0) for x in f], [float(x or 0.0) for x in r], [float(x or 0.0) for x in q]
    m = len(fs) - 1
    step = window / m
    longest = max(1, math.ceil(sample_interval / step - 1e-9))
    out = []
    start = 0
    for j in range(1, m + 1):
        changed = fs[j] != fs[j - 1] or rs[j] != rs[j - 1] or qs[j] != qs[j - 1]
        if not (changed or j - start >= longest or j == m):
            continue
        done = fs[j] - fs[start] if fs[j] >= fs[start] else fs[j]
        out.append((start * step, j * step, max(0, round(done + rs[j] - rs[start] + qs[j] - qs[start]))))
        start = j
    return tuple(out)


def _sample_interval(samples: float | None, window: float) -> float:
    """Seconds between scrapes: the window over the samples' gaps (a range includes both ends); 10 s unknown."""
    if samples and samples > 1:
        return window / (samples - 1)
    return min(10.0, window)
