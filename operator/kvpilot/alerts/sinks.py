"""Where ``kvpilot alert-hook`` sends each result besides its HTTP answer (each optional).

- :class:`LogSink` (default): one JSON object per line on stdout.
- :class:`GrafanaAnnotationSink`: ``POST <grafana>/api/annotations`` (Grafana HTTP API, "Annotations
  API": ``time`` in ms, ``tags``, ``text``), ``Authorization: Bearer <service-account token>``.
- :class:`KubeEventSink`: a core/v1 Event on the VLLMServer (``involvedObject`` kind VLLMServer), as
  ``kubectl describe vllmserver`` shows them. RBAC: ``get`` on ``vllmservers`` (its uid) and ``create``
  on ``events`` in the server's namespace.
- :class:`ForwardSink`: ``POST`` of the result (with the change and its predicted effect beside it) to a
  URL the hook's operator configured (never a URL from a payload).

Each sink is handed what the HTTP answer carries: the result with every string made safe
(:func:`kvpilot.alerts.hook.safe_json`: secrets redacted, one line, no control characters) and the
alert with its labels and annotations made safe the same way; a sink adds nothing a sender wrote.
A configured URL's userinfo is sent as basic auth and never appears in a message.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import sys
import time
from typing import Any, TextIO, cast

import aiohttp

from kvpilot.alerts.payload import Alert, Target
from kvpilot.alerts.result import AlertResult
from kvpilot.api import GROUP, KIND, PLURAL, VERSION
from kvpilot.diagnose.model import evidence_text
from kvpilot.diagnose.sources.http import split_credentials
from kvpilot.text.documents import JsonObject
from kvpilot.text.safe import one_line


def summary(alert: Alert, result: AlertResult) -> str:
    """One line: ``ALERT on ns/pod: verdict (severity, confidence): change CHANGE: EFFECT; first evidence``
    (the change and its effect when the diagnosis recommends one).
    """
    where = "/".join(x for x in (result.target.namespace, result.target.pod) if x) if result.target else ""
    head = f"{alert.name or 'alert'} on {where or 'unknown target'}"
    if not alert.firing:
        return f"{head}: resolved"
    if result.error:
        return f"{head}: not diagnosed: {result.error}"
    d = result.primary
    if d is None:
        return f"{head}: no diagnosis"
    evidence = evidence_text(d.evidence[0]) if d.evidence else ""
    change, effect = result.answer()
    what = f"change {change}: {effect}; " if change else ""
    confidence = round(d.confidence, 3)  # as -o json gives it
    return one_line(f"{head}: {d.verdict} ({d.severity}, confidence {confidence}): {what}{evidence}", 1000)


class LogSink:
    """JSON lines: ``{"time", "event", "alertname", "fingerprint", "status", "target", "verdict", "severity",
    "confidence", "change", "predicted_effect", "cached", "error"}`` (``change``/``predicted_effect``:
    :func:`answer`, null without a recommendation).
    """

    name = "log"

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream

    async def emit(self, alert: Alert, target: Target, result: AlertResult) -> None:
        """Write one line."""
        d = result.primary
        change, effect = result.answer()
        line = {
            "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
            "event": "diagnosis" if alert.firing else "resolved",
            "alertname": alert.name,
            "fingerprint": alert.fingerprint,
            "status": alert.status,
            "target": (result.target or target).to_json(),
            "verdict": d.verdict if d else None,
            "severity": d.severity if d else None,
            "confidence": round(d.confidence, 3) if d else None,
            "change": change,
            "predicted_effect": effect,
            "cached": result.cached,
            "error": result.error,
        }
        stream = self.stream or sys.stdout
        stream.write(json.dumps(line, allow_nan=False) + "\n")
        stream.flush()


class GrafanaAnnotationSink:
    """An annotation per diagnosed alert, tagged ``kvpilot``, the alert name and the verdict."""

    name = "grafana"

    def __init__(self, url: str, token: str, timeout: float = 10.0) -> None:
        self.url = split_credentials(url.rstrip("/"))[0] + "/api/annotations"  # the token authenticates
        self.token = token
        self.timeout = timeout

    async def emit(self, alert: Alert, _target: Target, result: AlertResult) -> None:
        """POST the annotation (firing alerts only)."""
        if not alert.firing:
            return
        d = result.primary
        body = {
            "time": int(time.time() * 1000),
            "tags": [t for t in ("kvpilot", alert.name, d.verdict if d else None) if t],
            "text": summary(alert, result),
        }
        headers = {"Authorization": f"Bearer {self.token}"}
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout)) as session,
            session.post(self.url, json=body, headers=headers) as resp,
        ):
            if resp.status >= 300:
                raise RuntimeError(f"{self.url} answered {resp.status}")


class ForwardSink:
    """POST ``{"alert": {...}, "result": {...}}`` to a configured URL."""

    name = "forward"

    def __init__(self, url: str, timeout: float = 10.0, headers: dict[str, str] | None = None) -> None:
        self.url, userinfo = split_credentials(url)
        self.timeout = timeout
        self.headers = ({"Authorization": userinfo} if userinfo else {}) | (headers or {})

    async def emit(self, alert: Alert, _target: Target, result: AlertResult) -> None:
        """POST the result."""
        change, effect = result.answer()
        body: JsonObject = {
            "alert": {"labels": {**alert.labels}, "status": alert.status},
            "change": change,
            "predicted_effect": effect,
            "result": result.to_json(),
        }
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout)) as session,
            session.post(self.url, json=body, headers=self.headers) as resp,
        ):
            if resp.status >= 300:
                raise RuntimeError(f"{self.url} answered {resp.status}")


class KubeEventSink:
    """A Kubernetes Event on the VLLMServer the alert is about (firing alerts with a known server)."""

    name = "kube-event"

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    def _post(self, alert: Alert, target: Target, result: AlertResult) -> None:
        import kubernetes.client

        custom = kubernetes.client.CustomObjectsApi(self.api_client)
        # the decoded JSON object; the client annotates custom-object reads as ``object``
        server = cast(
            dict[str, Any],
            custom.get_namespaced_custom_object(GROUP, VERSION, target.namespace, PLURAL, target.server),
        )
        d = result.primary
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{target.server}.", "namespace": target.namespace},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "name": target.server,
                "namespace": target.namespace,
                "uid": server["metadata"].get("uid"),
            },
            "reason": "AlertDiagnosed",
            "message": summary(alert, result)[:1024],
            "type": "Warning" if d is not None and d.severity in ("warning", "critical") else "Normal",
            "source": {"component": "kvpilot-alert-hook"},
            "reportingComponent": "kvpilot-alert-hook",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        core = kubernetes.client.CoreV1Api(self.api_client)
        # a dict body is serialised as is (ApiClient.sanitize_for_serialization); the annotation names CoreV1Event
        core.create_namespaced_event(target.namespace, event)  # type: ignore[arg-type]

    async def emit(self, alert: Alert, target: Target, result: AlertResult) -> None:
        """Create the Event (in a thread: the kubernetes client blocks)."""
        if not alert.firing or not (target.namespace and target.server) or result.diagnosis is None:
            return
        await asyncio.to_thread(self._post, alert, target, result)
