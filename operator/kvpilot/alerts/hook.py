"""``kvpilot alert-hook``: an aiohttp receiver that answers each firing alert with its diagnosis.

Routes:

- ``POST /alerts`` (and ``POST /``): an Alertmanager (v4) or Grafana (v1) webhook body. Each firing
  alert's labels name a target (:func:`kvpilot.alerts.payload.target_of`); the hook runs the same
  read-only diagnosis as ``kvpilot diagnose --prometheus``, with its predictions
  (:func:`kvpilot.advice.run.predict_for_alert`: the replay and what-ifs within 10 s) and
  answers ``200`` with ``{"sender", "receiver", "results": [{"fingerprint", "alertname", "status",
  "target", "cached", "change", "predicted_effect", "diagnosis": <diagnose -o json> | null,
  "error": str | null}]}``. Resolved
  alerts are acknowledged (``"diagnosis": null``) without work. ``400`` not JSON, ``401`` missing or
  wrong credentials, ``408`` a body slower than its deadline, ``413`` a body above the size limit or
  with more alerts than the limit, ``422`` JSON of neither shape, ``429`` no diagnosis could start
  within the diagnoses-per-minute limit (``Retry-After``), ``500`` a bug (one log line, counted).
- ``GET /healthz``: ``ok``. ``GET /metrics``: the hook's own counters (its own registry), on the same
  port or a separate one, open or behind the same credentials.

Every string that leaves the hook (the answer, each sink, the log) is one line with secrets redacted
and control characters removed (:mod:`kvpilot.text.safe`), the diagnosis is the redacted document
``diagnose -o json`` prints (:func:`kvpilot.diagnose.report.safe_report`), and no URL carries
credentials.

Bounded everywhere (each bound a :class:`HookConfig` field and a command-line option, docs/security.md):
connections open at once (more are answered 503 and closed); a request's headers must arrive within
the header deadline (also the idle time of a kept-alive connection: aiohttp's ``keepalive_timeout``
runs from the connection's start and after each answer), its body within the body deadline and the
size limit; the alerts per body; new diagnoses per minute (a token bucket); diagnoses at once (a
semaphore held until the diagnosis' own thread has really ended, however it ends; a target whose diagnosis still
runs past its answer gets no second one); each diagnosis' time (its Prometheus and
Kubernetes reads end at the deadline, so no work outlives its answer); the sinks' time. Alerts naming
the same target (namespace, pod, server, model) share one diagnosis, in flight and in the cache for
``cache_seconds``; an answer for one target is never served for another. Label values reach PromQL
only as quoted, escaped matchers (kvpilot.diagnose.sources.prometheus), after :func:`target_of` has
checked them; with ``allowed_namespaces`` an alert about another namespace is refused before any read.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import hmac
import json
import logging
import math
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kvpilot.advice.run import predict_for_alert
from kvpilot.alerts.admission import DiagnosisKey, RateLimit, namespace_allowed
from kvpilot.alerts.payload import (
    MAX_ALERTS,
    Alert,
    BodyError,
    Notification,
    PayloadShapeError,
    Target,
    TargetError,
    TooManyAlertsError,
    decode_body,
    parse_notification,
    target_of,
)
from kvpilot.alerts.result import AlertResult, Diagnosed
from kvpilot.diagnose.model import Report
from kvpilot.diagnose.report import safe_report
from kvpilot.diagnose.run import Options
from kvpilot.diagnose.sources import SourceError
from kvpilot.diagnose.sources.http import split_credentials
from kvpilot.text.numbers import fig
from kvpilot.text.safe import one_line

log = logging.getLogger("kvpilot.alert_hook")

#: default body limit: Alertmanager sends every alert of a group in one body (``max_alerts`` 0 =
#: all); 1 MiB holds several hundred alerts with their annotations
MAX_BODY_BYTES = 1 << 20
#: default new diagnoses a minute: each sends ``len(plan(...))`` Prometheus queries (a fixed number, whatever the
#: targets: kvpilot.diagnose.sources.prometheus), so one a second at most
MAX_DIAGNOSES_PER_MINUTE = 60
#: default connections open at once (a slow client holds one until its header or body deadline)
MAX_CONNECTIONS = 256
#: seconds a refused request's unread body is still read and discarded before the connection closes
#: (so the sender can read the refusal; aiohttp's default is 10 s, which a slow sender fills)
LINGER_SECONDS = 1.0
#: characters kept of a string a sender wrote (a label value, a fingerprint) where it is echoed
_ECHO_CHARS = 1024
#: paths whose requests ``kvpilot_alert_hook_requests_total`` does not count (probes and scrapes)
_UNCOUNTED = ("/healthz", "/metrics")


class Sink(Protocol):
    """Where a diagnosis goes besides the HTTP answer."""

    name: str

    async def emit(self, alert: Alert, target: Target, result: AlertResult) -> None:
        """Deliver one result (raise on failure: the hook logs it and carries on)."""


@dataclass
class HookConfig:
    """The receiver's settings (the command line of ``kvpilot alert-hook``).

    ``prometheus`` may carry userinfo (``http://user:password@host``): it is taken out and sent as
    basic auth unless ``prometheus_authorization`` is given; the URL is kept and shown without it.
    Durations are seconds; ``allowed_namespaces`` are kopf namespace patterns (empty: any namespace).
    """

    prometheus: str
    bearer_token: str | None = field(default=None, repr=False)
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)
    insecure_no_auth: bool = False
    prometheus_authorization: str | None = field(default=None, repr=False)
    window_seconds: float = 300.0
    cache_seconds: float = 300.0
    max_concurrency: int = 4
    timeout_seconds: float = 30.0
    sink_timeout_seconds: float = 10.0
    max_body_bytes: int = MAX_BODY_BYTES
    max_alerts: int = MAX_ALERTS
    max_diagnoses_per_minute: int = MAX_DIAGNOSES_PER_MINUTE
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 10.0
    max_connections: int = MAX_CONNECTIONS
    allowed_namespaces: Sequence[str] = ()
    metrics_auth: bool = False
    use_kube: bool = False
    kubeconfig: str | None = None
    sinks: Sequence[Sink] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (self.bearer_token or self.basic_auth or self.insecure_no_auth):
            raise ValueError("auth: give a bearer token or basic auth, or --insecure-no-auth")
        self.prometheus, from_url = split_credentials(self.prometheus)
        self.prometheus_authorization = self.prometheus_authorization or from_url
        for name in ("max_concurrency", "max_alerts", "max_diagnoses_per_minute", "max_connections"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1")


class HookMetrics:
    """The hook's own series, on a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "kvpilot_alert_hook_requests",
            "Webhook requests by HTTP status (malformed requests and 500s included).",
            ["code"],
            registry=self.registry,
        )
        self.alerts = Counter(
            "kvpilot_alert_hook_alerts", "Alerts received by status.", ["status"], registry=self.registry
        )
        self.diagnoses = Counter(
            "kvpilot_alert_hook_diagnoses", "Diagnoses run, by verdict.", ["verdict"], registry=self.registry
        )
        self.cache_hits = Counter(
            "kvpilot_alert_hook_cache_hits",
            "Alerts answered from the cache of their target's diagnosis.",
            registry=self.registry,
        )
        self.errors = Counter(
            "kvpilot_alert_hook_errors", "Alerts not diagnosed, by reason.", ["reason"], registry=self.registry
        )
        self.latency = Histogram(
            "kvpilot_alert_hook_diagnosis_duration_seconds",
            "Wall time of one diagnosis (seconds), until its work has ended.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "kvpilot_alert_hook_diagnoses_in_flight",
            "Diagnoses running now (a timed-out one counts until its reads have ended).",
            registry=self.registry,
        )
        self.connections_refused = Counter(
            "kvpilot_alert_hook_connections_refused",
            "Connections answered 503 and closed at once: --max-connections were open.",
            registry=self.registry,
        )


def _authorized(header: str | None, config: HookConfig) -> bool:
    """Constant-time check of ``Authorization`` (``hmac.compare_digest`` on bytes).

    aiohttp decodes header bytes as UTF-8 with ``surrogateescape``: they are encoded back the same
    way, so a header that is not UTF-8 compares (unequal) instead of raising.
    """
    if config.insecure_no_auth:
        return True
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    given = value.strip().encode("utf-8", "surrogateescape")
    if scheme.lower() == "bearer" and config.bearer_token:
        return hmac.compare_digest(given, config.bearer_token.encode())
    if scheme.lower() == "basic" and config.basic_auth:
        try:
            decoded = base64.b64decode(given, validate=True)
        except (binascii.Error, ValueError):
            return False
        expected = f"{config.basic_auth[0]}:{config.basic_auth[1]}".encode()
        return hmac.compare_digest(decoded, expected)
    return False


_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="kvpilot-alert-hook"'}


class _ErrorResponse(web.Response):
    """A JSON ``{"error": message}`` answer that keeps ``message`` for its log line."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None) -> None:
        super().__init__(
            text=json.dumps({"error": message}), status=status, headers=headers, content_type="application/json"
        )
        self.log_reason = message


def _error(status: int, message: str, close: bool = False, headers: dict[str, str] | None = None) -> _ErrorResponse:
    """A JSON ``{"error": message}`` answer; ``close``: end the connection after it (a body left unread)."""
    response = _ErrorResponse(status, message, headers)
    if close:
        response.force_close()
    return response


def _safe_text(text: str, limit: int | None) -> str:
    if not text.isprintable():
        text = text.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate becomes "?"
    return one_line(text, limit)


def safe_json(value: Any, limit: int | None = None) -> Any:
    """``value`` (decoded JSON) with every string, keys included, made safe to print and forward: one
    line, secrets redacted, control and bidirectional characters removed (:func:`kvpilot.text.safe.one_line`),
    lone surrogates replaced; each cut to ``limit`` characters when given.
    """
    if isinstance(value, str):
        return _safe_text(value, limit)
    if isinstance(value, dict):
        return {(_safe_text(k, limit) if isinstance(k, str) else k): safe_json(v, limit) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [safe_json(v, limit) for v in value]
    return value


def safe_alert(alert: Alert) -> Alert:
    """``alert`` as the sinks see it: labels, annotations and fingerprint through :func:`safe_json`."""
    return dataclasses.replace(
        alert,
        labels=safe_json(dict(alert.labels), _ECHO_CHARS),
        annotations=safe_json(dict(alert.annotations), _ECHO_CHARS),
        fingerprint=_safe_text(alert.fingerprint, _ECHO_CHARS),
    )


class _Refused(asyncio.Protocol):
    """A connection beyond ``max_connections``: answered 503 at once and closed, nothing read."""

    _BODY = b'{"error": "too many open connections"}'
    _ANSWER = (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_BODY), _BODY)
    )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if isinstance(transport, asyncio.WriteTransport):
            transport.write(self._ANSWER)
        transport.close()


class _QuietRequestHandler(RequestHandler):
    """aiohttp's connection handler answering a request it cannot parse without quoting it.

    aiohttp answers a malformed request line or header (a NUL or a control character in a value, a name with
    a space) with a 400 whose body is its parser's message, and that message quotes the offending line: an
    ``Authorization`` credential on it, or beside it, went back to the client and to any proxy logging
    answers. Here such an answer is ``{"error": "malformed request: HTTP 400 Bad Request"}``: the status and
    its phrase, no request bytes. The log line is :class:`_HttpLog`'s.
    """

    def handle_error(
        self, request: Any, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        """The parent's answer (log, connection closed) with a body naming only the status."""
        super().handle_error(request, status, exc, message)  # logs through _HttpLog and checks nothing was sent
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Error"
        what = "malformed request: " if status < 500 else ""
        response = _error(status, f"{what}HTTP {status} {phrase}")
        response.force_close()
        return response


class _HttpLog(logging.LoggerAdapter[logging.Logger]):
    """The logger aiohttp's connection handlers write to: its refusals of malformed requests in one line.

    aiohttp logs a request line or header it cannot parse with a traceback whose message quotes the
    offending bytes: a header with a NUL is logged whole, bearer token included. Here each becomes
    ``malformed request from ADDR: HTTP 400: <the parser's reason>`` (its first line, no bytes, no
    traceback) and is counted in ``kvpilot_alert_hook_requests_total``; a broken connection is one
    line naming the exception's type. Other records pass unchanged.
    """

    def __init__(self, count: Callable[[int], None]) -> None:
        super().__init__(logging.getLogger("kvpilot.alert_hook.http"), {})
        self.count = count

    def log(self, level: int, msg: object, *args: Any, exc_info: Any = None, **kwargs: Any) -> None:
        """``Logger.log`` with an exception's record rewritten (see the class docstring)."""
        exc = exc_info if isinstance(exc_info, BaseException) else None
        if exc_info is True:
            exc = sys.exc_info()[1]
        elif isinstance(exc_info, tuple) and len(exc_info) == 3:
            exc = exc_info[1]
        if exc is None:
            self.logger.log(level, msg, *args, exc_info=exc_info, **kwargs)
            return
        remote = one_line(args[0] if args else "?", 64)
        if isinstance(exc, HttpProcessingError):
            code = exc.code or 400
            self.count(code)
            reason = one_line((exc.message or type(exc).__name__).split("\n", 1)[0].rstrip(": "), 120)
            self.logger.warning("malformed request from %s: HTTP %d: %s", remote, code, reason)
        else:
            self.logger.warning("connection from %s: %s", remote, type(exc).__name__)


class _NotDiagnosedError(Exception):
    """A diagnosis that gave no document: ``reason`` (the errors counter's label) and a message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _run_diagnosis(
    diagnose: Callable[[Options], Report],
    opts: Options,
    loop: asyncio.AbstractEventLoop,
    settle: Callable[[Report | None, BaseException | None], None],
) -> None:
    """A diagnosis thread's body: ``diagnose(opts)``, then ``settle(report, error)`` on ``loop`` whatever happened
    (a ``BaseException`` that would end the thread becomes a ``RuntimeError`` naming it).
    """
    report: Report | None = None
    error: BaseException | None = None
    try:
        report = diagnose(opts)
    except Exception as exc:  # noqa: BLE001 - the caller names it
        error = exc
    except BaseException as exc:  # noqa: BLE001 - a thread's death is the diagnosis' error, never a lost slot
        error = RuntimeError(f"the diagnosis thread ended by {type(exc).__name__}")
    finally:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits, nothing to free
            loop.call_soon_threadsafe(settle, report, error)


class AlertHook:
    """The receiver's state: config, cache, bounds, metrics; :meth:`app` is the aiohttp app."""

    def __init__(self, config: HookConfig, diagnose: Callable[[Options], Report] = predict_for_alert) -> None:
        self.config = config
        self.metrics = HookMetrics()
        self._diagnose = diagnose
        self._slots = asyncio.Semaphore(config.max_concurrency)
        #: targets whose diagnosis thread still runs (its answer may have been given up): no second one starts
        self._running: dict[DiagnosisKey, threading.Thread] = {}
        self._rate = RateLimit(config.max_diagnoses_per_minute, time.monotonic())
        self._cache: dict[DiagnosisKey, tuple[float, Diagnosed]] = {}
        self._in_flight: dict[DiagnosisKey, asyncio.Task[Diagnosed]] = {}
        self.http_log = _HttpLog(lambda code: self.metrics.requests.labels(str(code)).inc())

    def app(self, metrics: bool = True) -> web.Application:
        """The aiohttp application (``metrics``: with ``GET /metrics``)."""
        app = web.Application(client_max_size=self.config.max_body_bytes, middlewares=[self._guard])
        app.router.add_post("/alerts", self.handle_alerts)
        app.router.add_post("/", self.handle_alerts)
        app.router.add_get("/healthz", self.handle_healthz)
        if metrics:
            app.router.add_get("/metrics", self.handle_metrics)
        return app

    def metrics_app(self) -> web.Application:
        """``GET /metrics`` and ``GET /healthz`` alone, for a port of their own."""
        app = web.Application(client_max_size=4096, middlewares=[self._guard])
        app.router.add_get("/metrics", self.handle_metrics)
        app.router.add_get("/healthz", self.handle_healthz)
        return app

    @web.middleware
    async def _guard(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Count and log every answer in one line, 500s included; a bug answers 500 without a traceback."""
        try:
            response = await handler(request)
        except web.HTTPException as exc:  # the router's 404 and 405
            self._account(request, exc.status, exc.reason)
            raise
        except Exception as exc:  # any bug ends as one counted, logged 500, never a traceback
            log.debug("internal error", exc_info=True)
            response = _error(500, "internal error")
            response.log_reason = f"internal error: {type(exc).__name__}: {one_line(exc, 200)}"
        self._account(request, response.status, getattr(response, "log_reason", ""))
        return response

    def _account(self, request: web.Request, status: int, reason: str) -> None:
        path = one_line(request.path, 80)
        if request.path not in _UNCOUNTED:
            self.metrics.requests.labels(str(status)).inc()
        if status >= 400:
            level = logging.ERROR if status >= 500 else logging.INFO
            remote = one_line(request.remote or "?", 64)
            log.log(level, f"{one_line(request.method, 16)} {path} from {remote}: {status} {one_line(reason, 300)}")

    async def handle_healthz(self, _request: web.Request) -> web.Response:
        """``GET /healthz``: the process serves."""
        return web.Response(text="ok\n")

    async def handle_metrics(self, request: web.Request) -> web.Response:
        """``GET /metrics``: the hook's own series (behind the webhook's credentials with ``metrics_auth``)."""
        if self.config.metrics_auth and not _authorized(request.headers.get("Authorization"), self.config):
            return _error(401, "unauthorized", headers=_CHALLENGE)
        return web.Response(body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def handle_alerts(self, request: web.Request) -> web.Response:
        """``POST /alerts``: authenticate, read, parse, diagnose each firing alert, answer."""
        cfg = self.config
        if not _authorized(request.headers.get("Authorization"), cfg):
            return _error(401, "unauthorized", close=True, headers=_CHALLENGE)
        if request.content_length is not None and request.content_length > cfg.max_body_bytes:
            return _error(413, f"body: larger than {cfg.max_body_bytes} bytes", close=True)
        try:
            raw = await asyncio.wait_for(request.read(), cfg.body_timeout_seconds)
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"body: larger than {cfg.max_body_bytes} bytes", close=True)
        except TimeoutError:
            return _error(408, f"body: not received within {fig(cfg.body_timeout_seconds, 3)} s", close=True)
        try:
            notification = parse_notification(decode_body(raw), cfg.max_alerts)
        except BodyError as exc:
            return _error(400, str(exc))
        except TooManyAlertsError as exc:
            return _error(413, str(exc))
        except PayloadShapeError as exc:
            return _error(422, str(exc))
        return await self._answer(notification)

    async def _answer(self, notification: Notification) -> web.Response:
        """Plan every alert, take the new diagnoses from the rate limit, run them, answer and emit."""
        cfg = self.config
        planned: list[tuple[Alert, AlertResult, Target | None, DiagnosisKey | None]] = []
        tasks: dict[DiagnosisKey, asyncio.Task[Diagnosed]] = {}  # diagnoses in flight the alerts wait for
        cached: dict[DiagnosisKey, Diagnosed] = {}
        new: dict[DiagnosisKey, Target] = {}  # diagnoses to start, in the alerts' order
        busy: set[DiagnosisKey] = set()  # targets whose earlier diagnosis still runs past its answer
        for alert in notification.alerts:
            self.metrics.alerts.labels(alert.status).inc()
            result, target, key = self._plan(alert)
            planned.append((alert, result, target, key))
            if key is None or target is None or key in tasks or key in cached or key in new:
                continue
            if key in self._in_flight:
                tasks[key] = self._in_flight[key]
            elif (doc := self._cached(key)) is not None:
                cached[key] = doc
            elif key in self._running:
                busy.add(key)
            else:
                new[key] = target
        granted = self._rate.take(len(new), time.monotonic())
        if new and not granted:
            self.metrics.errors.labels("rate_limit").inc(sum(1 for *_, key in planned if key in new))
            wait = max(1, math.ceil(self._rate.retry_after(time.monotonic())))
            return _error(
                429,
                f"more than {cfg.max_diagnoses_per_minute} diagnoses in the last minute "
                f"(--max-diagnoses-per-minute); retry after {wait} s",
                headers={"Retry-After": str(wait)},
            )
        refused = set(list(new)[granted:])
        for key in list(new)[:granted]:
            task = asyncio.create_task(self._diagnosis(key, new[key]))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved even if nobody waits
            tasks[key] = self._in_flight[key] = task
        results = await asyncio.gather(
            *(self._finish(a, r, t, k, tasks, cached, refused, busy) for a, r, t, k in planned)
        )
        answer = {"sender": notification.sender, "receiver": _safe_text(notification.receiver, _ECHO_CHARS)}
        return web.json_response(
            {**answer, "results": [r.to_json() for r in results]}, dumps=lambda obj: json.dumps(obj, allow_nan=False)
        )

    def _plan(self, alert: Alert) -> tuple[AlertResult, Target | None, DiagnosisKey | None]:
        """The alert's result skeleton, its target and the key of the diagnosis it needs (None: no work)."""
        result = AlertResult(
            _safe_text(alert.fingerprint, _ECHO_CHARS), _safe_text(alert.name, _ECHO_CHARS), alert.status
        )
        try:
            target = target_of(alert)
        except TargetError as exc:
            self.metrics.errors.labels("target").inc()
            result.error = _safe_text(str(exc), None)
            return result, None, None
        result.target = Target(**safe_json(target.to_json()))
        allowed = self.config.allowed_namespaces
        if allowed and not target.namespace:
            self.metrics.errors.labels("namespace").inc()
            result.error = "label namespace: required: this hook diagnoses only the namespaces it is allowed"
            return result, target, None
        if not namespace_allowed(target.namespace, allowed):
            self.metrics.errors.labels("namespace").inc()
            result.error = (
                f"namespace {target.namespace}: not among the namespaces this hook diagnoses (--allowed-namespace)"
            )
            return result, target, None
        if not alert.firing:
            return result, target, None
        key = DiagnosisKey(
            target.namespace,
            target.pod,
            target.server,
            target.model_name,
            self.config.window_seconds,
            self.config.use_kube,
        )
        return result, target, key

    def _cached(self, key: DiagnosisKey) -> Diagnosed | None:
        entry = self._cache.get(key)
        if entry is None:
            return None
        if entry[0] <= time.monotonic():
            del self._cache[key]
            return None
        return entry[1]

    async def _finish(
        self,
        alert: Alert,
        result: AlertResult,
        target: Target | None,
        key: DiagnosisKey | None,
        tasks: dict[DiagnosisKey, asyncio.Task[Diagnosed]],
        cached: dict[DiagnosisKey, Diagnosed],
        refused: set[DiagnosisKey],
        busy: set[DiagnosisKey],
    ) -> AlertResult:
        """The alert's result: its target's diagnosis (cached, shared or new) or why there is none; emitted."""
        if key in busy:
            self.metrics.errors.labels("busy").inc()
            result.error = (
                "not diagnosed: this target's previous diagnosis is still running past its answer's deadline; "
                "no second one starts until it ends"
            )
        elif key in refused:
            self.metrics.errors.labels("rate_limit").inc()
            result.error = (
                f"not diagnosed: more than {self.config.max_diagnoses_per_minute} diagnoses in the last "
                "minute (--max-diagnoses-per-minute)"
            )
        elif key in cached:
            self.metrics.cache_hits.inc()
            result.cached, result.diagnosis = True, cached[key]
        elif key in tasks:
            try:
                result.diagnosis = await asyncio.shield(tasks[key])
            except _NotDiagnosedError as exc:
                self.metrics.errors.labels(exc.reason).inc()
                result.error = _safe_text(str(exc), None)
        if target is not None:
            await self._emit(safe_alert(alert), target, result)
        return result

    async def _diagnosis(self, key: DiagnosisKey, target: Target) -> Diagnosed:
        """One diagnosis of ``key`` within ``timeout_seconds`` (waiting for a slot included); its
        document is cached for ``cache_seconds``.

        The slot is held until the diagnosis' thread ends, not until its answer is given up: the
        thread's Prometheus and Kubernetes reads end at the deadline (``Options.deadline``), so a
        timed-out diagnosis frees its slot moments after its answer and ``max_concurrency`` counts
        what really runs.

        Raises:
            _NotDiagnosedError: no slot in time, no answer in time, an unreadable source, a bug.
        """
        cfg = self.config
        loop = asyncio.get_running_loop()
        deadline = loop.time() + cfg.timeout_seconds
        try:
            try:
                await asyncio.wait_for(self._slots.acquire(), cfg.timeout_seconds)
            except TimeoutError:
                raise _NotDiagnosedError(
                    "timeout",
                    f"diagnosis: not started within {fig(cfg.timeout_seconds, 3)} s: "
                    f"{cfg.max_concurrency} diagnoses were running (--max-concurrency)",
                ) from None
            remaining = deadline - loop.time()
            if remaining <= 0:
                self._slots.release()
                raise _NotDiagnosedError("timeout", f"diagnosis: no answer within {fig(cfg.timeout_seconds, 3)} s")
            # the reads end a little before the answer is given up, so a slow source reads as one
            reads = remaining - min(1.0, 0.1 * remaining)
            opts = Options(
                prometheus=cfg.prometheus,
                prometheus_authorization=cfg.prometheus_authorization,
                window_seconds=cfg.window_seconds,
                namespace=target.namespace,
                pod=target.pod,
                server=target.server,
                model_name=target.model_name,
                use_kube=cfg.use_kube,
                kubeconfig=cfg.kubeconfig,
                timeout=min(10.0, reads),
                deadline=reads,
            )
            work, thread, release = self._start(key, opts)
            try:
                report = await asyncio.wait_for(asyncio.shield(work), remaining)
            except TimeoutError:
                if not thread.is_alive():  # the thread died without settling: its slot is free all the same
                    release()
                raise _NotDiagnosedError(
                    "timeout", f"diagnosis: no answer within {fig(cfg.timeout_seconds, 3)} s"
                ) from None
            except SourceError as exc:
                raise _NotDiagnosedError("source", f"diagnosis: {exc}") from None
            except Exception as exc:  # noqa: BLE001 - a bug in one diagnosis is that alert's error, logged once
                log.error(f"diagnosis of {key}: internal error: {type(exc).__name__}: {one_line(exc, 200)}")
                raise _NotDiagnosedError("internal", f"diagnosis: internal error ({type(exc).__name__})") from None
            safe = safe_report(report)
            diagnosed = Diagnosed(safe, safe_json(safe.to_json()))
            for d in safe.targets:
                self.metrics.diagnoses.labels(d.verdict).inc()
            if cfg.cache_seconds > 0:
                self._cache[key] = (time.monotonic() + cfg.cache_seconds, diagnosed)
                self._evict()
            return diagnosed
        finally:
            self._in_flight.pop(key, None)

    def _start(
        self, key: DiagnosisKey, opts: Options
    ) -> tuple[asyncio.Future[Report], threading.Thread, Callable[[], None]]:
        """Run one diagnosis on a thread of its own holding a slot (taken by the caller).

        Returns its future, the thread and ``release``, which frees the slot once, whoever calls it first: the
        thread's end (any exception, ``BaseException`` included, settles the future and releases), or the
        caller that finds the thread dead without having settled. While the thread runs, ``key`` is in
        ``_running`` and no second diagnosis of that target starts.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Report] = loop.create_future()
        started = time.perf_counter()
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self._running.pop(key, None)
            self._slots.release()
            self.metrics.in_flight.dec()
            self.metrics.latency.observe(time.perf_counter() - started)

        def settle(report: Report | None, error: BaseException | None) -> None:
            if not future.done():
                if error is not None:
                    future.set_exception(error)
                elif report is not None:
                    future.set_result(report)
            if not future.cancelled():
                future.exception()  # retrieved here: an answer given up never leaves it "never retrieved"
            release()

        thread = threading.Thread(
            target=_run_diagnosis,
            args=(self._diagnose, opts, loop, settle),
            name=f"kvpilot-diagnose-{key.pod or key.server or '-'}",
            daemon=True,
        )
        self._running[key] = thread
        self.metrics.in_flight.inc()
        thread.start()
        return future, thread, release

    def _evict(self) -> None:
        now = time.monotonic()
        for key in [k for k, (expires, _) in self._cache.items() if expires <= now]:
            del self._cache[key]

    async def _emit(self, alert: Alert, target: Target, result: AlertResult) -> None:
        async def one(sink: Sink) -> None:
            try:
                await asyncio.wait_for(sink.emit(alert, target, result), self.config.sink_timeout_seconds)
            except Exception as exc:  # noqa: BLE001 - a failing sink never fails the answer; it is logged
                self.metrics.errors.labels(f"sink_{sink.name}").inc()
                log.warning(f"sink {sink.name}: {type(exc).__name__}: {one_line(exc, 200)}")

        await asyncio.gather(*(one(s) for s in self.config.sinks))

    def close(self) -> None:
        """Nothing to release: each diagnosis runs on a daemon thread of its own that ends at its deadline."""


class HookServer:
    """A listening hook: ``addresses`` (one ``(host, port)`` per socket, the webhook's first) and
    :meth:`cleanup`, which stops it.
    """

    def __init__(self, hook: AlertHook) -> None:
        self.hook = hook
        self.addresses: list[tuple[Any, ...]] = []
        self._runners: list[web.AppRunner] = []
        self._servers: list[asyncio.Server] = []

    async def listen(self, app: web.Application, host: str, port: int) -> tuple[Any, ...]:
        """Serve ``app`` on ``host:port`` (0: a free port) behind the connection cap and the header deadline."""
        cfg = self.hook.config
        runner = web.AppRunner(
            app,
            access_log=None,
            keepalive_timeout=cfg.header_timeout_seconds,
            lingering_time=LINGER_SECONDS,
            logger=self.hook.http_log,
            shutdown_timeout=5.0,
        )
        await runner.setup()
        self._runners.append(runner)
        handlers = runner.server
        if handlers is None:  # setup() sets it
            raise RuntimeError("the alert hook's HTTP runner has no server after setup()")

        loop = asyncio.get_running_loop()

        def connection() -> asyncio.BaseProtocol:
            if len(handlers.connections) >= cfg.max_connections:
                self.hook.metrics.connections_refused.inc()
                return _Refused()
            # what handlers() makes, with error answers that quote no request bytes (the runner's own kwargs)
            return _QuietRequestHandler(handlers, loop=loop, **handlers._kwargs)

        server = await asyncio.get_running_loop().create_server(connection, host, port, reuse_address=True)
        self._servers.append(server)
        address: tuple[Any, ...] = server.sockets[0].getsockname()
        self.addresses.append(address)
        return address

    async def cleanup(self) -> None:
        """Stop listening, close the connections, release the diagnosis threads."""
        for server in self._servers:
            server.close()
        for runner in self._runners:
            await runner.cleanup()
        for server in self._servers:
            await server.wait_closed()
        self.hook.close()


async def serve(
    hook: AlertHook, host: str, port: int, metrics_host: str | None = None, metrics_port: int | None = None
) -> HookServer:
    """Start ``hook`` on ``host:port`` (``port`` 0: a free one); ``/metrics`` on ``metrics_host:metrics_port``
    instead when given. Returns the :class:`HookServer` (``cleanup()`` stops it).
    """
    served = HookServer(hook)
    separate = metrics_port is not None
    await served.listen(hook.app(metrics=not separate), host, port)
    if metrics_port is not None:
        await served.listen(hook.metrics_app(), metrics_host or host, metrics_port)
    return served
