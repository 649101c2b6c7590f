"""The operator's own ``/metrics``: each managed server's configured limits, phase and expiry, and
the reconcile counters and latency (prometheus_client, on a registry of its own).

Series (docs/alerting.md "Operator metrics"; the alert rules join on the first one):

- ``kvpilot_vllmserver_limit{namespace, server, pod, limit}``: one gauge per VLLMServer and limit,
  ``limit`` one of :data:`LIMITS`. ``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``
  and ``gpu_memory_utilization`` come from ``spec.engine`` and exist only when the spec sets them
  (an unset field means vLLM's own default, which depends on the GPU: the rules then fall back to
  their heuristics); ``kv_cache_tokens`` comes from ``status.kvCacheTokens`` (vLLM's startup log).
- ``kvpilot_vllmserver_info{namespace, server, pod, model, phase}``: 1 for the current phase.
- ``kvpilot_vllmserver_expiry_timestamp_seconds{namespace, server, pod}``: ``status.expiresAt`` as
  Unix seconds (the pod's ``activeDeadlineSeconds`` from its start).
- ``kvpilot_reconcile_total{handler, outcome}`` (``outcome``: ``success``, ``permanent_error``,
  ``temporary_error``, ``error``) and ``kvpilot_reconcile_duration_seconds{handler}`` (histogram).

The labels ``namespace`` and ``pod`` name the vLLM pod, not the operator's: a scrape of the operator
must keep them (``honor_labels: true``, ServiceMonitor ``honorLabels: true``), otherwise Prometheus
renames them ``exported_namespace``/``exported_pod`` and the rules' ``on(namespace, pod)`` joins find
nothing.

Server series are computed at scrape time from the last VLLMServer body seen (a kopf ``event``
handler keeps it; a ``DELETED`` event drops it), so a deleted server leaves no stale series.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server
from wsgiref.types import StartResponse, WSGIEnvironment

import kopf
from prometheus_client import CollectorRegistry, Counter, Histogram, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.metrics_core import Metric

from kvpilot.api.objects import VLLMServerEvent, VLLMServerObject

#: ``limit`` label value -> ``spec.engine`` field (None: from status). Names are vLLM's engine-arg
#: names (vllm/engine/arg_utils.py, EngineArgs), as the diagnoser's limits use them.
LIMITS: dict[str, str | None] = {
    "max_num_seqs": "maxNumSeqs",
    "max_num_batched_tokens": "maxNumBatchedTokens",
    "max_model_len": "maxModelLen",
    "gpu_memory_utilization": "gpuMemoryUtilization",
    "kv_cache_tokens": None,
}

#: Reconcile latency buckets (seconds): API round trips on loopback take milliseconds, a pre-flight
#: that reads the Hub up to its timeout (kvpilot.kv.hub) tens of seconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

#: Default listen address of ``kvpilot operator --metrics-port``.
DEFAULT_PORT = 8081
DEFAULT_PATH = "/metrics"


@dataclass(frozen=True)
class ServerSeries:
    """What one VLLMServer contributes to ``/metrics`` (pure data, from :func:`server_series`)."""

    namespace: str
    server: str
    pod: str
    model: str
    phase: str
    limits: Mapping[str, float]
    expiry: float | None


def _timestamp(value: Any) -> float | None:
    """RFC 3339 (``2026-12-01T10:00:00Z``) -> Unix seconds; None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.timestamp()


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def server_series(body: VLLMServerObject) -> ServerSeries:
    """The series of one VLLMServer body (``metadata``, ``spec``, ``status``); pure.

    The spec and status are read as served, field by field, not validated: non-numeric or missing
    limit fields are left out (an invalid spec is reported by the reconcile handler's status
    condition, not here).
    """
    meta = body.get("metadata") or {}
    raw_spec, raw_status = body.get("spec"), body.get("status")
    spec = raw_spec if isinstance(raw_spec, Mapping) else {}
    status = raw_status if isinstance(raw_status, Mapping) else {}
    raw_engine = spec.get("engine")
    engine = raw_engine if isinstance(raw_engine, Mapping) else {}
    limits: dict[str, float] = {}
    for limit, field in LIMITS.items():
        value = _number(engine.get(field) if field else status.get("kvCacheTokens"))
        if value is not None:
            limits[limit] = value
    return ServerSeries(
        namespace=str(meta.get("namespace") or ""),
        server=str(meta.get("name") or ""),
        pod=str(status.get("podName") or ""),
        model=str(spec.get("servedModelName") or spec.get("model") or ""),
        phase=str(status.get("phase") or "Pending"),
        limits=limits,
        expiry=_timestamp(status.get("expiresAt")),
    )


class _ServerCollector:
    """A prometheus_client collector yielding the server families from the bodies seen."""

    def __init__(self, metrics: OperatorMetrics) -> None:
        self._metrics = metrics

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        limit = GaugeMetricFamily(
            "kvpilot_vllmserver_limit",
            "Configured limit of a VLLMServer (spec.engine, or status.kvCacheTokens for kv_cache_tokens).",
            labels=["namespace", "server", "pod", "limit"],
        )
        info = GaugeMetricFamily(
            "kvpilot_vllmserver_info",
            "1 for each VLLMServer, labelled with its model and current status.phase.",
            labels=["namespace", "server", "pod", "model", "phase"],
        )
        expiry = GaugeMetricFamily(
            "kvpilot_vllmserver_expiry_timestamp_seconds",
            "status.expiresAt of a VLLMServer as Unix seconds (its pod's activeDeadlineSeconds).",
            labels=["namespace", "server", "pod"],
        )
        for s in self._metrics.servers():
            for name, value in sorted(s.limits.items()):
                limit.add_metric([s.namespace, s.server, s.pod, name], value)
            info.add_metric([s.namespace, s.server, s.pod, s.model, s.phase], 1.0)
            if s.expiry is not None:
                expiry.add_metric([s.namespace, s.server, s.pod], s.expiry)
        yield from (limit, info, expiry)


class OperatorMetrics:
    """The operator's metrics on their own :class:`CollectorRegistry` (never the global one)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.reconciles = Counter(
            "kvpilot_reconcile",
            "Handler runs of the kvpilot operator, by handler and outcome.",
            ["handler", "outcome"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "kvpilot_reconcile_duration_seconds",
            "Wall time of one handler run of the kvpilot operator (seconds).",
            ["handler"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._servers: dict[tuple[str, str], ServerSeries] = {}
        self._lock = threading.Lock()
        self.registry.register(_ServerCollector(self))

    def servers(self) -> list[ServerSeries]:
        """The servers currently known, sorted by namespace and name."""
        with self._lock:
            return [self._servers[k] for k in sorted(self._servers)]

    def observe(self, body: VLLMServerObject) -> None:
        """Remember the latest body of a VLLMServer."""
        series = server_series(body)
        with self._lock:
            self._servers[(series.namespace, series.server)] = series

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted VLLMServer's series."""
        with self._lock:
            self._servers.pop((namespace, name), None)

    def on_server_event(self, event: VLLMServerEvent, **_: Any) -> None:
        """Kopf ``event`` handler of VLLMServers: keep the body, drop it on ``DELETED``."""
        body = event.get("object") or {}
        meta = body.get("metadata") or {}
        if event.get("type") == "DELETED":
            self.forget(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        elif meta.get("name"):
            self.observe(body)

    @contextlib.contextmanager
    def _measured(self, handler: str) -> Iterator[None]:
        """Count one run of ``handler`` by outcome and time it (the body of :meth:`timed`'s wrappers)."""
        started = time.perf_counter()
        outcome = "error"
        try:
            yield
            outcome = "success"
        except kopf.PermanentError:
            outcome = "permanent_error"
            raise
        except kopf.TemporaryError:
            outcome = "temporary_error"
            raise
        finally:
            self.latency.labels(handler).observe(time.perf_counter() - started)
            self.reconciles.labels(handler, outcome).inc()

    def timed(self, handler: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` counting its runs by outcome and timing them under ``handler``."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._measured(handler):
                return fn(*args, **kwargs)

        return wrapper

    def timed_async(self, handler: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        """:meth:`timed` for a coroutine function (a handler kopf awaits in its loop)."""

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._measured(handler):
                return await fn(*args, **kwargs)

        return wrapper

    def serve(self, host: str = "0.0.0.0", port: int = DEFAULT_PORT, path: str = DEFAULT_PATH) -> MetricsServer:
        """Serve the registry at ``http://host:port/path`` in a daemon thread (``port`` 0: a free one)."""
        return MetricsServer(self.registry, host, port, path)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """No access log on stderr (kopf's log is the operator's log)."""


class MetricsServer:
    """A threaded WSGI server answering ``path`` with the exposition and anything else with 404."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int, path: str) -> None:
        if not path.startswith("/"):
            raise ValueError(f"--metrics-path: must start with '/', got {path!r}")
        exposition = make_wsgi_app(registry)

        def app(environ: WSGIEnvironment, start_response: StartResponse) -> Any:
            if environ.get("PATH_INFO") != path:
                start_response("404 Not Found", [("Content-Type", "text/plain")])
                return [f"not found: the metrics are at {path}\n".encode()]
            return exposition(environ, start_response)

        self._httpd = make_server(host, port, app, ThreadingWSGIServer, handler_class=_QuietHandler)
        self.host, self.port, self.path = host, self._httpd.server_port, path
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="kvpilot-metrics", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The URL of the exposition."""
        return f"http://{self.host}:{self.port}{self.path}"

    def close(self) -> None:
        """Stop serving and release the port."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
