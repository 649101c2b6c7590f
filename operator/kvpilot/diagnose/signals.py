"""Signals: what the rules read, computed the same way from samples (scrape, recording) or PromQL.

One table, :data:`SIGNAL_DEFS`, says what each signal is: a vLLM metric family (canonical catalog
name), a PromQL-style function over the window, and how the series of one target are combined.
:func:`compute_signals` evaluates the table on samples with :mod:`kvpilot.diagnose.promql`;
:mod:`kvpilot.diagnose.sources.prometheus` turns the same table into one PromQL query per signal
for all targets at once. Both then call :func:`finish_signals`, so derived values (hit rate,
quantiles with bucket bounds, offered load) have one implementation.

Name realities handled here (docs/background.md §8, docs/metrics.md): every family is looked up under
each exposed spelling in a fixed preference order (new name with colon, new name escaped
``vllm_``, legacy name with colon, legacy escaped); per target, the first spelling that yields a
value wins, exactly as PromQL's ``A or ignoring(...) B`` does. ``_created`` samples are ignored;
histograms use ``_bucket`` only (so ``_sum`` before ``_bucket`` does not matter); series of one
target that differ only in ``pid`` (0.9-0.11 KV gauge) or are exact duplicates combine by ``max``.

Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeGuard, get_args

from kvpilot.diagnose import promql
from kvpilot.diagnose.steptime import SUBWINDOWS, fit_step_time, subwindow_points
from kvpilot.metrics.catalog import BY_NAME, PREFIX, exposed_names, match_name
from kvpilot.text.numbers import significant

#: labels that identify a target (docs/diagnosis.md: by (namespace, pod, model_name, engine); instance and
#: job identify a target that Prometheus scraped without Kubernetes pod labels).
TARGET_LABELS: tuple[str, ...] = ("namespace", "pod", "instance", "job", "model_name", "engine")

#: PromQL's default lookback delta (Prometheus ``--query.lookback-delta`` default 5m): an instant
#: selector sees the last sample at most this old.
LOOKBACK_SECONDS = 300.0


@dataclass(frozen=True, order=True)
class TargetKey:
    """One diagnosed vLLM engine: the values of :data:`TARGET_LABELS` ("" when absent)."""

    namespace: str = ""
    pod: str = ""
    instance: str = ""
    job: str = ""
    model_name: str = ""
    engine: str = ""

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> TargetKey:
        """The key of a series from its labels (other labels ignored)."""
        return cls(**{k: str(labels.get(k, "")) for k in TARGET_LABELS})

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when a series without ``model_name`` (``cache_config_info``) belongs to this target."""
        for k in ("namespace", "pod", "instance", "job"):
            if labels.get(k, "") != getattr(self, k):
                return False
        return not labels.get("engine") or not self.engine or labels.get("engine") == self.engine


#: Every signal name, the keys of :attr:`Signals.values` and of ``-o json``'s ``signals`` (docs/diagnosis.md,
#: "Signals"): the measured ones of :data:`SIGNAL_DEFS`, then the ones :func:`finish_signals` derives. Typed, so a
#: misspelt name in a rule is a mypy error rather than a signal that is silently unknown.
SignalName = Literal[
    "running_avg",
    "running_max",
    "running_min",
    "running_last",
    "running_median",
    "samples_in_window",
    "last_sample_time",
    "waiting_avg",
    "waiting_max",
    "waiting_last",
    "waiting_median",
    "waiting_trend_per_s",
    "waiting_capacity_avg",
    "waiting_deferred_avg",
    "waiting_deferred_median",
    "kv_usage_avg",
    "kv_usage_max",
    "kv_usage_last",
    "preemptions_increase",
    "preemptions_per_s",
    "preemptions_last",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "prefix_queries_increase",
    "prefix_hits_increase",
    "prefix_queries_first",
    "prefix_hits_first",
    "external_prefix_queries_increase",
    "external_prefix_hits_increase",
    "requests_finished_per_s",
    "requests_finished_increase",
    "iteration_tokens_sum_increase",
    "iteration_steps_increase",
    "itl_sum_increase",
    "itl_count_increase",
    "prefill_time_sum_increase",
    "prefill_time_count_increase",
    "queue_time_sum_increase",
    "queue_time_count_increase",
    # read off vllm:lora_requests_info's labels (LoraIndex)
    "lora_max_loras",
    "lora_adapters_max",
    "lora_adapters_seen",
    # derived by finish_signals
    "prefix_hit_rate",
    "prompt_tokens_per_request",
    "offered_prompt_tokens_per_s",
    "tokens_per_step_avg",
    "itl_mean_s",
    "prefill_time_mean_s",
    "prefill_step_times",
    "queue_time_mean_s",
    "queue_step_times",
    "prefix_reused_share",
    "prefix_reused_tokens",
    "step_subwindows",
    "step_time_elasticity",
    "last_sample_age_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "itl_p99_s",
]
#: the names of :data:`SignalName`, for run-time checks
SIGNAL_NAMES: frozenset[str] = frozenset(get_args(SignalName))
#: the names of :data:`FIT_SIGNAL_DEFS` and :data:`FIT_SERIES` (``kvpilot.advice``'s fit): the keys of
#: :attr:`Signals.fit`, ``fit_buckets`` and ``fit_series``
FitName = Literal[
    "running_first",
    "waiting_first",
    "ttft_sum_increase",
    "ttft_count_increase",
    "prompt_len_sum_increase",
    "prompt_len_count_increase",
    "output_len_sum_increase",
    "output_len_count_increase",
    "prompt_tokens_cached_increase",
    "output_len",
    "finished",
    "running",
    "waiting",
]
_FIT_NAMES: frozenset[str] = frozenset(get_args(FitName))
#: the histograms kept as bucket increases (:data:`HISTOGRAMS`), the keys of :attr:`Signals.buckets`
HistogramName = Literal["ttft", "itl", "iteration_tokens", "prompt_tokens", "computed_tokens"]
_HISTOGRAM_NAMES: frozenset[str] = frozenset(get_args(HistogramName))


def is_signal_name(name: str) -> TypeGuard[SignalName]:
    """True when ``name`` is a :data:`SignalName` (a key of :attr:`Signals.values`)."""
    return name in SIGNAL_NAMES


def is_fit_name(name: str) -> TypeGuard[FitName]:
    """True when ``name`` is a :data:`FitName` (a key of :attr:`Signals.fit`, ``fit_buckets``, ``fit_series``)."""
    return name in _FIT_NAMES


def is_histogram_name(name: str) -> TypeGuard[HistogramName]:
    """True when ``name`` is a :data:`HistogramName` (a key of :attr:`Signals.buckets`)."""
    return name in _HISTOGRAM_NAMES


@dataclass(frozen=True)
class SignalDef:
    """One signal: ``agg by (target) (fn(family[window]))`` in PromQL terms.

    Attributes:
        name: the signal's key in ``Signals.values`` and in ``-o json`` (units in the name:
            ``_per_s`` per second, ``_s`` seconds; ``kv_usage_*`` ratio 0-1; others requests or tokens).
        family: canonical catalog family (``vllm:num_requests_waiting``).
        fn: ``avg`` | ``max`` | ``min`` | ``last`` | ``median`` (``quantile_over_time(0.5, ...)``) | ``deriv``
            (per second) | ``rate`` (per second)
            | ``increase`` | ``count`` (samples in window) | ``timestamp`` (last sample time,
            5 m lookback) | ``first`` (the value at the window's start: the last sample at or before it,
            5 m lookback; PromQL ``NAME offset w``) | ``value`` (the last sample at or before the end, 5 m
            lookback: the instant selector) | ``buckets`` (increase of each ``_bucket``, by ``le``).
        suffix: sample suffix (``_total`` for counters, ``_bucket`` for histograms).
        match: label equality filters, e.g. ``(("reason", "capacity"),)``.
        agg: how series of one target combine: ``max`` (duplicates, ``pid``) or ``sum``.
    """

    name: SignalName | HistogramName | FitName
    family: str
    fn: str
    suffix: str = ""
    match: tuple[tuple[str, str], ...] = ()
    agg: str = "max"


_RUN, _WAIT, _KV = "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"
_BY_REASON = "vllm:num_requests_waiting_by_reason"

#: Histograms kept as bucket increases (signal name -> family); quantiles come from them. Only the
#: ones the report uses: each costs one bucket row per target and ``le`` (about 20 per target), the
#: largest part of a 1,000-target query (benchmarks/diagnose_scale.py).
HISTOGRAMS: dict[HistogramName, str] = {
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "iteration_tokens": "vllm:iteration_tokens_total",
    # per request: prompt tokens, and prompt tokens less those found in the prefix cache (vLLM 0.29+): the reuse
    # of each request, judged per prefix (prefix_reuse)
    "prompt_tokens": "vllm:request_prompt_tokens",
    "computed_tokens": "vllm:request_prefill_kv_computed_tokens",
}

SIGNAL_DEFS: tuple[SignalDef, ...] = (
    SignalDef("running_avg", _RUN, "avg"),
    SignalDef("running_max", _RUN, "max"),
    SignalDef("running_min", _RUN, "min"),
    SignalDef("running_last", _RUN, "last"),
    SignalDef("running_median", _RUN, "median"),
    SignalDef("samples_in_window", _RUN, "count"),
    SignalDef("last_sample_time", _RUN, "timestamp"),
    SignalDef("waiting_avg", _WAIT, "avg"),
    SignalDef("waiting_max", _WAIT, "max"),
    SignalDef("waiting_last", _WAIT, "last"),
    SignalDef("waiting_median", _WAIT, "median"),
    SignalDef("waiting_trend_per_s", _WAIT, "deriv"),
    SignalDef("waiting_capacity_avg", _BY_REASON, "avg", match=(("reason", "capacity"),)),
    SignalDef("waiting_deferred_avg", _BY_REASON, "avg", match=(("reason", "deferred"),)),
    SignalDef("waiting_deferred_median", _BY_REASON, "median", match=(("reason", "deferred"),)),
    SignalDef("kv_usage_avg", _KV, "avg"),
    SignalDef("kv_usage_max", _KV, "max"),
    SignalDef("kv_usage_last", _KV, "last"),
    SignalDef("preemptions_increase", "vllm:num_preemptions", "increase", "_total"),
    SignalDef("preemptions_per_s", "vllm:num_preemptions", "rate", "_total"),
    SignalDef("preemptions_last", "vllm:num_preemptions", "last", "_total"),
    SignalDef("prompt_tokens_per_s", "vllm:prompt_tokens", "rate", "_total"),
    SignalDef("generation_tokens_per_s", "vllm:generation_tokens", "rate", "_total"),
    SignalDef("prefix_queries_increase", "vllm:prefix_cache_queries", "increase", "_total"),
    SignalDef("prefix_hits_increase", "vllm:prefix_cache_hits", "increase", "_total"),
    # the two counters since the server started, at the window's start: whether its cache had filled once by then
    SignalDef("prefix_queries_first", "vllm:prefix_cache_queries", "first", "_total"),
    SignalDef("prefix_hits_first", "vllm:prefix_cache_hits", "first", "_total"),
    SignalDef("external_prefix_queries_increase", "vllm:external_prefix_cache_queries", "increase", "_total"),
    SignalDef("external_prefix_hits_increase", "vllm:external_prefix_cache_hits", "increase", "_total"),
    SignalDef("requests_finished_per_s", "vllm:request_success", "rate", "_total", agg="sum"),
    SignalDef("requests_finished_increase", "vllm:request_success", "increase", "_total", agg="sum"),
    SignalDef("iteration_tokens_sum_increase", "vllm:iteration_tokens_total", "increase", "_sum", agg="sum"),
    SignalDef("iteration_steps_increase", "vllm:iteration_tokens_total", "increase", "_count", agg="sum"),
    SignalDef("itl_sum_increase", "vllm:inter_token_latency_seconds", "increase", "_sum", agg="sum"),
    SignalDef("itl_count_increase", "vllm:inter_token_latency_seconds", "increase", "_count", agg="sum"),
    SignalDef("prefill_time_sum_increase", "vllm:request_prefill_time_seconds", "increase", "_sum", agg="sum"),
    SignalDef("prefill_time_count_increase", "vllm:request_prefill_time_seconds", "increase", "_count", agg="sum"),
    SignalDef("queue_time_sum_increase", "vllm:request_queue_time_seconds", "increase", "_sum", agg="sum"),
    SignalDef("queue_time_count_increase", "vllm:request_queue_time_seconds", "increase", "_count", agg="sum"),
    *(SignalDef(name, fam, "buckets", "_bucket", agg="sum") for name, fam in HISTOGRAMS.items()),
)

#: The increases evaluated over each of the window's ``steptime.SUBWINDOWS`` sub-windows (in this order:
#: ``steptime.subwindow_points``' arguments): tokens and steps of ``vllm:iteration_tokens_total``, seconds and
#: gaps of ``vllm:inter_token_latency_seconds``.
SUBWINDOW_DEFS: tuple[SignalDef, ...] = tuple(
    sd
    for sd in SIGNAL_DEFS
    if sd.name
    in ("iteration_tokens_sum_increase", "iteration_steps_increase", "itl_sum_increase", "itl_count_increase")
)

#: What the workload and step-time fit of ``kvpilot.advice`` reads besides :data:`SIGNAL_DEFS` (docs/diagnosis.md,
#: "Predictions"): the queue and running set at the window's start, the mean TTFT (the observed side of the replay
#: check, with SIGNAL_DEFS' queue time), the prompt and output lengths of the requests finished in the window
#: (``vllm:request_prompt_tokens``' sum and count, its buckets being SIGNAL_DEFS' ``prompt_tokens`` histogram;
#: ``vllm:request_generation_tokens``; observed at finish: ``PrometheusStatLogger.record``,
#: ``vllm/v1/metrics/loggers.py``, vLLM 0.29) and the cached prompt tokens.
#: Evaluated only when asked (``compute_signals(fit=True)``; ``--prometheus``: a second round of queries for
#: the targets predicted, ``PrometheusSource.fetch_fit``), so a diagnosis alone sends no more queries.
FIT_SIGNAL_DEFS: tuple[SignalDef, ...] = (
    SignalDef("running_first", _RUN, "first"),
    SignalDef("waiting_first", _WAIT, "first"),
    SignalDef("ttft_sum_increase", "vllm:time_to_first_token_seconds", "increase", "_sum", agg="sum"),
    SignalDef("ttft_count_increase", "vllm:time_to_first_token_seconds", "increase", "_count", agg="sum"),
    SignalDef("prompt_len_sum_increase", "vllm:request_prompt_tokens", "increase", "_sum", agg="sum"),
    SignalDef("prompt_len_count_increase", "vllm:request_prompt_tokens", "increase", "_count", agg="sum"),
    SignalDef("output_len_sum_increase", "vllm:request_generation_tokens", "increase", "_sum", agg="sum"),
    SignalDef("output_len_count_increase", "vllm:request_generation_tokens", "increase", "_count", agg="sum"),
    SignalDef("prompt_tokens_cached_increase", "vllm:prompt_tokens_cached", "increase", "_total", agg="sum"),
    SignalDef("output_len", "vllm:request_generation_tokens", "buckets", "_bucket", agg="sum"),
)

#: The fit's time series: each of these at ``FIT_STEPS + 1`` instants from the window's start to its end (the last
#: sample at or before each, 5 m lookback: a PromQL range query of the instant selector), so the arrivals of each
#: stretch of the window follow from what finished and what the gauges gained (``kvpilot.advice.fit``).
FIT_STEPS = 60
FIT_SERIES: tuple[SignalDef, ...] = (
    SignalDef("finished", "vllm:request_success", "value", "_total", agg="sum"),
    SignalDef("running", _RUN, "value"),
    SignalDef("waiting", _WAIT, "value"),
)

#: quantiles reported (signal name -> (histogram, q))
QUANTILES: dict[SignalName, tuple[HistogramName, float]] = {
    "ttft_p50_s": ("ttft", 0.5),
    "ttft_p99_s": ("ttft", 0.99),
    "itl_p99_s": ("itl", 0.99),
}


def spellings(family: str) -> tuple[str, ...]:
    """Exposed family names to try for ``family``, in preference order.

    New name with colon, new name escaped (``vllm_``), then each legacy name the same two ways.
    Source: catalog renames (docs/background.md §8) and the colon escaping of prometheus_client >= 0.22
    answering an OpenMetrics request (docs/metrics.md, "Escaping").
    """
    out: list[str] = []
    for name in exposed_names(family):
        out.extend((name, "vllm_" + name[len(PREFIX) :]))
    return tuple(out)


@dataclass
class Signals:
    """Everything the rules know about one target over one window.

    Attributes:
        values: signal name -> number or ``None`` (unknown: no series, too few samples, NaN/Inf).
        buckets: histogram name (:data:`HISTOGRAMS`) -> ``[(upper_bound, increase)]`` over the window.
        quantiles: quantile signal name -> :class:`promql.Quantile` (value and bucket bounds).
        spelling: canonical family -> the exposed family name that supplied it (says whether
            legacy or escaped names were used).
        cache_config: labels of ``vllm:cache_config_info`` for this target ({} when absent).
        step_points: ``(tokens per step, seconds per step)`` of each sub-window with data
            (:mod:`kvpilot.diagnose.steptime`), oldest first.
        operator_limits: the kvpilot operator's ``kvpilot_vllmserver_limit`` gauges for this target's
            namespace and pod (``{limit: value}``, e.g. ``{"max_num_seqs": 4.0}``; {} when absent).
        rejected: signal family (``kv_usage``, ``running``, ``waiting``) -> why its values were
            discarded as impossible (KV usage outside 0-1, a negative request count or one above
            :data:`MAX_REQUEST_GAUGE`); they are ``None``.
        window_seconds / end: the window evaluated, ``end`` in Unix seconds.
        fit / fit_buckets: the values and bucket increases of :data:`FIT_SIGNAL_DEFS` when they were
            evaluated ({} otherwise), for ``kvpilot.advice``; ``fit_series``: each of :data:`FIT_SERIES` at the
            ``FIT_STEPS + 1`` instants from the window's start to its end (None where there is no sample).
    """

    values: dict[SignalName, float | None] = field(default_factory=dict)
    buckets: dict[HistogramName, list[tuple[float, float]]] = field(default_factory=dict)
    quantiles: dict[SignalName, promql.Quantile] = field(default_factory=dict)
    spelling: dict[str, str] = field(default_factory=dict)
    cache_config: dict[str, str] = field(default_factory=dict)
    operator_limits: dict[str, float] = field(default_factory=dict)
    step_points: tuple[tuple[float, float], ...] = ()
    rejected: dict[str, str] = field(default_factory=dict)
    window_seconds: float = 0.0
    end: float = 0.0
    fit: dict[FitName, float | None] = field(default_factory=dict)
    fit_buckets: dict[FitName, list[tuple[float, float]]] = field(default_factory=dict)
    fit_series: dict[FitName, list[float | None]] = field(default_factory=dict)

    def get(self, name: SignalName) -> float | None:
        """The value of signal ``name``, ``None`` when unknown (a :data:`SignalName`: mypy rejects a misspelt one)."""
        return self.values.get(name)


#: the most requests a running or waiting gauge can count before it is impossible: 2^31 - 1 (vLLM keeps each
#: request in host memory, over 1 KB each: a queue that long alone would be more than 2 TB)
MAX_REQUEST_GAUGE = 2**31 - 1
#: rounding slack around vLLM's KV usage fraction (0-1) before a value counts as impossible
KV_USAGE_SLACK = 1e-6


def finite(value: float | None) -> float | None:
    """``value`` when it is a finite number, else ``None`` (NaN and +-Inf are unknowns)."""
    if value is None or not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value):
        return None
    return float(value)


def aggregate(values: Iterable[float], how: str) -> float | None:
    """PromQL ``max``/``sum`` aggregation (``max`` ignores NaN unless all are NaN, as Prometheus 2.42)."""
    vals = list(values)
    if not vals:
        return None
    if how == "sum":
        return sum(vals)
    real = [v for v in vals if not math.isnan(v)]
    return max(real) if real else math.nan


def evaluate(fn: str, points: list[promql.Point], end: float, window: float) -> float | None:  # noqa: C901
    """Evaluate one :class:`SignalDef` function on one series' points (time-ordered, deduplicated).

    ``timestamp`` uses the 5 m lookback of an instant selector; the others the range ``[window]``.
    """
    if fn == "timestamp":
        seen = [t for t, _ in points if end - LOOKBACK_SECONDS < t <= end]
        return seen[-1] if seen else None
    if fn in ("first", "value"):
        at = end - window if fn == "first" else end
        before = [v for t, v in points if at - LOOKBACK_SECONDS < t <= at]
        return before[-1] if before else None
    pts = promql.in_range(points, end, window)
    if fn == "avg":
        return promql.avg_over_time(pts)
    if fn == "max":
        return promql.max_over_time(pts)
    if fn == "min":
        return promql.min_over_time(pts)
    if fn == "median":
        return promql.quantile_over_time(0.5, pts)
    if fn == "last":
        return pts[-1][1] if pts else None
    if fn == "count":
        return float(len(pts)) if pts else None
    if fn == "deriv":
        return promql.deriv(pts)
    if fn in ("rate", "increase", "buckets"):
        return promql.extrapolated_delta(pts, end - window, end, is_counter=True, is_rate=fn == "rate")
    raise ValueError(f"unknown signal function {fn!r}")


@dataclass
class _Series:
    labels: dict[str, str]
    points: dict[float, float] = field(default_factory=dict)  # timestamp -> value (duplicates: last wins)


#: one series' identity: its sorted label pairs
_SeriesId = tuple[tuple[str, str], ...]
#: a target's series: (exposed family, suffix) -> series identity -> series
_Families = dict[tuple[str, str], dict[_SeriesId, _Series]]


class SampleLike(Protocol):
    """What :func:`compute_signals` reads of a sample (:class:`kvpilot.metrics.exposition.Sample` has it)."""

    @property
    def name(self) -> str:
        """The exposed sample name (any spelling)."""

    @property
    def labels(self) -> Mapping[str, str]:
        """Label name -> value."""

    @property
    def value(self) -> float:
        """The sample value."""

    @property
    def timestamp(self) -> float | None:
        """Unix seconds, or None."""


def _index(samples: Iterable[SampleLike]) -> dict[TargetKey, _Families]:
    """Target -> (exposed family, suffix) -> series labels -> series."""
    out: dict[TargetKey, _Families] = defaultdict(lambda: defaultdict(dict))
    for s in samples:
        if s.timestamp is None:
            continue
        m = match_name(s.name)
        if m is None or m.suffix == "_created":
            continue
        family = s.name[: len(s.name) - len(m.suffix)] if m.suffix else s.name
        labels = dict(s.labels)
        key = TargetKey.from_labels(labels)
        ident = tuple(sorted(labels.items()))
        series = out[key][(family, m.suffix)].get(ident)
        if series is None:
            series = out[key][(family, m.suffix)][ident] = _Series(labels)
        series.points[float(s.timestamp)] = float(s.value)
    return out


def _cache_config(samples: Iterable[SampleLike]) -> list[dict[str, str]]:
    """Label sets of the latest ``vllm:cache_config_info`` series (any spelling), newest first."""
    found: dict[_SeriesId, tuple[float, dict[str, str]]] = {}
    for s in samples:
        m = match_name(s.name)
        if m is None or m.canonical != "vllm:cache_config_info" or m.suffix == "_created":
            continue
        labels = dict(s.labels)
        ident = tuple(sorted(labels.items()))
        t = s.timestamp or 0.0
        if ident not in found or found[ident][0] <= t:
            found[ident] = (t, labels)
    return [labels for _, labels in sorted(found.values(), key=lambda x: -x[0])]


#: The kvpilot operator's limits metric (kvpilot.controller.metrics, docs/alerting.md): one gauge per
#: VLLMServer and ``limit``, its ``namespace``/``pod`` labels naming the vLLM pod.
OPERATOR_LIMIT_METRIC = "kvpilot_vllmserver_limit"


class OperatorLimitIndex:
    """``kvpilot_vllmserver_limit`` values indexed by the vLLM pod they describe (namespace, pod).

    Rows are ``(labels, value)``; a later row for the same (namespace, pod, limit) wins, so pass them
    oldest first. Values that are not finite are dropped (not a limit).
    """

    def __init__(self, rows: Iterable[tuple[Mapping[str, str], float]] = ()):
        self._by_pod: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
        for labels, value in rows:
            limit, pod = labels.get("limit", ""), labels.get("pod", "")
            if limit and pod and finite(value) is not None:
                self._by_pod[(labels.get("namespace", ""), pod)][limit] = float(value)

    def get(self, target: TargetKey) -> dict[str, float]:
        """``{limit: value}`` for ``target``'s namespace and pod, {} when the operator exports none."""
        return dict(self._by_pod.get((target.namespace, target.pod), {})) if target.pod else {}


def _operator_limits(samples: Iterable[SampleLike], end: float, window_seconds: float) -> OperatorLimitIndex:
    """The last ``kvpilot_vllmserver_limit`` sample in ``[end - window, end]`` per pod and limit
    (``last_over_time``, as the Prometheus source asks for it; Prometheus 2.42 ranges include both ends).
    """
    rows = sorted(
        (
            (s.timestamp, dict(s.labels), s.value)
            for s in samples
            if s.name == OPERATOR_LIMIT_METRIC
            and s.timestamp is not None
            and end - window_seconds <= s.timestamp <= end
        ),
        key=lambda row: row[0],
    )
    return OperatorLimitIndex((labels, value) for _, labels, value in rows)


#: vLLM's LoRA gauge (``vllm/v1/metrics/loggers.py``, vLLM 0.29, servers started with ``--enable-lora``):
#: labels ``max_lora``, ``running_lora_adapters``, ``waiting_lora_adapters`` (comma-separated adapter names);
#: no ``model_name``/``engine``. Each step sets the series of the current label set to the current time
#: (``set_to_current_time``); series of earlier label sets stay with the time they were last current.
LORA_INFO = "vllm:lora_requests_info"


def _adapter_names(labels: Mapping[str, str]) -> set[str]:
    """Adapters named in ``running_lora_adapters`` and ``waiting_lora_adapters``.

    vLLM 0.29 fills both labels from the same adapters (``LoRARequestStates.update_scheduler_stats``,
    ``vllm/v1/metrics/stats.py``), and a request joins them only when its QUEUED and SCHEDULED events reach the
    output processor, which they do with its first output: the adapters named are those with a request scheduled
    (or preempted) and not finished, never one whose requests all still wait. So at most ``max_lora`` at once.
    """
    names: set[str] = set()
    for key in ("running_lora_adapters", "waiting_lora_adapters"):
        names.update(n.strip() for n in str(labels.get(key, "")).split(",") if n.strip())
    return names


class LoraIndex:
    """``vllm:lora_requests_info`` label sets indexed by place (namespace, pod, instance, job), like
    :class:`CacheConfigIndex` (the gauge has no ``model_name``).

    Rows are ``(labels, value)`` with value the newest sample of that label set in the window (the server's
    time when the set was last current: ``max_over_time``). A place's label sets current during the window
    are those set within ``window_seconds`` of its newest (one clock, the server's, so a recording's
    timestamps need not match it); they give ``lora_max_loras`` (``max_lora``), ``lora_adapters_max`` (the
    most adapters named at once: slots in use, :func:`_adapter_names`) and ``lora_adapters_seen`` (the distinct
    adapters named over the window: those that had requests).
    """

    def __init__(self, rows: Iterable[tuple[Mapping[str, str], float]], window_seconds: float):
        by_place: dict[tuple[str, ...], list[tuple[Mapping[str, str], float]]] = defaultdict(list)
        for labels, value in rows:
            if finite(value) is not None:
                by_place[tuple(labels.get(k, "") for k in ("namespace", "pod", "instance", "job"))].append(
                    (labels, value)
                )
        self._by_place: dict[tuple[str, ...], dict[SignalName, float | None]] = {}
        for place, sets in by_place.items():
            newest = max(v for _, v in sets)
            current = [labels for labels, v in sets if v >= newest - window_seconds]
            slots = [finite(_float(labels.get("max_lora"))) for labels in current]
            known = [m for m in slots if m is not None]
            self._by_place[place] = {
                "lora_max_loras": max(known) if known else None,
                "lora_adapters_max": float(max(len(_adapter_names(labels)) for labels in current)),
                "lora_adapters_seen": float(len(set().union(*(_adapter_names(labels) for labels in current)))),
            }

    def get(self, target: TargetKey) -> dict[SignalName, float | None]:
        """The three LoRA signals for ``target``'s place, {} without the gauge."""
        return dict(self._by_place.get((target.namespace, target.pod, target.instance, target.job), {}))


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _lora_rows(samples: Iterable[SampleLike], end: float, window_seconds: float) -> list[tuple[dict[str, str], float]]:
    """Each ``vllm:lora_requests_info`` label set (any spelling) with its newest value in ``[end - window, end]``."""
    newest: dict[_SeriesId, tuple[dict[str, str], float]] = {}
    for s in samples:
        m = match_name(s.name)
        if m is None or m.canonical != LORA_INFO or m.suffix == "_created" or s.timestamp is None:
            continue
        if not end - window_seconds <= s.timestamp <= end:
            continue
        labels = {k: v for k, v in s.labels.items() if k != "__name__"}
        ident = tuple(sorted(labels.items()))
        if ident not in newest or newest[ident][1] < s.value:
            newest[ident] = (labels, float(s.value))
    return list(newest.values())


class CacheConfigIndex:
    """``cache_config_info`` label sets indexed by where they come from (namespace, pod, instance, job).

    The info series has no ``model_name``; a target takes the first set from its place whose
    ``engine`` matches (or has none). Lookups are O(1) per target, so 1,000 targets stay cheap.
    """

    def __init__(self, label_sets: Iterable[Mapping[str, str]]):
        self._by_place: dict[tuple[str, ...], list[Mapping[str, str]]] = defaultdict(list)
        for labels in label_sets:
            self._by_place[tuple(labels.get(k, "") for k in ("namespace", "pod", "instance", "job"))].append(labels)

    def get(self, target: TargetKey) -> dict[str, str]:
        """The labels for ``target`` without the bookkeeping ones (target labels, ``__name__``), or {}."""
        for labels in self._by_place.get((target.namespace, target.pod, target.instance, target.job), ()):
            if target.matches(labels):
                return {k: v for k, v in labels.items() if k not in TARGET_LABELS and k != "__name__"}
        return {}


def compute_signals(  # noqa: C901
    samples: Iterable[SampleLike],
    window_seconds: float,
    end: float | None = None,
    fit: bool = False,
) -> dict[TargetKey, Signals]:
    """Signals per target from timestamped samples (a recording, or repeated scrapes).

    Args:
        samples: objects with ``name``, ``labels`` (mapping), ``value`` (float) and ``timestamp``
            (Unix seconds) - :class:`kvpilot.metrics.exposition.Sample`. Samples without a
            timestamp are ignored; names are matched through the catalog in any spelling.
        window_seconds: the window (seconds), the ``[w]`` of every range function.
        end: evaluation time (Unix seconds); default the newest sample's timestamp.
        fit: also evaluate :data:`FIT_SIGNAL_DEFS` into ``Signals.fit`` / ``Signals.fit_buckets``.

    Returns:
        ``{TargetKey: Signals}`` for every target with at least one vLLM series; ``{}`` when none.

    Raises:
        ValueError: ``window_seconds`` not positive.

    Source: each function as Prometheus 2.42 evaluates it (see :mod:`kvpilot.diagnose.promql`).
    """
    if not window_seconds or window_seconds <= 0:
        raise ValueError(f"window: must be positive seconds, got {window_seconds!r}")
    samples = list(samples)
    if end is None:
        stamps = [s.timestamp for s in samples if s.timestamp is not None]
        if not stamps:
            return {}
        end = max(stamps)
    index = _index(samples)
    configs = CacheConfigIndex(_cache_config(samples))
    operator = _operator_limits(samples, end, window_seconds)
    lora = LoraIndex(_lora_rows(samples, end, window_seconds), window_seconds)
    out: dict[TargetKey, Signals] = {}
    for target, families in index.items():
        values: dict[SignalName, float | None] = {}
        buckets: dict[HistogramName, list[tuple[float, float]]] = {}
        spelling: dict[str, str] = {}
        for sd in SIGNAL_DEFS:
            result, used = _evaluate_def(sd, families, end, window_seconds)
            if used:
                spelling.setdefault(sd.family, used)
            if is_histogram_name(sd.name):
                if isinstance(result, list) and result:
                    buckets[sd.name] = result
            elif is_signal_name(sd.name) and not isinstance(result, list):
                values[sd.name] = result
        if not any(v is not None for v in values.values()) and not buckets:
            continue  # only info series or series outside the window
        sub = window_seconds / SUBWINDOWS
        per_sub: list[list[float | None]] = [
            [_scalar(_evaluate_def(sd, families, end - (SUBWINDOWS - 1 - j) * sub, sub)[0]) for j in range(SUBWINDOWS)]
            for sd in SUBWINDOW_DEFS
        ]
        values.update(lora.get(target))
        fit_values: dict[FitName, float | None] = {}
        fit_buckets: dict[FitName, list[tuple[float, float]]] = {}
        for sd in FIT_SIGNAL_DEFS if fit else ():
            result = _evaluate_def(sd, families, end, window_seconds)[0]
            if not is_fit_name(sd.name):
                continue
            if isinstance(result, list):
                if result:
                    fit_buckets[sd.name] = result
            else:
                fit_values[sd.name] = finite(result)
        step = window_seconds / FIT_STEPS
        fit_series: dict[FitName, list[float | None]] = {
            sd.name: [
                _scalar(_evaluate_def(sd, families, end - window_seconds + j * step, step)[0])
                for j in range(FIT_STEPS + 1)
            ]
            for sd in (FIT_SERIES if fit else ())
            if is_fit_name(sd.name)
        }
        signals = Signals(
            fit=fit_values,
            fit_buckets=fit_buckets,
            fit_series=fit_series,
            values=values,
            buckets=buckets,
            spelling=spelling,
            cache_config=configs.get(target),
            operator_limits=operator.get(target),
            step_points=subwindow_points(*per_sub),
            window_seconds=window_seconds,
            end=end,
        )
        out[target] = finish_signals(signals)
    return out


def _scalar(value: object) -> float | None:
    """A scalar signal's value (``_evaluate_def`` of a non-bucket signal), None for anything else."""
    return float(value) if isinstance(value, (int, float)) else None


def _evaluate_def(
    sd: SignalDef, families: _Families, end: float, window: float
) -> tuple[list[tuple[float, float]] | float | None, str | None]:
    """Evaluate ``sd`` on the first spelling that yields a result; returns (result, spelling used).

    The result is ``[(le, count)]`` (ascending ``le``) for the ``buckets`` function, else a value or None.
    """
    for spelling in spellings(sd.family):
        series = families.get((spelling, sd.suffix))
        if not series:
            continue
        per_series: list[tuple[dict[str, str], float]] = []
        for s in series.values():
            if any(s.labels.get(k) != v for k, v in sd.match):
                continue
            value = evaluate(sd.fn, sorted(s.points.items()), end, window)
            if value is not None:
                per_series.append((s.labels, value))
        if not per_series:
            continue
        if sd.fn == "buckets":
            by_le: dict[float, list[float]] = defaultdict(list)
            for labels, value in per_series:
                try:
                    by_le[promql.parse_le(labels.get("le", ""))].append(value)
                except ValueError:
                    continue
            return sorted((le, sum(vs)) for le, vs in by_le.items()), spelling  # as aggregate(vs, "sum"): vs not empty
        return aggregate((v for _, v in per_series), sd.agg), spelling
    return None, None


def finish_signals(signals: Signals) -> Signals:
    """Derived signals shared by every source; NaN/Inf become ``None``.

    Adds (when the inputs are known):

    - ``prefix_hit_rate`` = hits increase / queries increase (0-1; ``None`` without queries).
      Units cancel, so it is right for block-counting (< 0.9) and token-counting vLLM alike.
    - ``prompt_tokens_per_request`` = prompt tok/s / finished req/s.
    - ``offered_prompt_tokens_per_s`` = served prompt tok/s + waiting growth (req/s) x prompt
      tokens per request: the load arriving, not only the load served (case C12).
    - quantiles of :data:`QUANTILES` via Prometheus's ``histogram_quantile`` with their bucket.
    - ``tokens_per_step_avg`` = increase of ``iteration_tokens_total_sum`` / of its ``_count``.
    - ``itl_mean_s`` = increase of ``inter_token_latency_seconds_sum`` / of its ``_count`` (seconds per
      decode step); ``prefill_time_mean_s`` the same for ``request_prefill_time_seconds`` (seconds from a
      request's first scheduling to its first token); ``prefill_step_times`` = their ratio (how many step
      times a prefill spans); ``queue_time_mean_s`` the same for ``request_queue_time_seconds`` (seconds
      from arrival to first scheduling, ``vllm/v1/metrics/stats.py``) and ``queue_step_times`` its ratio to
      the step time (how many steps a request waited).
    - ``step_subwindows`` and ``step_time_elasticity``: :func:`kvpilot.diagnose.steptime.fit_step_time`
      over ``step_points``.
    - ``last_sample_age_s`` = end - last sample time.
    """
    v = signals.values
    for name, value in list(v.items()):
        v[name] = finite(value)
    v.setdefault("lora_max_loras", None)
    v.setdefault("lora_adapters_max", None)
    v.setdefault("lora_adapters_seen", None)
    # impossible values are unknowns, not evidence: vLLM's KV gauge is a fraction 0-1 (a percent-scaled
    # gauge of another exporter matched by vllm_... would read 45 as "45x full"), request counts are >= 0
    for name, value in list(v.items()):
        if value is None:
            continue
        family = name.rsplit("_", 1)[0]
        if family == "kv_usage" and not -KV_USAGE_SLACK <= value <= 1 + KV_USAGE_SLACK:
            signals.rejected.setdefault(family, f"{significant(value, 6)} is outside 0-1")
            v[name] = None
        elif family in ("running", "waiting") and name != "waiting_trend_per_s" and value < 0:
            signals.rejected.setdefault(family, f"{significant(value, 6)} is negative")
            v[name] = None
        elif family in ("running", "waiting") and name != "waiting_trend_per_s" and value > MAX_REQUEST_GAUGE:
            signals.rejected.setdefault(family, f"{significant(value, 6)} is more requests than any server holds")
            v[name] = None
    queries, hits = v.get("prefix_queries_increase"), v.get("prefix_hits_increase")
    v["prefix_hit_rate"] = (hits / queries) if queries and hits is not None and queries > 0 else None
    prompt, finished = v.get("prompt_tokens_per_s"), v.get("requests_finished_per_s")
    per_request = prompt / finished if prompt is not None and finished else None
    v["prompt_tokens_per_request"] = per_request
    trend = v.get("waiting_trend_per_s")
    v["offered_prompt_tokens_per_s"] = (
        prompt + max(0.0, trend) * per_request
        if prompt is not None and per_request is not None and trend is not None
        else None
    )
    tokens, steps = v.get("iteration_tokens_sum_increase"), v.get("iteration_steps_increase")
    v["tokens_per_step_avg"] = tokens / steps if tokens is not None and steps else None
    itl_sum, itl_count = v.get("itl_sum_increase"), v.get("itl_count_increase")
    v["itl_mean_s"] = itl_sum / itl_count if itl_sum is not None and itl_count else None
    pre_sum, pre_count = v.get("prefill_time_sum_increase"), v.get("prefill_time_count_increase")
    v["prefill_time_mean_s"] = pre_sum / pre_count if pre_sum is not None and pre_count else None
    itl_mean, pre_mean = v["itl_mean_s"], v["prefill_time_mean_s"]
    v["prefill_step_times"] = pre_mean / itl_mean if pre_mean is not None and itl_mean else None
    queue_sum, queue_count = v.get("queue_time_sum_increase"), v.get("queue_time_count_increase")
    queue_mean = v["queue_time_mean_s"] = queue_sum / queue_count if queue_sum is not None and queue_count else None
    v["queue_step_times"] = queue_mean / itl_mean if queue_mean is not None and itl_mean else None
    fit = fit_step_time(signals.step_points)
    v["step_subwindows"] = float(len(signals.step_points))
    v["step_time_elasticity"] = fit.elasticity
    v["prefix_reused_share"], v["prefix_reused_tokens"] = prefix_reuse(
        signals.buckets.get("prompt_tokens", []), signals.buckets.get("computed_tokens", [])
    )
    last = v.get("last_sample_time")
    v["last_sample_age_s"] = max(0.0, signals.end - last) if last is not None else None
    for name, (hist, q) in QUANTILES.items():
        quantile = promql.histogram_quantile(q, signals.buckets.get(hist, []))
        if quantile is not None and finite(quantile.value) is not None:
            signals.quantiles[name] = quantile
            v[name] = quantile.value
        else:
            v[name] = None
    return signals


#: the least share of requests whose reuse :func:`prefix_reuse` reports: one request in twenty, so a single
#: request's hit in a window of many is not taken for a prefix the traffic shares
REUSED_SHARE_MIN = 0.05


def _cdf(buckets: Sequence[tuple[float, float]]) -> dict[float, float] | None:
    """``{upper bound: share of observations <= it}`` of one histogram's bucket increases, None without any."""
    merged = promql.merged_buckets(buckets)
    if merged is None:
        return None
    return {b: min(1.0, n / merged[math.inf]) for b, n in merged.items()}


def prefix_reuse(
    prompt: Sequence[tuple[float, float]], computed: Sequence[tuple[float, float]]
) -> tuple[float | None, float | None]:
    """Per-request reuse from vLLM's per-request histograms: ``(share, tokens)``, "at least ``share`` of the
    requests found at least ``tokens`` prompt tokens each in the prefix cache".

    ``vllm:request_prompt_tokens`` observes each finished request's prompt, ``vllm:request_prefill_kv_computed_tokens``
    its prompt less the tokens found cached (``PrometheusStatLogger.record``, ``vllm/v1/metrics/loggers.py``, vLLM
    0.29). The two are not paired per request, but for bucket bounds ``e1 < e2`` at least ``F_computed(e1) -
    F_prompt(e2)`` of the requests had a prompt above ``e2`` and computed at most ``e1`` (the two shares overlap by
    at least that much), so each of them reused at least ``e2 - e1`` tokens. Of the pairs with a share of at least
    :data:`REUSED_SHARE_MIN`, the one with the largest ``e2 - e1`` is returned (a lower bound of the longest prefix
    that many requests reused). ``(None, None)`` when either histogram is missing or no pair qualifies (reuse
    within one bucket's width, or none).
    """
    p_cdf, c_cdf = _cdf(prompt), _cdf(computed)
    if p_cdf is None or c_cdf is None:
        return None, None
    best: tuple[float, float] | None = None
    for e1, c in c_cdf.items():
        for e2, p in p_cdf.items():
            if math.isinf(e1) or math.isinf(e2) or e2 <= e1:
                continue
            share = c - p
            if share >= REUSED_SHARE_MIN and (best is None or e2 - e1 > best[1]):
                best = (share, e2 - e1)
    return best if best is not None else (None, None)


def legacy_or_escaped(signals: Signals) -> dict[str, str]:
    """Families this target exposed only under a legacy or escaped name: canonical -> name used.

    Feeds the ``metrics_schema_mismatch`` finding (dashboards and alert rules written for one
    spelling see nothing; case C19).
    """
    out = {}
    for family, used in signals.spelling.items():
        if used != family and family in BY_NAME:
            out[family] = used
    return out
