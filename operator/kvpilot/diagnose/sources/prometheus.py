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

Queries go through ``prometheus-api-client`` (``custom_query`` with an explicit ``time``; its
range helpers' default start/end are computed at import time, so they are never relied on).
Only ``/api/v1/query`` is called.
"""

from __future__ import annotations

import math
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

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
from kvpilot.diagnose.sources.http import MAX_PROMETHEUS_BYTES, MAX_PROMETHEUS_ROWS, BoundedSession
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
    window = f"[{_seconds(window_seconds)}]" + (f" offset {_seconds(offset_seconds)}" if offset_seconds else "")
    arms = []
    for spelling in spellings(sd.family):
        sel = _selector(spelling + sd.suffix, matchers)
        inner = f"timestamp({sel})" if sd.fn == "timestamp" else f"{_FUNCTIONS[sd.fn]}({sel}{window})"
        arms.append(f'label_replace({agg} by ({by}) ({inner}), "{NAME_LABEL}", "{spelling}", "__name__", ".*")')
    return f" or ignoring({NAME_LABEL}) ".join(arms)


def _seconds(value: float) -> str:
    """A PromQL duration of whole milliseconds (``60s``, ``62500ms``): sub-windows need not be whole seconds."""
    ms = int(round(value * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


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
        # No retries on 5xx (the default retries 3 times with back-off): a failing Prometheus is
        # reported, not hammered. Each query is one bounded GET (kvpilot.diagnose.sources.http):
        # the whole request within ``timeout`` s and before ``run_deadline``, at most
        # MAX_PROMETHEUS_BYTES of (decompressed) answer and MAX_PROMETHEUS_ROWS series.
        self.client = PrometheusConnect(
            url=self.url,
            retry=Retry(total=0, status_forcelist=[]),
            timeout=timeout,
            session=BoundedSession(MAX_PROMETHEUS_BYTES, run_deadline, max_rows=MAX_PROMETHEUS_ROWS),
        )

    def _query(self, query: str, at: float) -> list[dict[str, Any]]:
        try:
            result = self.client.custom_query(query, params={"time": f"{at:.3f}"})
        except PrometheusApiClientException as exc:
            raise SourceError(f"--prometheus {self.url}: {str(exc)[:300]}") from None
        except requests.RequestException as exc:
            raise SourceError(f"--prometheus {self.url}: {request_failure_reason(exc, self.timeout)}") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise SourceError(f"--prometheus {self.url}: unreadable answer ({type(exc).__name__})") from None
        # an instant query answers a vector: a list of {"metric": {label: str}, "value": [t, "v"]} rows
        if not isinstance(result, list) or not all(isinstance(row, dict) for row in result):
            raise SourceError(f"--prometheus {self.url}: unreadable answer (not an instant vector)")
        return [row for row in result if _well_formed(row)]

    def fetch(self, window_seconds: float, end: float, selectors: Selectors = Selectors()) -> PrometheusResult:
        """Evaluate every signal at ``end`` (Unix seconds) over ``window_seconds``.

        Returns:
            a :class:`PrometheusResult`. A query that fails leaves its signal unknown (``None``)
            and adds a note; targets are those any signal query returned.

        Raises:
            SourceError: every query failed (Prometheus down, unreachable, or rejecting all).
        """
        defs = list(SIGNAL_DEFS)
        queries = [signal_query(sd, window_seconds, selectors) for sd in defs]
        config_q = cache_config_query(window_seconds, selectors)
        sub_queries = [subwindow_query(sd, window_seconds, selectors) for sd in SUBWINDOW_DEFS]
        all_queries = queries + sub_queries + [config_q, operator_limit_query(window_seconds, selectors)]
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            futures = [pool.submit(self._query, q, end) for q in all_queries]
            results: list[list[dict[str, Any]] | SourceError] = []
            for fut in futures:
                try:
                    results.append(fut.result())
                except SourceError as exc:
                    results.append(exc)
        errors = [r for r in results if isinstance(r, SourceError)]
        if len(errors) == len(results):
            raise errors[0]
        notes = []
        if errors:
            notes.append(
                f"{len(errors)} of {len(results)} Prometheus queries failed (their signals are unknown): {errors[0]}"
            )
        per_target: dict[TargetKey, Signals] = {}

        def signals_for(key: TargetKey) -> Signals:
            if key not in per_target:
                per_target[key] = Signals(
                    values={sd.name: None for sd in defs if sd.fn != "buckets"}, window_seconds=window_seconds, end=end
                )
            return per_target[key]

        keys: dict[tuple[str, ...], TargetKey] = {}

        def key_of(labels: dict[str, str]) -> TargetKey:
            ident = tuple(labels.get(k, "") for k in TARGET_LABELS)
            if ident not in keys:
                keys[ident] = TargetKey(*ident)
            return keys[ident]

        for sd, rows in zip(defs, results[: len(defs)], strict=True):
            if isinstance(rows, SourceError):
                continue
            bucket_rows: dict[TargetKey, list[tuple[float, float]]] = {}
            for row in rows:
                labels = row.get("metric", {})
                key = key_of(labels)
                try:
                    value = float(row["value"][1])
                except (KeyError, IndexError, TypeError, ValueError):
                    continue
                sig = signals_for(key)
                if labels.get(NAME_LABEL):
                    sig.spelling.setdefault(sd.family, labels[NAME_LABEL])
                if sd.fn == "buckets":
                    try:
                        bucket_rows.setdefault(key, []).append((promql.parse_le(labels.get("le", "")), value))
                    except ValueError:
                        continue
                else:
                    sig.values[sd.name] = value
            for key, rows_ in bucket_rows.items():
                signals_for(key).buckets[sd.name] = sorted(rows_)
        per_sub: dict[TargetKey, list[list[float | None]]] = {}
        for i, rows in enumerate(results[len(defs) : len(defs) + len(sub_queries)]):
            for row in [] if isinstance(rows, SourceError) else rows:
                labels = row["metric"]
                try:
                    j = int(labels.get(SUB_LABEL, ""))
                except ValueError:
                    continue
                if 0 <= j < SUBWINDOWS:
                    grid = per_sub.setdefault(key_of(labels), [[None] * SUBWINDOWS for _ in sub_queries])
                    grid[i][j] = _number(row["value"][1])
        for key, grid in per_sub.items():
            if key in per_target:
                per_target[key].step_points = subwindow_points(*grid)
        config_rows, limit_rows = results[-2], results[-1]
        configs = CacheConfigIndex(
            [] if isinstance(config_rows, SourceError) else [r.get("metric", {}) for r in config_rows]
        )
        operator = OperatorLimitIndex(
            [] if isinstance(limit_rows, SourceError) else [(r["metric"], _number(r["value"][1])) for r in limit_rows]
        )
        out: dict[TargetKey, Signals] = {}
        for key, sig in per_target.items():
            sig.cache_config = configs.get(key)
            sig.operator_limits = operator.get(key)
            out[key] = finish_signals(sig)
        return PrometheusResult(out, all_queries, notes)
