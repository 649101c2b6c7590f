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
More queries read the step-time sub-windows (:func:`subwindow_query`, one per ``SUBWINDOW_DEFS``),
``vllm:cache_config_info`` and the kvpilot operator's limits metric ``kvpilot_vllmserver_limit``
(:func:`operator_limit_query`, joined on namespace and pod), so the number of queries is fixed
(:func:`query_count`), whatever the number of targets.

Only ``/api/v1/query`` is called (GET, ``query`` and an explicit ``time``), each as one bounded
request (:mod:`kvpilot.diagnose.sources.http`) whose answer is decoded while it streams in
(:mod:`kvpilot.diagnose.sources.vector`) into one small tuple per row: prometheus-api-client's
``custom_query`` decodes a whole answer into dicts, about 400 MiB for one 10,000-target
histogram answer (benchmarks/diagnose_scale.py, docs/performance.md).

Bounds per answer: a signal query holds one row per target, at most :data:`MAX_PROMETHEUS_ROWS`
(50,000 targets) and :data:`MAX_PROMETHEUS_BYTES`; a bucket query one row per target and bucket,
a sub-window query one per target and sub-window, so their bounds are :data:`MAX_HISTOGRAM_BUCKETS`
(or :data:`~kvpilot.diagnose.steptime.SUBWINDOWS`) times larger, for the same 50,000 targets.
"""

from __future__ import annotations

import gc
import json
import math
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import requests

from kvpilot.diagnose import promql
from kvpilot.diagnose.signals import (
    OPERATOR_LIMIT_METRIC,
    SIGNAL_DEFS,
    SUBWINDOW_DEFS,
    TARGET_LABELS,
    CacheConfigIndex,
    OperatorLimitIndex,
    SignalDef,
    Signals,
    TargetKey,
    finish_signals,
    spellings,
)
from kvpilot.diagnose.sources import SourceError, request_failure_reason
from kvpilot.diagnose.sources.http import MAX_HISTOGRAM_BUCKETS, MAX_PROMETHEUS_BYTES, MAX_PROMETHEUS_ROWS, fetch
from kvpilot.diagnose.sources.vector import UnreadableAnswerError, VectorReader
from kvpilot.diagnose.steptime import SUBWINDOWS, subwindow_points

_FUNCTIONS = {
    "avg": "avg_over_time",
    "max": "max_over_time",
    "min": "min_over_time",
    "last": "last_over_time",
    "count": "count_over_time",
    "deriv": "deriv",
    "rate": "rate",
    "increase": "increase",
    "buckets": "increase",
}
NAME_LABEL = "kvpilot_name"
_DONE: Future[list[Any]] = Future()
_DONE.set_result([])


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


def signal_query(
    sd: SignalDef, window_seconds: float, selectors: Selectors = Selectors(), offset_seconds: float = 0.0
) -> str:
    """The one PromQL query of signal ``sd`` for all targets (see the module docstring); with
    ``offset_seconds`` the range ends that long before the evaluation time (``[w] offset o``).
    """
    by = ", ".join(TARGET_LABELS + (("le",) if sd.fn == "buckets" else ()))
    agg = "sum" if sd.agg == "sum" or sd.fn == "buckets" else "max"
    matchers = selectors.matchers() + [f"{k}={_quote(v)}" for k, v in sd.match]
    window = f"[{promql.duration(window_seconds)}]" + (
        f" offset {promql.duration(offset_seconds)}" if offset_seconds else ""
    )
    arms = []
    for spelling in spellings(sd.family):
        sel = _selector(spelling + sd.suffix, matchers)
        inner = f"timestamp({sel})" if sd.fn == "timestamp" else f"{_FUNCTIONS[sd.fn]}({sel}{window})"
        arms.append(f'label_replace({agg} by ({by}) ({inner}), "{NAME_LABEL}", "{spelling}", "__name__", ".*")')
    return f" or ignoring({NAME_LABEL}) ".join(arms)


#: label telling the sub-window of a :func:`subwindow_query` row (0 = oldest)
SUB_LABEL = "kvpilot_sub"


def subwindow_query(sd: SignalDef, window_seconds: float, selectors: Selectors = Selectors()) -> str:
    """Signal ``sd`` over each of the window's :data:`~kvpilot.diagnose.steptime.SUBWINDOWS` sub-windows, in
    one instant query: one arm per sub-window (``[w/K] offset``), labelled ``kvpilot_sub="j"`` (0 = oldest),
    so its ranges end exactly where the recording path's do.
    """
    sub = window_seconds / SUBWINDOWS
    arms = [
        f'label_replace(({signal_query(sd, sub, selectors, (SUBWINDOWS - 1 - j) * sub)}), "{SUB_LABEL}", "{j}", '
        '"__name__", ".*")'
        for j in range(SUBWINDOWS)
    ]
    return " or ".join(arms)


def cache_config_query(window_seconds: float, selectors: Selectors = Selectors()) -> str:
    """The ``vllm:cache_config_info`` labels of every target (any spelling), last value in the window."""
    window = f"[{int(round(window_seconds))}s]"
    matchers = [m for m in selectors.matchers() if not m.startswith("model_name")]  # info has no model_name
    arms = [f"last_over_time({_selector(s, matchers)}{window})" for s in spellings("vllm:cache_config_info")]
    return " or ".join(arms)


def operator_limit_query(window_seconds: float, selectors: Selectors = Selectors()) -> str:
    """The kvpilot operator's ``kvpilot_vllmserver_limit`` of every vLLM pod, last value in the window.

    ``max by (namespace, pod, limit)``: two operator replicas (HA) export the same gauge; the labels name
    the vLLM pod (kvpilot.controller.metrics; a scrape without ``honor_labels`` renames them
    ``exported_*`` and the join finds nothing, as the alert rules' does).
    """
    window = f"[{int(round(window_seconds))}s]"
    matchers = [m for m in selectors.matchers() if not m.startswith("model_name")]  # the gauge has none
    return f"max by (namespace, pod, limit) (last_over_time({_selector(OPERATOR_LIMIT_METRIC, matchers)}{window}))"


def run_queries(window_seconds: float, selectors: Selectors = Selectors()) -> list[str]:
    """Every query one :meth:`PrometheusSource.fetch` sends, in its order: the signals, the sub-window
    signals, ``cache_config_info``, the operator's limits.
    """
    return (
        [signal_query(sd, window_seconds, selectors) for sd in SIGNAL_DEFS]
        + [subwindow_query(sd, window_seconds, selectors) for sd in SUBWINDOW_DEFS]
        + [cache_config_query(window_seconds, selectors), operator_limit_query(window_seconds, selectors)]
    )


def query_count() -> int:
    """Queries one :meth:`PrometheusSource.fetch` sends: one per signal, per sub-window signal, and two more."""
    return len(SIGNAL_DEFS) + len(SUBWINDOW_DEFS) + 2


def _well_formed(row: object) -> bool:
    """True for an instant-vector row of the Prometheus HTTP API: ``metric`` a mapping of string
    labels to string values, ``value`` a ``[time, "number"]`` pair (prometheus.io/docs/prometheus/
    latest/querying/api/#instant-vectors); other rows are skipped, never a crash.
    """
    if not isinstance(row, dict):
        return False
    metric, value = row.get("metric"), row.get("value")
    return (
        isinstance(metric, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in metric.items())
        and isinstance(value, list)
        and len(value) == 2
        and isinstance(value[1], str)
    )


def _number(text: str) -> float:
    """A sample value of the HTTP API (``"4"``, ``"NaN"``, ``"+Inf"``) as a float; NaN when unreadable."""
    try:
        return float(text)
    except ValueError:
        return math.nan


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
        url: base URL (``http://127.0.0.1:9090``).
        timeout: seconds per query.
        workers: queries in flight at once.
    """

    def __init__(self, url: str, timeout: float = 10.0, workers: int = 8, run_deadline: float | None = None):
        if not re.match(r"^https?://", url or ""):
            raise SourceError(f"--prometheus {url!r}: not an http(s) URL")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.workers = workers
        self.run_deadline = run_deadline
        self._keys: dict[tuple[str, ...], tuple[str, ...]] = {}  # label tuples interned across answers

    def _query(self, query: str, at: float, kind: str = "signal") -> list[Any]:
        """Rows of one instant query: ``(target labels, kvpilot_name, le, value text)`` tuples; for
        ``kind="sub"`` ``(target labels, kvpilot_sub, None, value text)``; for ``"labels"`` and
        ``"limit"`` ``(label mapping, value text)``.

        One GET, no retry (a failing Prometheus is reported, not hammered): the whole request
        within ``timeout`` s and before the run's deadline; ``kind`` selects the bounds (rows per
        target: see the module docstring).
        """
        scale = {"buckets": MAX_HISTOGRAM_BUCKETS, "sub": SUBWINDOWS}.get(kind, 1)
        labels_only = kind in ("labels", "limit")
        second = SUB_LABEL if kind == "sub" else NAME_LABEL
        max_rows, max_bytes = MAX_PROMETHEUS_ROWS * scale, MAX_PROMETHEUS_BYTES * scale
        rows: list[Any] = []
        seen = 0
        keys = self._keys
        targets: set[tuple[str, ...]] = set()  # of a bucket answer: at most MAX_PROMETHEUS_ROWS

        def keep(batch: list[object]) -> None:
            nonlocal seen
            seen += len(batch)
            if seen > max_rows or len(targets) > MAX_PROMETHEUS_ROWS:
                rows.clear()  # counted to the end for the message, no longer kept
                return
            for row in batch:
                # an instant query answers a vector: a list of {"metric": {label: str}, "value": [t, "v"]} rows
                if not isinstance(row, dict):
                    raise UnreadableAnswerError("not an instant vector")
                if not _well_formed(row):
                    continue
                metric = row["metric"]
                if labels_only:
                    rows.append((metric, row["value"][1]))
                    continue
                ident = tuple([metric.get(k, "") for k in TARGET_LABELS])
                if scale > 1:
                    targets.add(ident)
                rows.append((keys.setdefault(ident, ident), metric.get(second, ""), metric.get("le"), row["value"][1]))

        deadline = self.timeout
        if self.run_deadline is not None:
            deadline = min(deadline, self.run_deadline - time.monotonic())
        reader = VectorReader(keep)
        try:
            fetched = fetch(
                f"{self.url}/api/v1/query",
                params={"query": query, "time": f"{at:.3f}"},
                deadline=deadline,
                max_bytes=max_bytes,
                sink=reader.feed,
            )
            if fetched.status != 200:
                raise SourceError(f"--prometheus {self.url}: {_error_text(fetched.status, fetched.body)}")
            reader.close()
        except UnreadableAnswerError as exc:
            rows.clear()
            raise SourceError(f"--prometheus {self.url}: unreadable answer ({exc})") from None
        except requests.RequestException as exc:
            rows.clear()
            raise SourceError(f"--prometheus {self.url}: {request_failure_reason(exc, self.timeout)}") from None
        finally:
            reader.release()  # a failed query's traceback (kept with its error) keeps this frame
        if len(targets) > MAX_PROMETHEUS_ROWS:
            raise SourceError(
                f"--prometheus {self.url}: answer with {seen:,} series of more than {MAX_PROMETHEUS_ROWS:,} "
                "targets (the limit): narrow the selection (--namespace, --server, --pod, --model-name)"
            )
        if seen > max_rows:
            raise SourceError(
                f"--prometheus {self.url}: answer with {seen:,} series, more than the limit of {max_rows:,}: "
                "narrow the selection (--namespace, --server, --pod, --model-name)"
            )
        return rows

    def fetch(self, window_seconds: float, end: float, selectors: Selectors = Selectors()) -> PrometheusResult:
        """Evaluate every signal at ``end`` (Unix seconds) over ``window_seconds``.

        Returns:
            a :class:`PrometheusResult`. A query that fails leaves its signal unknown (``None``)
            and adds a note; targets are those any signal query returned.

        Raises:
            SourceError: every query failed (Prometheus down, unreachable, or rejecting all).
        """
        defs = list(SIGNAL_DEFS)
        all_queries = run_queries(window_seconds, selectors)
        sub_queries = all_queries[len(defs) : -2]
        kinds = ["buckets" if sd.fn == "buckets" else "signal" for sd in defs]
        kinds += ["sub"] * len(sub_queries) + ["labels", "limit"]
        # the answers' rows are acyclic: without the cyclic collector (which rescans every live
        # container each few hundred allocations) decoding 10,000 targets takes a quarter of the time
        collecting = gc.isenabled()
        gc.disable()
        try:
            with ThreadPoolExecutor(max_workers=self.workers) as pool:
                futures = [pool.submit(self._query, q, end, kind) for q, kind in zip(all_queries, kinds, strict=True)]
                return self._signals(defs, futures, all_queries, window_seconds, end)
        finally:
            if collecting:
                gc.enable()

    def _signals(
        self,
        defs: list[SignalDef],
        futures: list[Future[list[Any]]],
        all_queries: list[str],
        window_seconds: float,
        end: float,
    ) -> PrometheusResult:
        """Signals per target from the queries' rows (``futures`` in the order of ``all_queries``), each
        answer read in that order as soon as it is there and dropped after.
        """
        per_target: dict[TargetKey, Signals] = {}

        def signals_for(key: TargetKey) -> Signals:
            if key not in per_target:
                per_target[key] = Signals(
                    values={sd.name: None for sd in defs if sd.fn != "buckets"}, window_seconds=window_seconds, end=end
                )
            return per_target[key]

        keys: dict[tuple[str, ...], TargetKey] = {}
        les: dict[str | None, float | None] = {}
        errors: list[SourceError] = []

        def key_of(ident: tuple[str, ...]) -> TargetKey:
            key = keys.get(ident)
            if key is None:
                key = keys[ident] = TargetKey(*ident)
            return key

        def parse_le(text: str | None) -> float | None:
            if text not in les:
                try:
                    les[text] = promql.parse_le(text or "")
                except ValueError:
                    les[text] = None
            return les[text]

        def answer(i: int) -> list[Any]:
            try:
                rows = futures[i].result()
            except SourceError as exc:
                errors.append(exc)
                return []
            futures[i] = _DONE  # its rows are dropped once read
            return rows

        for i, sd in enumerate(defs):
            bucket_rows: dict[TargetKey, list[tuple[float, float]]] = {}
            for ident, name, le, text in answer(i):
                key = key_of(ident)
                try:
                    value = float(text)
                except ValueError:
                    continue
                sig = per_target.get(key) or signals_for(key)
                if name:
                    sig.spelling.setdefault(sd.family, name)
                if sd.fn == "buckets":
                    bound = parse_le(le)
                    if bound is not None:
                        bucket_rows.setdefault(key, []).append((bound, value))
                else:
                    sig.values[sd.name] = value
            for key, rows_ in bucket_rows.items():
                signals_for(key).buckets[sd.name] = sorted(rows_)
        per_sub: dict[TargetKey, list[list[float | None]]] = {}
        n_sub = len(all_queries) - len(defs) - 2
        for i in range(n_sub):
            for ident, sub_text, _, text in answer(len(defs) + i):
                try:
                    j = int(sub_text)
                except ValueError:
                    continue
                if 0 <= j < SUBWINDOWS:
                    grid = per_sub.setdefault(key_of(ident), [[None] * SUBWINDOWS for _ in range(n_sub)])
                    grid[i][j] = _number(text)
        for key, grid in per_sub.items():
            if key in per_target:
                per_target[key].step_points = subwindow_points(*grid)
        configs = CacheConfigIndex([metric for metric, _ in answer(len(all_queries) - 2)])
        operator = OperatorLimitIndex([(metric, _number(text)) for metric, text in answer(len(all_queries) - 1)])
        if len(errors) == len(futures):
            raise errors[0]
        notes = []
        if errors:
            notes.append(
                f"{len(errors)} of {len(futures)} Prometheus queries failed (their signals are unknown): {errors[0]}"
            )
        out: dict[TargetKey, Signals] = {}
        for key, sig in per_target.items():
            sig.cache_config = configs.get(key)
            sig.operator_limits = operator.get(key)
            out[key] = finish_signals(sig)
        return PrometheusResult(out, all_queries, notes)
