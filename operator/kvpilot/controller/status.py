"""The status writer: the one path by which the operator's handlers change a VLLMServer's ``status``.

:meth:`StatusWriter.write` takes the complete status a handler computed (:mod:`kvpilot.controller.logic`,
a :class:`~kvpilot.api.models.VLLMServerStatus`: the CRD's status schema comes from the same model),
makes it safe to publish (:func:`~kvpilot.controller.logic.safe_status`), validates it again (fields
set after construction), diffs it with the stored status field by field
(:func:`~kvpilot.controller.logic.status_patch`) and sends the difference in one JSON merge patch of
``/status`` through the operator's client (:class:`~kvpilot.controller.kube.Kube`); the Events of the change
(:func:`~kvpilot.controller.logic.status_events`) are posted once it is stored. kopf writes only its
own record (``status.kopf``), in its own patch.

A refused write is sent again with a backoff (:class:`StatusBackoff`) until it lands: a 409, a 429, a
5xx, a connection that failed, and a 404 while the server still exists (read again after each 404:
a server deleted or replaced by one of the same name ends the write, with no Events). So a new
server's first status lands whatever its pod does next, a pod that stays Pending included; any other
refusal (400, 403, 422: the request itself is wrong) is raised at once.

:class:`StatusLedger` remembers which pod state each server's status was computed from, so a pod
event carrying exactly that state needs no work (the ADDED of the pod a reconcile just created).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import kopf
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from kvpilot.api.models import Condition, VLLMServerStatus, checked_status
from kvpilot.api.objects import JsonObject, Pod, VLLMServerObject
from kvpilot.controller import logic
from kvpilot.controller.kube import Kube

#: HTTP codes of a refused status write that is sent again (a 404 only while the server still exists):
#: a conflict, throttling, the API server's own failures (apimachinery ``metav1.StatusReason``).
RETRIED_CODES = frozenset({404, 409, 429, 500, 502, 503, 504})

#: ``(namespace, name)`` of a VLLMServer.
Key = tuple[str, str]
#: A pod state's identity: ``(metadata.uid, metadata.resourceVersion)``.
PodState = tuple[str | None, str | None]


def pod_state(pod: Pod) -> PodState:
    """A pod state's identity: ``(metadata.uid, metadata.resourceVersion)``."""
    meta = pod.get("metadata") or {}
    return meta.get("uid"), meta.get("resourceVersion")


def post(obj: VLLMServerObject, event: logic.Event) -> None:
    """Post ``event`` on ``obj`` through kopf's Event queue (kopf reads only its apiVersion, kind and metadata)."""
    # kopf annotates ``objs`` as its Body view; any mapping works (bodies.build_object_reference)
    kopf.event(obj, type=event.type, reason=event.reason, message=event.message)  # type: ignore[arg-type]


@dataclass(frozen=True)
class StatusBackoff:
    """Seconds between the attempts of a refused status write: ``min(cap, base * 2**attempt)``, at least a
    429's ``Retry-After``; no limit on the attempts (the write lands, or its server is gone).
    """

    base_seconds: float = 0.5
    cap_seconds: float = 10.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds before attempt ``attempt + 1`` (``attempt`` 0-based)."""
        delay = min(self.cap_seconds, self.base_seconds * 2.0 ** min(attempt, 62))
        return max(delay, min(retry_after, self.cap_seconds)) if retry_after is not None else delay


def _retry_after(exc: ApiException) -> float | None:
    """The ``Retry-After`` seconds of a refusal, when it carries a number."""
    value = (exc.headers or {}).get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class StatusLedger:
    """Which pod state each server's stored status was computed from (see the module's docstring);
    thread-safe: handler threads write it, kopf's loop reads it.
    """

    def __init__(self) -> None:
        self._from: dict[Key, PodState] = {}
        self._lock = threading.Lock()

    def stored(self, key: Key, pod: Pod | None) -> None:
        """The server's status is now the one computed from ``pod``'s state (None: from no pod)."""
        with self._lock:
            if pod is None:
                self._from.pop(key, None)
            else:
                self._from[key] = pod_state(pod)

    def forget(self, key: Key) -> None:
        """Nothing is known about the server's stored status (it failed, or its pod was deleted)."""
        with self._lock:
            self._from.pop(key, None)

    def is_from(self, key: Key, pod: Pod) -> bool:
        """Whether the server's status was computed from exactly this pod state."""
        with self._lock:
            return self._from.get(key) == pod_state(pod)


class StatusWriter:
    """Writes statuses (see the module's docstring) through ``kube`` and records them in ``ledger``."""

    def __init__(
        self,
        kube: Kube,
        ledger: StatusLedger | None = None,
        *,
        backoff: StatusBackoff = StatusBackoff(),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.kube = kube
        self.ledger = ledger or StatusLedger()
        self.backoff = backoff
        self._sleep = sleep

    def write(
        self,
        server: logic.Server,
        new: VLLMServerStatus,
        logger: logging.Logger,
        *,
        pod: Pod | None = None,
        created: str | None = None,
        kv: tuple[Condition, str | None] | None = None,
    ) -> logic.Server:
        """Make ``server``'s status ``new`` (complete; fields it lacks are removed but
        :data:`~kvpilot.controller.logic.KEPT_FIELDS` it did not set); post its Events; return the server
        as stored (``server`` itself when nothing changed, or when the server is gone).

        Args:
            server: the VLLMServer the status was computed from (its stored ``status`` is the old one).
            new: the status.
            logger: where a phase transition and a refused write are logged.
            pod: the pod state ``new`` was computed from (recorded in the ledger once stored).
            created: what the reconcile just created, said in the transition's Event
                (:func:`logic.status_events`).
            kv: ``(KVCapacity condition, warning)`` of a pre-flight just run: a Warning Event when it
                warns and the condition was not False before (:func:`logic.kv_warning_event`).

        Raises:
            kvpilot.api.models.StatusError: ``new`` does not fit the status model (a bug).
            ApiException: the API refused the write for a reason a retry cannot change (not in
                :data:`RETRIED_CODES`).
        """
        old = server.status
        document = checked_status(logic.safe_status(new))
        patch = logic.status_patch(old, document)
        events = logic.status_events(old, document, created) if patch else []
        if not patch and created:
            events = [logic.Event("Normal", "PodCreated", created)]
        kv_event = logic.kv_warning_event(old, *kv) if kv is not None else None
        if kv_event is not None:
            events.append(kv_event)
        key = (server.namespace, server.name)
        updated = server
        if patch:
            stored = self._send(server, patch, logger)
            if stored is None:  # the server is gone: nothing to record or announce
                self.ledger.forget(key)
                return server
            updated = logic.Server.of(stored)
            if logic.is_transition(old, document):
                logger.info(f"{server.name}: {old.phase} -> {document.phase} ({document.reason})")
        self.ledger.stored(key, pod)
        for event in events:
            post(server.body, event)
        return updated

    def _send(self, server: logic.Server, patch: JsonObject, logger: logging.Logger) -> VLLMServerObject | None:
        """Merge-patch ``/status`` until it lands (:data:`RETRIED_CODES`, transport errors); the server as
        patched, or None when it is gone (a 404, then a read that finds no server of its uid).
        """
        namespace, name = server.namespace, server.name
        attempt = 0
        while True:
            retry_after = None
            try:
                return self.kube.patch_server_status(namespace, name, patch)
            except ApiException as exc:
                if exc.status not in RETRIED_CODES:
                    raise
                if exc.status == 404 and not self._still_there(server):
                    return None
                refused = f"HTTP {exc.status} {exc.reason or ''}".strip()
                retry_after = _retry_after(exc)
            except urllib3.exceptions.HTTPError as exc:  # refused connection, timeout, cut answer
                refused = type(exc).__name__
            delay = self.backoff.delay(attempt, retry_after)
            logger.warning(f"{name}: the status write was refused ({refused}); sending it again in {delay:g} s")
            self._sleep(delay)
            attempt += 1

    def _still_there(self, server: logic.Server) -> bool:
        """Whether the server the status was computed for (its uid) still exists; True when that cannot
        be read now (the write is tried again, and so is this read).
        """
        try:
            stored = self.kube.read_server(server.namespace, server.name)
        except (ApiException, urllib3.exceptions.HTTPError):
            return True
        uid = server.uid
        return stored is not None and (uid is None or (stored.get("metadata") or {}).get("uid") == uid)
