"""``--prometheus URL``: the signals of every target from PromQL, one query per signal (read-only).

Each :class:`~kvpilot.diagnose.signals.SignalDef` becomes ONE instant query evaluated at an
explicit ``time`` (the window's end) for all targets at once::

    label_replace(max by (namespace, pod, instance, job, model_name, engine)
                  (avg_over_time({__name__="vllm:kv_cache_usage_perc"}[300s])), "kvpilot_name", ...)
    or ignoring(kvpilot_name)
    label_replace(max by (...) (avg_over_time({__name__="vllm_kv_cache_usage_perc"}[300s])), ...)
    or ignoring(kvpilot_name) ... legacy vllm:gpu_cache_usage_perc, vllm_gpu_cache_usage_perc

Why arms joined by ``or`` instead of one ``{__name__=~"vllm[:_](kv_cache_usage_perc|gpu_cache_usage_perc)"}``:
a function such as ``avg_over_time`` drops the metric name, and Prometheus 2.x refuses a result
with two series of the same label set ("vector cannot contain metrics with the same labelset"),
which is exactly what a v0.10 server exposing both generations produces. ``or`` keeps the first
spelling that has data per target (the preference order of
:func:`kvpilot.diagnose.signals.spellings`), and ``kvpilot_name`` tells which one supplied it.
Two kinds of signal are asked differently, for what they cost the server at 10,000 targets
(benchmarks/diagnose_scale.py, docs/performance.md): a histogram's buckets (14-23 series a target)
as one :func:`bucket_query` per spelling, without ``label_replace`` and ``or`` around them (the
spelling a target's buckets come from is chosen per target from the answers); the step-time
sub-windows (:func:`subwindow_query`, one per ``SUBWINDOW_DEFS``) as one range query each
(``/api/v1/query_range``, one step per sub-window) instead of one instant query with an
``offset`` arm per sub-window. More queries read ``vllm:cache_config_info``, ``vllm:lora_requests_info``
and the kvpilot operator's limits metric ``kvpilot_vllmserver_limit`` (:func:`operator_limit_query`, joined on
namespace and pod), so the number of queries is fixed (:func:`plan`),
whatever the number of targets.

Only ``/api/v1/query`` and ``/api/v1/query_range`` are called (GET, with an explicit ``time``, or
``start``/``end``/``step``), each as one bounded
request (:mod:`kvpilot.diagnose.sources.http`) whose answer is decoded while it streams in
(:mod:`kvpilot.diagnose.sources.vector`) into one small tuple per row, by one decoder per answer shape
(:mod:`kvpilot.diagnose.sources.rows`): prometheus-api-client's
``custom_query`` decodes a whole answer into dicts, several times the answer's size in memory
(benchmarks/diagnose_scale.py, docs/performance.md, "diagnose at scale").

Bounds per answer: a signal query holds one row per target, at most :data:`MAX_PROMETHEUS_ROWS`
(50,000 targets) and :data:`MAX_PROMETHEUS_BYTES`; a bucket query one row per target and bucket, so its
bounds are :data:`MAX_HISTOGRAM_BUCKETS` times larger, for the same 50,000 targets; a sub-window
range query one row per target with :data:`~kvpilot.diagnose.steptime.SUBWINDOWS` values, so its byte
bound is that many times larger.
"""

from __future__ import annotations

import gc
import json
import math
import re
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

import requests

from kvpilot.diagnose import promql
from kvpilot.diagnose.signals import (
    FIT_SERIES,
    FIT_SIGNAL_DEFS,
    FIT_STEPS,
    LORA_INFO,
    OPERATOR_LIMIT_METRIC,
    SIGNAL_DEFS,
    SUBWINDOW_DEFS,
    TARGET_LABELS,
    CacheConfigIndex,
    FitName,
    LoraIndex,
    OperatorLimitIndex,
    SignalDef,
    Signals,
    TargetKey,
    finish_signals,
    is_fit_name,
    is_histogram_name,
    is_signal_name,
    spellings,
)
from kvpilot.diagnose.sources import SourceError, request_failure_reason
from kvpilot.diagnose.sources.http import (
    MAX_PROMETHEUS_BYTES,
    display_url,
    fetch,
    split_credentials,
)
from kvpilot.diagnose.sources.rows import (
    NAME_LABEL,
    BucketRow,
    BucketRows,
    Ident,
    Interned,
    LabelRow,
    LabelRows,
    R,
    Rows,
    SignalRow,
    SignalRows,
    StepRow,
    StepRows,
    sample_value,
)
from kvpilot.diagnose.sources.vector import UnreadableAnswerError, VectorReader
from kvpilot.diagnose.steptime import SUBWINDOWS, subwindow_points

_FUNCTIONS = {
    "avg": "avg_over_time",
    "max": "max_over_time",
    "min": "min_over_time",
    "median": "quantile_over_time",
    "last": "last_over_time",
    "count": "count_over_time",
    "deriv": "deriv",
    "rate": "rate",
    "increase": "increase",
    "buckets": "increase",
}
_LABEL_KINDS = ("labels", "lora", "limit")  # the info queries, read for their labels
T = TypeVar("T")


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class Selectors:
    """Label filters applied to every query (empty = all targets).

    ``pod_regex`` is a PromQL regex for the pod label (``--server`` without a cluster: ``NAME(-.*)?``).
    """

    namespace: str = ""
    pod: str = ""
    pod_regex: str = ""
    model_name: str = ""

    def matchers(self) -> list[str]:
        """PromQL label matchers, e.g. ``['namespace="llm"', 'pod=~"qwen(-.*)?"']``."""
        out = []
        if self.namespace:
            out.append(f"namespace={_quote(self.namespace)}")
        if self.pod:
            out.append(f"pod={_quote(self.pod)}")
        elif self.pod_regex:
            out.append(f"pod=~{_quote(self.pod_regex)}")
        if self.model_name:
            out.append(f"model_name={_quote(self.model_name)}")
        return out


def _selector(name: str, matchers: list[str]) -> str:
    return "{" + ", ".join([f"__name__={_quote(name)}", *matchers]) + "}"


def signal_query(sd: SignalDef, window_seconds: float, selectors: Selectors = Selectors()) -> str:
    """The one PromQL query of signal ``sd`` for all targets (see the module docstring).

    A histogram signal (``fn="buckets"``) is not sent this way but as one :func:`bucket_query` per
    spelling (see :func:`plan`); this form of it, one row per target and ``le``, is the same rows.
    """
    by = ", ".join(TARGET_LABELS + (("le",) if sd.fn == "buckets" else ()))
    agg = "sum" if sd.agg == "sum" or sd.fn == "buckets" else "max"
    matchers = selectors.matchers() + [f"{k}={_quote(v)}" for k, v in sd.match]
    window = f"[{promql.duration(window_seconds)}]"
    arms = []
    for spelling in spellings(sd.family):
        sel = _selector(spelling + sd.suffix, matchers)
        if sd.fn == "timestamp":
            inner = f"timestamp({sel})"
        elif sd.fn == "median":
            inner = f"quantile_over_time(0.5, {sel}{window})"
        elif sd.fn == "first":  # the value at the window's start (5 m lookback), as signals.evaluate reads it
            inner = f"{sel} offset {promql.duration(window_seconds)}"
        elif sd.fn == "value":  # the last sample (5 m lookback): a range query's steps read it at each instant
            inner = sel
        else:
            inner = f"{_FUNCTIONS[sd.fn]}({sel}{window})"
        arms.append(f'label_replace({agg} by ({by}) ({inner}), "{NAME_LABEL}", "{spelling}", "__name__", ".*")')
    return f" or ignoring({NAME_LABEL}) ".join(arms)


def bucket_query(sd: SignalDef, spelling: str, window_seconds: float, selectors: Selectors = Selectors()) -> str:
    """Histogram ``sd``'s bucket increases under one exposed ``spelling``: one row per target and ``le``.

    ``sum by (namespace, pod, instance, job, model_name, engine, le) (increase(NAME_bucket[w]))``, with
    no ``label_replace`` and no ``or``: the spelling is the query's own, and which spelling a target's
    buckets come from is chosen per target from the answers (the first of :func:`spellings` with rows,
    as :func:`kvpilot.diagnose.signals.compute_signals` does). Wrapping 230,000 bucket rows (10,000
    targets) in ``label_replace(...) or ignoring(kvpilot_name) ...`` doubled Prometheus' work for them
    (docs/performance.md).
    """
    by = ", ".join((*TARGET_LABELS, "le"))
    matchers = selectors.matchers() + [f"{k}={_quote(v)}" for k, v in sd.match]
    sel = _selector(spelling + sd.suffix, matchers)
    return f"sum by ({by}) (increase({sel}[{promql.duration(window_seconds)}]))"


def subwindow_query(sd: SignalDef, window_seconds: float, selectors: Selectors = Selectors()) -> str:
    """Signal ``sd`` over one sub-window (``window / SUBWINDOWS``): the expression of a range query whose
    :data:`~kvpilot.diagnose.steptime.SUBWINDOWS` steps end where the recording path's sub-windows end
    (:meth:`PlannedQuery.params`).

    One range query evaluates the expression at each step over one selection of the series; one
    instant query with an arm per sub-window (``[w/K] offset``) selected them K times, 8x the server's
    time (docs/performance.md). The values are the same: a range query evaluates at ``start + k x step``
    exactly as an instant query at that time (https://prometheus.io/docs/prometheus/latest/querying/api/
    #range-queries).
    """
    return signal_query(sd, window_seconds / SUBWINDOWS, selectors)


def cache_config_query(window_seconds: float, selectors: Selectors = Selectors()) -> str:
    """The ``vllm:cache_config_info`` labels of every target (any spelling), last value in the window."""
    window = f"[{int(round(window_seconds))}s]"
    matchers = [m for m in selectors.matchers() if not m.startswith("model_name")]  # info has no model_name
    arms = [f"last_over_time({_selector(s, matchers)}{window})" for s in spellings("vllm:cache_config_info")]
    return " or ".join(arms)


def lora_query(window_seconds: float, selectors: Selectors = Selectors()) -> str:
    """``vllm:lora_requests_info``'s label sets of every target (any spelling), each with its newest value in the
    window (the server's time when the set was last current: :class:`~kvpilot.diagnose.signals.LoraIndex`).
    """
    window = f"[{int(round(window_seconds))}s]"
    matchers = [m for m in selectors.matchers() if not m.startswith("model_name")]  # the gauge has none
    return " or ".join(f"max_over_time({_selector(s, matchers)}{window})" for s in spellings(LORA_INFO))


def operator_limit_query(window_seconds: float, selectors: Selectors = Selectors()) -> str:
    """The kvpilot operator's ``kvpilot_vllmserver_limit`` of every vLLM pod, last value in the window.

    ``max by (namespace, pod, limit)``: two operator replicas (HA) export the same gauge; the labels name
    the vLLM pod (kvpilot.controller.metrics; a scrape without ``honor_labels`` renames them
    ``exported_*`` and the join finds nothing, as the alert rules' does).
    """
    window = f"[{int(round(window_seconds))}s]"
    matchers = [m for m in selectors.matchers() if not m.startswith("model_name")]  # the gauge has none
    return f"max by (namespace, pod, limit) (last_over_time({_selector(OPERATOR_LIMIT_METRIC, matchers)}{window}))"


@dataclass
class FitRows:
    """One target's answers to :func:`fit_plan`: ``values`` / ``buckets`` / ``series`` as ``Signals.fit`` /
    ``fit_buckets`` / ``fit_series`` hold them.
    """

    values: dict[FitName, float | None] = field(default_factory=dict)
    buckets: dict[FitName, list[tuple[float, float]]] = field(default_factory=dict)
    series: dict[FitName, list[float | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class PlannedQuery:
    """One HTTP query of a run: the expression, the endpoint and how its rows are read.

    Attributes:
        promql: the expression.
        kind: ``signal`` (one row per target), ``buckets`` (one per target and ``le``), ``sub`` (a
            range query: one row per target with a value per sub-window), ``labels``
            (``cache_config_info``), ``lora`` (``lora_requests_info``), ``limit`` (the operator's limits).
        sd: the signal read (``signal``, ``buckets``, ``sub``), else None.
        spelling: for ``buckets``, the exposed family selected.
        step_seconds: for ``sub``, the sub-window (the range query's step); 0 for an instant query.
        points: for ``sub``, the range query's points, ending at the window's end.
    """

    promql: str
    kind: str
    sd: SignalDef | None = None
    spelling: str = ""
    step_seconds: float = 0.0
    points: int = SUBWINDOWS

    @property
    def path(self) -> str:
        """``/api/v1/query_range`` for a range query, else ``/api/v1/query``."""
        return "/api/v1/query_range" if self.step_seconds else "/api/v1/query"

    def start(self, end: float) -> float:
        """The range query's first evaluation time (Unix seconds): ``end - (points - 1) x step``."""
        return end - (self.points - 1) * self.step_seconds

    def params(self, end: float) -> dict[str, str]:
        """The GET parameters for a window ending at ``end`` (Unix seconds).

        A range query carries ``nocache=1``: with its cache on, VictoriaMetrics rounds ``start`` and
        ``end`` to a multiple of ``step`` for queries of 50 points or more (``AdjustStartEnd``,
        ``app/vmselect/promql/eval.go``), which would move the sub-windows off the window; ours have 5
        points, so the parameter only keeps it so. Prometheus, Thanos and Mimir ignore it.
        """
        if not self.step_seconds:
            return {"query": self.promql, "time": f"{end:.3f}"}
        return {
            "query": self.promql,
            "start": f"{self.start(end):.3f}",
            "end": f"{end:.3f}",
            "step": promql.duration(self.step_seconds),
            "nocache": "1",
        }

    @property
    def text(self) -> str:
        """The query as the report lists it (a range query says so in a PromQL comment)."""
        if not self.step_seconds:
            return self.promql
        step = promql.duration(self.step_seconds)
        return f"{self.promql}  # range query: {self.points} steps of {step} ending at the window's end"


def _instant_queries(defs: tuple[SignalDef, ...], window_seconds: float, selectors: Selectors) -> list[PlannedQuery]:
    """One :func:`signal_query` per scalar of ``defs``, then one :func:`bucket_query` per histogram and spelling."""
    out = [PlannedQuery(signal_query(sd, window_seconds, selectors), "signal", sd) for sd in defs if sd.fn != "buckets"]
    out += [
        PlannedQuery(bucket_query(sd, spelling, window_seconds, selectors), "buckets", sd, spelling)
        for sd in defs
        if sd.fn == "buckets"
        for spelling in spellings(sd.family)
    ]
    return out


def plan(window_seconds: float, selectors: Selectors = Selectors()) -> list[PlannedQuery]:
    """Every query one :meth:`PrometheusSource.fetch` sends, in the order its answers are read: the
    signals, each histogram's :func:`bucket_query` per spelling, the sub-window range queries,
    ``cache_config_info``, ``lora_requests_info``, the operator's limits. Their number does not depend on the
    targets.
    """
    out = _instant_queries(SIGNAL_DEFS, window_seconds, selectors)
    sub = window_seconds / SUBWINDOWS
    out += [
        PlannedQuery(subwindow_query(sd, window_seconds, selectors), "sub", sd, step_seconds=sub)
        for sd in SUBWINDOW_DEFS
    ]
    out.append(PlannedQuery(cache_config_query(window_seconds, selectors), "labels"))
    out.append(PlannedQuery(lora_query(window_seconds, selectors), "lora"))
    out.append(PlannedQuery(operator_limit_query(window_seconds, selectors), "limit"))
    return out


#: the subquery steps of :func:`coverage_query` in a window, at most (and none shorter than 1 s)
COVERAGE_STEPS = 300


def coverage_query(window_seconds: float, selectors: Selectors = Selectors()) -> str:
    """Where each target's data lies in the window: its first sample of ``vllm:num_requests_running`` (any
    spelling; every vLLM exposes it at every scrape), their number and the last one's time, one row each,
    ``kvpilot_name`` saying which (``first``, ``count``, ``last``).

    The first sample's time is ``min_over_time(timestamp(running)[w:step])``: ``timestamp()`` of a selector is the
    sample's own time, and a subquery step between a series' first and second sample sees the first; a step at
    the window's start sees a sample before it (5 m lookback), so data that covers the window reads earlier than
    its start. Steps of ``w / COVERAGE_STEPS``, at least 1 s: a sample found one step late makes the span read
    shorter, still inside the data. Prometheus and VictoriaMetrics answer it alike (tests/integration/diagnose).
    """
    by = ", ".join(TARGET_LABELS)
    window = promql.duration(window_seconds)
    step = promql.duration(max(1.0, math.ceil(window_seconds / COVERAGE_STEPS)))
    arms = []
    family = next(sd.family for sd in SIGNAL_DEFS if sd.name == "samples_in_window")  # the samples it counts
    for spelling in spellings(family):
        sel = _selector(spelling, selectors.matchers())
        for name, expr in (
            ("first", f"min by ({by}) (min_over_time(timestamp({sel})[{window}:{step}]))"),
            ("count", f"max by ({by}) (count_over_time({sel}[{window}]))"),
            ("last", f"max by ({by}) (timestamp({sel}))"),
        ):
            arms.append(f'label_replace({expr}, "{NAME_LABEL}", "{name}", "", "")')
    # a plain ``or``: rows of one quantity under two spellings share their labels (the first spelling's is kept),
    # rows of two quantities differ in kvpilot_name (both kept)
    return " or ".join(arms)


def fit_plan(window_seconds: float, selectors: Selectors = Selectors()) -> list[PlannedQuery]:
    """The queries of :meth:`PrometheusSource.fetch_fit`: one per scalar of
    :data:`~kvpilot.diagnose.signals.FIT_SIGNAL_DEFS`, one per histogram and spelling, as :func:`plan` sends them.
    """
    out = _instant_queries(FIT_SIGNAL_DEFS, window_seconds, selectors)
    step = window_seconds / FIT_STEPS
    out += [
        PlannedQuery(signal_query(sd, window_seconds, selectors), "sub", sd, step_seconds=step, points=FIT_STEPS + 1)
        for sd in FIT_SERIES
    ]
    return out


def _fit_name(query: PlannedQuery) -> FitName:
    """The fit signal ``query`` reads (:func:`fit_plan` gives every query one)."""
    if query.sd is None or not is_fit_name(query.sd.name):
        raise RuntimeError(f"fit query {query.promql!r} reads no signal of the fit")
    return query.sd.name


def _add_fit_values(out: dict[TargetKey, FitRows], name: FitName, rows: list[SignalRow]) -> None:
    """A fit signal's value per target into ``out`` (not finite: None)."""
    for ident, _name, value in rows:
        out.setdefault(TargetKey(*ident), FitRows()).values[name] = value if math.isfinite(value) else None


def _add_fit_series(out: dict[TargetKey, FitRows], name: FitName, points: int, rows: list[StepRow]) -> None:
    """A fit series' ``points`` values per target into ``out`` (a point with no finite value: None)."""
    for ident, j, value in rows:
        series = out.setdefault(TargetKey(*ident), FitRows()).series
        values = series.setdefault(name, [None] * points)
        if 0 <= j < points and math.isfinite(value):
            values[j] = value


def _add_fit_buckets(out: dict[TargetKey, FitRows], name: FitName, rows: list[BucketRow]) -> None:
    """A fit histogram's buckets per target into ``out``, for the targets no earlier spelling gave them."""
    fresh: dict[TargetKey, list[tuple[float, float]]] = {}
    for ident, bound, value in rows:
        key = TargetKey(*ident)
        if bound is not None and name not in out.get(key, FitRows()).buckets:
            fresh.setdefault(key, []).append((bound, value))
    for key, rows_ in fresh.items():  # a spelling earlier in the preference order wins
        out.setdefault(key, FitRows()).buckets[name] = sorted(rows_)


def _signal_of(query: PlannedQuery) -> SignalDef:
    """The signal a signal, bucket or sub-window query reads (:func:`plan` gives each one)."""
    if query.sd is None:
        raise RuntimeError(f"query {query.promql!r} reads no signal")
    return query.sd


def _result(future: Future[list[R]], errors: list[SourceError]) -> list[R]:
    """A query's rows, or none when it failed (its error added to ``errors``)."""
    try:
        return future.result()
    except SourceError as exc:
        errors.append(exc)
        return []


def _drain(pending: list[T]) -> Iterator[T]:
    """``pending``'s items in order, each dropped from it once taken (an answer's rows are freed once read)."""
    pending.reverse()
    while pending:
        yield pending.pop()


@dataclass
class _PlanAnswers:
    """The answers of :func:`plan`'s queries as they arrive, by shape, each list in the plan's order."""

    queries: list[PlannedQuery]
    signals: list[tuple[SignalDef, Future[list[SignalRow]]]]
    buckets: list[tuple[SignalDef, str, Future[list[BucketRow]]]]
    steps: list[tuple[SignalDef, Future[list[StepRow]]]]
    labels: dict[str, Future[list[LabelRow]]]  # by kind: labels, lora, limit

    @property
    def count(self) -> int:
        """The number of queries."""
        return len(self.queries)


class _TargetSignals:
    """Signals per target, built from :func:`plan`'s answers read in its order (signals, buckets, sub-windows).

    A target appears with its first signal or bucket row; sub-window and info rows only add to targets found.
    """

    def __init__(self, window_seconds: float, end: float) -> None:
        self.window_seconds, self.end = window_seconds, end
        self.per_target: dict[TargetKey, Signals] = {}
        self._keys: dict[Ident, TargetKey] = {}
        self._defs = [sd for sd in SIGNAL_DEFS if sd.fn != "buckets"]
        # histogram name -> target -> its buckets from the first spelling (in preference order) that has any
        self._buckets: dict[str, dict[TargetKey, list[tuple[float, float]]]] = {}

    def key_of(self, ident: Ident) -> TargetKey:
        """The target of a label tuple (one :class:`TargetKey` per tuple)."""
        key = self._keys.get(ident)
        if key is None:
            key = self._keys[ident] = TargetKey(*ident)
        return key

    def signals_for(self, key: TargetKey) -> Signals:
        """``key``'s signals, every scalar unknown until its answer is read."""
        if key not in self.per_target:
            self.per_target[key] = Signals(
                values={sd.name: None for sd in self._defs if is_signal_name(sd.name)},
                window_seconds=self.window_seconds,
                end=self.end,
            )
        return self.per_target[key]

    def add_values(self, sd: SignalDef, rows: list[SignalRow]) -> None:
        """A signal query's value per target, and the spelling that supplied it."""
        per_target = self.per_target
        for ident, name, value in rows:
            key = self.key_of(ident)
            sig = per_target.get(key) or self.signals_for(key)
            if name:
                sig.spelling.setdefault(sd.family, name)
            if is_signal_name(sd.name):
                sig.values[sd.name] = value

    def add_buckets(self, sd: SignalDef, spelling: str, rows: list[BucketRow]) -> None:
        """A bucket query's buckets per target, for the targets no earlier spelling gave them."""
        found = self._buckets.setdefault(sd.name, {})
        fresh: dict[TargetKey, list[tuple[float, float]]] = {}
        for ident, bound, value in rows:
            key = self.key_of(ident)
            if key in found:
                continue  # a spelling earlier in the preference order has this target's buckets
            self.signals_for(key).spelling.setdefault(sd.family, spelling)
            if bound is not None:
                fresh.setdefault(key, []).append((bound, value))
        found.update(fresh)

    def add_steps(self, grids: list[list[StepRow]]) -> None:
        """The sub-window range queries' rows (one list per :data:`SUBWINDOW_DEFS`) as each target's step points."""
        per_sub: dict[TargetKey, list[list[float | None]]] = {}
        for n, rows in enumerate(grids):
            for ident, j, value in rows:
                if 0 <= j < SUBWINDOWS:
                    grid = per_sub.setdefault(self.key_of(ident), [[None] * SUBWINDOWS for _ in grids])
                    grid[n][j] = value
        for key, grid in per_sub.items():
            if key in self.per_target:
                self.per_target[key].step_points = subwindow_points(*grid)

    def finish(
        self, configs: CacheConfigIndex, lora: LoraIndex, operator: OperatorLimitIndex
    ) -> dict[TargetKey, Signals]:
        """Each target's signals with its buckets, cache config, LoRA and operator limits, finished."""
        for name, by_target in self._buckets.items():
            for key, rows in by_target.items():
                if is_histogram_name(name):
                    self.per_target[key].buckets[name] = sorted(rows)
        out: dict[TargetKey, Signals] = {}
        for key, sig in self.per_target.items():
            sig.cache_config = configs.get(key)
            sig.operator_limits = operator.get(key)
            sig.values.update(lora.get(key))
            out[key] = finish_signals(sig)
        return out


def _collect(answers: _PlanAnswers, window_seconds: float, end: float) -> PrometheusResult:
    """Signals per target from :func:`plan`'s answers, each read in the plan's order as soon as it is there.

    Raises:
        SourceError: every query failed (the first one's error).
    """
    errors: list[SourceError] = []
    targets = _TargetSignals(window_seconds, end)
    for sd, value_rows in _drain(answers.signals):
        targets.add_values(sd, _result(value_rows, errors))
    for sd, spelling, bucket_rows in _drain(answers.buckets):
        targets.add_buckets(sd, spelling, _result(bucket_rows, errors))
    targets.add_steps([_result(step_rows, errors) for _sd, step_rows in _drain(answers.steps)])
    labels = {kind: _result(label_rows, errors) for kind, label_rows in answers.labels.items()}
    configs = CacheConfigIndex([metric for metric, _ in labels["labels"]])
    lora = LoraIndex([(metric, sample_value(text)) for metric, text in labels["lora"]], window_seconds)
    operator = OperatorLimitIndex([(metric, sample_value(text)) for metric, text in labels["limit"]])
    if len(errors) == answers.count:
        raise errors[0]
    notes = []
    if errors:
        notes.append(
            f"{len(errors)} of {answers.count} Prometheus queries failed (their signals are unknown): {errors[0]}"
        )
    return PrometheusResult(targets.finish(configs, lora, operator), [q.text for q in answers.queries], notes)


def _error_text(status: int, body: bytes) -> str:
    """``HTTP 422: query timed out``: a non-200 answer in one line (the API's ``error`` when it is JSON)."""
    text = body[:2000].decode("utf-8", "replace")
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        text = doc["error"]
    text = " ".join(text.split())
    if len(text) > 300:  # the reason ends the message (VictoriaMetrics quotes the whole query first)
        text = text[:100] + " ... " + text[-200:]
    return f"HTTP {status}: {text}"


@dataclass
class PrometheusResult:
    """Signals per target plus the queries sent and notes about failures."""

    signals: dict[TargetKey, Signals]
    queries: list[str]
    notes: list[str] = field(default_factory=list)


class PrometheusSource:
    """Read-only client for one Prometheus.

    Args:
        url: base URL (``http://127.0.0.1:9090``). Userinfo (``http://user:password@host``) is taken
            out of it (:func:`~kvpilot.diagnose.sources.http.split_credentials`) and sent as basic auth
            unless ``authorization`` is given; every message names the URL without it.
        timeout: seconds per query.
        workers: queries in flight at once.
        run_deadline: ``time.monotonic()`` instant after which no query starts or continues.
        authorization: the ``Authorization`` header of every query (``Bearer …``, ``Basic …``), or None.
    """

    def __init__(
        self,
        url: str,
        timeout: float = 10.0,
        workers: int = 8,
        run_deadline: float | None = None,
        authorization: str | None = None,
    ):
        if not re.match(r"^https?://", url or ""):
            raise SourceError(f"--prometheus {display_url(url or '')!r}: not an http(s) URL")
        self.url, from_url = split_credentials(url.rstrip("/"))
        authorization = authorization or from_url
        self._headers = {"Authorization": authorization} if authorization else None
        self.timeout = timeout
        self.workers = workers
        self.run_deadline = run_deadline
        self._interned = Interned()  # label tuples, kvpilot_name values and le bounds, shared across answers

    def _read(self, query: PlannedQuery, end: float, rows: Rows[R]) -> list[R]:
        """The rows of one query as ``rows`` decodes them (:mod:`kvpilot.diagnose.sources.rows`).

        One GET, no retry (a failing Prometheus is reported, not hammered): the whole request within
        ``timeout`` s and before the run's deadline, the answer within the decoder's bounds (rows per target:
        see the module docstring).
        """
        deadline = self.timeout
        if self.run_deadline is not None:
            deadline = min(deadline, self.run_deadline - time.monotonic())
        reader = VectorReader(rows.keep, result_type=rows.result_type)
        try:
            fetched = fetch(
                f"{self.url}{query.path}",
                params=query.params(end),
                headers=self._headers,
                deadline=deadline,
                max_bytes=MAX_PROMETHEUS_BYTES * rows.bytes_scale,
                sink=reader.feed,
            )
            if fetched.status != 200:
                raise SourceError(f"--prometheus {self.url}: {_error_text(fetched.status, fetched.body)}")
            reader.close()
        except UnreadableAnswerError as exc:
            rows.rows.clear()
            raise SourceError(f"--prometheus {self.url}: unreadable answer ({exc})") from None
        except requests.RequestException as exc:
            rows.rows.clear()
            raise SourceError(f"--prometheus {self.url}: {request_failure_reason(exc, self.timeout)}") from None
        finally:
            reader.release()  # a failed query's traceback (kept with its error) keeps this frame
        refusal = rows.refusal()
        if refusal is not None:
            raise SourceError(f"--prometheus {self.url}: {refusal}")
        return rows.rows

    def _signal_rows(self, query: PlannedQuery, end: float) -> list[SignalRow]:
        """A signal query's rows: ``(target labels, kvpilot_name, value)``."""
        return self._read(query, end, SignalRows(self._interned))

    def _bucket_rows(self, query: PlannedQuery, end: float) -> list[BucketRow]:
        """A bucket query's rows: ``(target labels, upper bound or None, value)``."""
        return self._read(query, end, BucketRows(self._interned))

    def _step_rows(self, query: PlannedQuery, end: float) -> list[StepRow]:
        """A range query's rows: ``(target labels, step index 0 = oldest, value)``, one per step."""
        rows = StepRows(self._interned, query.start(end), query.step_seconds, query.points)
        return self._read(query, end, rows)

    def _label_rows(self, query: PlannedQuery, end: float) -> list[LabelRow]:
        """An info query's rows: ``(label mapping, value text)``."""
        return self._read(query, end, LabelRows(self._interned))

    def _submit_plan(self, pool: ThreadPoolExecutor, queries: list[PlannedQuery], end: float) -> _PlanAnswers:
        """Send :func:`plan`'s queries; the costliest first (a bucket query selects ~20 series a target), so none
        is left to run alone at the end.
        """
        buckets = [
            (_signal_of(q), q.spelling, pool.submit(self._bucket_rows, q, end)) for q in queries if q.kind == "buckets"
        ]
        steps = [(_signal_of(q), pool.submit(self._step_rows, q, end)) for q in queries if q.kind == "sub"]
        signals = [(_signal_of(q), pool.submit(self._signal_rows, q, end)) for q in queries if q.kind == "signal"]
        labels = {q.kind: pool.submit(self._label_rows, q, end) for q in queries if q.kind in _LABEL_KINDS}
        return _PlanAnswers(queries, signals, buckets, steps, labels)

    def fetch(self, window_seconds: float, end: float, selectors: Selectors = Selectors()) -> PrometheusResult:
        """Evaluate every signal at ``end`` (Unix seconds) over ``window_seconds``.

        Returns:
            a :class:`PrometheusResult`. A query that fails leaves its signal unknown (``None``)
            and adds a note; targets are those any signal query returned.

        Raises:
            SourceError: every query failed (Prometheus down, unreachable, or rejecting all).
        """
        queries = plan(window_seconds, selectors)
        # the answers' rows are acyclic: without the cyclic collector (which rescans every live
        # container each few hundred allocations) decoding 10,000 targets takes a quarter of the time
        collecting = gc.isenabled()
        gc.disable()
        try:
            with ThreadPoolExecutor(max_workers=self.workers) as pool:
                return _collect(self._submit_plan(pool, queries, end), window_seconds, end)
        finally:
            if collecting:
                gc.enable()

    def coverage(
        self, window_seconds: float, end: float, selectors: Selectors = Selectors()
    ) -> dict[TargetKey, tuple[float, float, float]]:
        """Per target, where its data lies in the window ending at ``end``: ``(first sample's time, samples in the
        window, last sample's time)`` (:func:`coverage_query`, one query); a target missing one is absent.

        Raises:
            SourceError: the query failed.
        """
        query = PlannedQuery(coverage_query(window_seconds, selectors), "signal")
        found: dict[TargetKey, dict[str, float]] = {}
        for ident, name, value in self._signal_rows(query, end):
            if math.isfinite(value):
                found.setdefault(TargetKey(*ident), {}).setdefault(name, value)
        return {
            key: (got["first"], got["count"], got["last"])
            for key, got in found.items()
            if {"first", "count", "last"} <= got.keys()
        }

    def fetch_fit(
        self, window_seconds: float, end: float, selectors: Selectors = Selectors()
    ) -> dict[TargetKey, FitRows]:
        """:data:`~kvpilot.diagnose.signals.FIT_SIGNAL_DEFS` at ``end`` over ``window_seconds``, and
        :data:`~kvpilot.diagnose.signals.FIT_SERIES` over the window, for the targets ``selectors`` select
        (:func:`fit_plan`: 14 queries, the prediction's second round, sent only for the targets it predicts).

        Returns:
            ``{target: FitRows}``: the shapes of ``Signals.fit`` / ``fit_buckets`` / ``fit_series``; a value no
            query answered is absent (a series point: None).

        Raises:
            SourceError: every query failed.
        """
        queries = fit_plan(window_seconds, selectors)
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            values = [(q, pool.submit(self._signal_rows, q, end)) for q in queries if q.kind == "signal"]
            buckets = [(q, pool.submit(self._bucket_rows, q, end)) for q in queries if q.kind == "buckets"]
            series = [(q, pool.submit(self._step_rows, q, end)) for q in queries if q.kind == "sub"]
        out: dict[TargetKey, FitRows] = {}
        errors: list[SourceError] = []
        for query, value_rows in values:
            _add_fit_values(out, _fit_name(query), _result(value_rows, errors))
        for query, bucket_rows in buckets:
            _add_fit_buckets(out, _fit_name(query), _result(bucket_rows, errors))
        for query, step_rows in series:
            _add_fit_series(out, _fit_name(query), query.points, _result(step_rows, errors))
        if errors and len(errors) == len(queries):
            raise errors[0]
        return out
