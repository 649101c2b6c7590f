"""``kvpilot alert-hook``: an aiohttp receiver that answers each firing alert with its diagnosis.

Routes:

- ``POST /alerts`` (and ``POST /``): an Alertmanager (v4) or Grafana (v1) webhook body. Each firing
  alert's labels name a target (:func:`kvpilot.alerts.payload.target_of`); the hook runs the same
  read-only diagnosis as ``kvpilot diagnose --prometheus``, with its predictions
  (:func:`kvpilot.advice.run.predict_for_alert`: the replay and what-ifs within 10 s) and
  answers ``200`` with ``{"sender", "receiver", "results": [{"fingerprint", "alertname", "status",
  "target", "cached", "diagnosis": <diagnose -o json> | null, "error": str | null}]}``. Resolved
  alerts are acknowledged (``"diagnosis": null``) without work. ``400`` malformed JSON, ``401`` missing
  or wrong credentials, ``413`` a body above the limit, ``422`` JSON of neither shape.
- ``GET /healthz``: ``ok``. ``GET /metrics``: the hook's own counters (its own registry).

Bounded everywhere: the body size (aiohttp ``client_max_size``), the number of diagnoses at once (a
semaphore), each diagnosis' time (the Prometheus queries' timeout and an overall deadline), the
sinks' time. A repeating alert (same fingerprint) is diagnosed once per ``cache_seconds``; a burst of
the same alert shares one diagnosis in flight. Label values reach PromQL only as quoted, escaped
matchers (kvpilot.diagnose.sources.prometheus), after :func:`target_of` has checked them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kvpilot.advice.run import predict_for_alert
from kvpilot.alerts.payload import (
    Alert,
    Notification,
    PayloadShapeError,
    Target,
    TargetError,
    parse_notification,
    target_of,
)
from kvpilot.diagnose.model import Report
from kvpilot.diagnose.run import Options
from kvpilot.diagnose.sources import SourceError
from kvpilot.text.numbers import fig

log = logging.getLogger("kvpilot.alert_hook")

#: default body limit: Alertmanager sends every alert of a group in one body (``max_alerts`` 0 =
#: all); 1 MiB holds several hundred alerts with their annotations
MAX_BODY_BYTES = 1 << 20


class Sink(Protocol):
    """Where a diagnosis goes besides the HTTP answer."""

    name: str

    async def emit(self, alert: Alert, target: Target, result: dict[str, Any]) -> None:
        """Deliver one result (raise on failure: the hook logs it and carries on)."""


@dataclass
class HookConfig:
    """The receiver's settings (the command line of ``kvpilot alert-hook``)."""

    prometheus: str
    bearer_token: str | None = None
    basic_auth: tuple[str, str] | None = None
    insecure_no_auth: bool = False
    window_seconds: float = 300.0
    cache_seconds: float = 300.0
    max_concurrency: int = 4
    timeout_seconds: float = 30.0
    sink_timeout_seconds: float = 10.0
    max_body_bytes: int = MAX_BODY_BYTES
    use_kube: bool = False
    kubeconfig: str | None = None
    sinks: Sequence[Sink] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (self.bearer_token or self.basic_auth or self.insecure_no_auth):
            raise ValueError("auth: give a bearer token or basic auth, or --insecure-no-auth")


class HookMetrics:
    """The hook's own series, on a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "kvpilot_alert_hook_requests", "Webhook requests by HTTP status.", ["code"], registry=self.registry
        )
        self.alerts = Counter(
            "kvpilot_alert_hook_alerts", "Alerts received by status.", ["status"], registry=self.registry
        )
        self.diagnoses = Counter(
            "kvpilot_alert_hook_diagnoses", "Diagnoses run, by verdict.", ["verdict"], registry=self.registry
        )
        self.cache_hits = Counter(
            "kvpilot_alert_hook_cache_hits", "Alerts answered from the per-fingerprint cache.", registry=self.registry
        )
        self.errors = Counter(
            "kvpilot_alert_hook_errors", "Alerts not diagnosed, by reason.", ["reason"], registry=self.registry
        )
        self.latency = Histogram(
            "kvpilot_alert_hook_diagnosis_duration_seconds",
            "Wall time of one diagnosis (seconds).",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "kvpilot_alert_hook_diagnoses_in_flight", "Diagnoses running now.", registry=self.registry
        )


def _authorized(header: str | None, config: HookConfig) -> bool:
    """Constant-time check of ``Authorization`` (``hmac.compare_digest`` on bytes)."""
    if config.insecure_no_auth:
        return True
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and config.bearer_token:
        return hmac.compare_digest(value.encode(), config.bearer_token.encode())
    if scheme.lower() == "basic" and config.basic_auth:
        try:
            given = base64.b64decode(value.encode(), validate=True)
        except (binascii.Error, ValueError):
            return False
        expected = f"{config.basic_auth[0]}:{config.basic_auth[1]}".encode()
        return hmac.compare_digest(given, expected)
    return False


def _error(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers or None)


class AlertHook:
    """The receiver's state: config, cache, concurrency bound, metrics; :meth:`app` is the aiohttp app."""

    def __init__(self, config: HookConfig, diagnose: Callable[[Options], Report] = predict_for_alert) -> None:
        self.config = config
        self.metrics = HookMetrics()
        self._diagnose = diagnose
        self._semaphore = asyncio.Semaphore(config.max_concurrency)
        self._cache: dict[str, tuple[float, dict[str, Any]]] = {}
        self._in_flight: dict[str, asyncio.Future[dict[str, Any]]] = {}

    def app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application(client_max_size=self.config.max_body_bytes)
        app.router.add_post("/alerts", self.handle_alerts)
        app.router.add_post("/", self.handle_alerts)
        app.router.add_get("/healthz", self.handle_healthz)
        app.router.add_get("/metrics", self.handle_metrics)
        return app

    async def handle_healthz(self, request: web.Request) -> web.Response:
        """``GET /healthz``: the process serves."""
        return web.Response(text="ok\n")

    async def handle_metrics(self, request: web.Request) -> web.Response:
        """``GET /metrics``: the hook's own series."""
        return web.Response(body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def handle_alerts(self, request: web.Request) -> web.Response:
        """``POST /alerts``: authenticate, parse, diagnose each firing alert, answer."""
        response = await self._handle(request)
        self.metrics.requests.labels(str(response.status)).inc()
        return response

    async def _handle(self, request: web.Request) -> web.Response:
        if not _authorized(request.headers.get("Authorization"), self.config):
            return _error(401, "unauthorized", **{"WWW-Authenticate": 'Bearer realm="kvpilot-alert-hook"'})
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"body: larger than {self.config.max_body_bytes} bytes")
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return _error(400, f"body: not JSON ({str(exc)[:80]})")
        try:
            notification = parse_notification(body)
        except PayloadShapeError as exc:
            return _error(422, str(exc))
        results = await asyncio.gather(*(self._one(notification, alert) for alert in notification.alerts))
        return web.json_response(
            {"sender": notification.sender, "receiver": notification.receiver, "results": list(results)},
            dumps=lambda obj: json.dumps(obj, allow_nan=False),
        )

    async def _one(self, notification: Notification, alert: Alert) -> dict[str, Any]:
        self.metrics.alerts.labels(alert.status).inc()
        result: dict[str, Any] = {
            "fingerprint": alert.fingerprint,
            "alertname": alert.name,
            "status": alert.status,
            "target": None,
            "cached": False,
            "diagnosis": None,
            "error": None,
        }
        try:
            target = target_of(alert)
        except TargetError as exc:
            self.metrics.errors.labels("target").inc()
            result["error"] = str(exc)
            return result
        result["target"] = target.to_json()
        if not alert.firing:
            await self._emit(alert, target, result)
            return result
        cached = self._cache.get(alert.fingerprint)
        if cached and cached[0] > time.monotonic():
            self.metrics.cache_hits.inc()
            result.update(cached=True, diagnosis=cached[1])
            return result
        try:
            result["diagnosis"] = await self._diagnosis(alert.fingerprint, target)
        except TimeoutError:
            self.metrics.errors.labels("timeout").inc()
            result["error"] = f"diagnosis: no answer within {fig(self.config.timeout_seconds, 3)} s"
        except SourceError as exc:
            self.metrics.errors.labels("source").inc()
            result["error"] = f"diagnosis: {exc}"
        await self._emit(alert, target, result)
        return result

    async def _diagnosis(self, fingerprint: str, target: Target) -> dict[str, Any]:
        """One diagnosis per fingerprint at a time; the answer is cached for ``cache_seconds``."""
        running = self._in_flight.get(fingerprint)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._in_flight[fingerprint] = future
        try:
            report = await asyncio.wait_for(self._run(target), self.config.timeout_seconds)
            self._cache[fingerprint] = (time.monotonic() + self.config.cache_seconds, report)
            self._evict()
            future.set_result(report)
            return report
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it, nobody else needs to
            raise
        finally:
            self._in_flight.pop(fingerprint, None)

    def _evict(self) -> None:
        now = time.monotonic()
        for key in [k for k, (expires, _) in self._cache.items() if expires <= now]:
            del self._cache[key]

    async def _run(self, target: Target) -> dict[str, Any]:
        opts = Options(
            prometheus=self.config.prometheus,
            window_seconds=self.config.window_seconds,
            namespace=target.namespace,
            pod=target.pod,
            server=target.server,
            model_name=target.model_name,
            use_kube=self.config.use_kube,
            kubeconfig=self.config.kubeconfig,
            timeout=min(10.0, self.config.timeout_seconds),
        )
        async with self._semaphore:
            self.metrics.in_flight.inc()
            started = time.perf_counter()
            try:
                report = await asyncio.to_thread(self._diagnose, opts)
            finally:
                self.metrics.latency.observe(time.perf_counter() - started)
                self.metrics.in_flight.dec()
        doc = report.to_json()
        for t in doc["targets"]:
            self.metrics.diagnoses.labels(t["verdict"]).inc()
        return doc

    async def _emit(self, alert: Alert, target: Target, result: dict[str, Any]) -> None:
        async def one(sink: Sink) -> None:
            try:
                await asyncio.wait_for(sink.emit(alert, target, result), self.config.sink_timeout_seconds)
            except Exception as exc:  # noqa: BLE001 - a failing sink never fails the answer; it is logged
                self.metrics.errors.labels(f"sink_{sink.name}").inc()
                log.warning(f"sink {sink.name}: {type(exc).__name__}: {str(exc)[:200]}")

        await asyncio.gather(*(one(s) for s in self.config.sinks))


async def serve(hook: AlertHook, host: str, port: int) -> web.AppRunner:
    """Start ``hook`` on ``host:port`` (``port`` 0: a free one); returns the runner (``cleanup()`` stops it)."""
    runner = web.AppRunner(hook.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
