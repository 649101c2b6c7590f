"""The status writer: the one path by which the operator's handlers change a VLLMServer's ``status``.

:meth:`StatusWriter.write` takes the complete status a handler computed (:mod:`kvpilot.controller.logic`),
makes it safe to publish (:func:`~kvpilot.controller.logic.safe_status`), checks it against the
status model (:func:`kvpilot.api.models.status_document`: the CRD's status schema comes from the
same model), diffs it with the stored status (:func:`~kvpilot.controller.logic.status_patch`) and
sends the difference: in a JSON merge patch of ``/status`` of its own, or, for a new server, in
kopf's ``patch`` (kopf sends it with its own record of the handled spec in one request after the
handler returns). The Events of the change (:func:`~kvpilot.controller.logic.status_events`) are
posted once it is stored: at once after its own request; for kopf's patch, when the server's next
watch event shows it.

:class:`StatusLedger` remembers which pod state each server's status was computed from, so a pod
event carrying exactly that state needs no work (the ADDED of the pod a reconcile just created),
and which first statuses are still in kopf's patch: a pod event with work waits for it (at most
:data:`STATUS_IN_FLIGHT_TIMEOUT`) before it reads the server. kopf does not retry its patch on a
409 and takes a 404 for a deleted object: a pod event that then reads a server without the status
writes it itself, and the Events kopf's patch would have carried give way to that write's own
(docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from kvpilot.api.constants import STATUS_KOPF
from kvpilot.api.models import status_document
from kvpilot.controller import logic
from kvpilot.controller.kube import Kube

#: Longest a pod event waits for a new server's first status, handed to kopf's patch, to come back in a
#: watch event (kopf's own wait for its patch, ``settings.persistence.consistency_timeout``, is 5 s);
#: after it the pod event reads the server and writes the status itself when it is still missing.
STATUS_IN_FLIGHT_TIMEOUT = 5.0
#: Status fields a write leaves alone when the new status lacks them: kopf's own record, and the KV
#: pre-flight's numbers, which only the pre-flight sets (an explicit None removes them).
KEPT_FIELDS = (STATUS_KOPF, "preflight")

#: ``(namespace, name)`` of a VLLMServer.
Key = tuple[str, str]
#: A pod state's identity: ``(metadata.uid, metadata.resourceVersion)``.
PodState = tuple[str | None, str | None]


def pod_state(pod: Mapping[str, Any]) -> PodState:
    """A pod state's identity: ``(metadata.uid, metadata.resourceVersion)``."""
    meta = pod.get("metadata") or {}
    return meta.get("uid"), meta.get("resourceVersion")


def post(obj: Mapping[str, Any], event: logic.Event) -> None:
    """Post ``event`` on ``obj`` through kopf's Event queue (kopf reads only its apiVersion, kind and metadata)."""
    # kopf annotates ``objs`` as its Body view; any mapping works (bodies.build_object_reference)
    kopf.event(obj, type=event.type, reason=event.reason, message=event.message)  # type: ignore[arg-type]


@dataclass
class _InFlight:
    """A first status in kopf's patch: the server it was computed for, its Events, and who waits."""

    server: dict[str, Any]
    events: list[logic.Event]
    landed: concurrent.futures.Future[bool] = field(default_factory=concurrent.futures.Future)


class StatusLedger:
    """What each server's status was computed from (see the module's docstring); thread-safe: the
    handler threads write it, kopf's loop reads it and resolves the statuses in kopf's patch.
    """

    def __init__(self) -> None:
        self._from: dict[Key, PodState] = {}
        self._in_flight: dict[Key, _InFlight] = {}
        self._lock = threading.Lock()

    def stored(self, key: Key, pod: Mapping[str, Any] | None) -> None:
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

    def is_from(self, key: Key, pod: Mapping[str, Any]) -> bool:
        """Whether the server's status was computed from exactly this pod state."""
        with self._lock:
            return self._from.get(key) == pod_state(pod)

    def handed_to_kopf(
        self, key: Key, pod: Mapping[str, Any] | None, server: dict[str, Any], events: list[logic.Event]
    ) -> None:
        """A first status, computed from ``pod``, went into kopf's patch; its ``events`` wait for it to be stored."""
        self.stored(key, pod)
        with self._lock:
            self._in_flight[key] = _InFlight(server, events)

    def in_flight(self, key: Key) -> concurrent.futures.Future[bool] | None:
        """The future of the server's first status in kopf's patch (True once stored), or None."""
        with self._lock:
            flight = self._in_flight.get(key)
            return flight.landed if flight is not None else None

    def seen(self, key: Key, body: Mapping[str, Any], deleted: bool) -> None:
        """A watch event of the server (kopf's loop): a status in kopf's patch is stored once an event
        shows it (its ``specHash``): its Events are posted; a deleted server's are dropped.
        """
        with self._lock:
            flight = self._in_flight.get(key)
            shown = bool((body.get("status") or {}).get("specHash"))
            if flight is None or not (shown or deleted):
                return
            del self._in_flight[key]
        if shown:
            for event in flight.events:
                post(flight.server, event)
        flight.landed.set_result(shown)

    def superseded(self, key: Key) -> None:
        """The server's first status in kopf's patch was lost (the server was read without it) and a write
        of the operator's own replaced it: its Events give way to that write's.
        """
        with self._lock:
            flight = self._in_flight.pop(key, None)
        if flight is not None and not flight.landed.done():
            flight.landed.set_result(False)

    def wait(self, key: Key, timeout: float = STATUS_IN_FLIGHT_TIMEOUT) -> None:
        """In a handler thread: wait (at most ``timeout`` s) for the server's status in kopf's patch to be stored."""
        landed = self.in_flight(key)
        if landed is not None:
            with contextlib.suppress(concurrent.futures.TimeoutError):
                landed.result(timeout)

    async def wait_async(self, key: Key, timeout: float = STATUS_IN_FLIGHT_TIMEOUT) -> None:
        """:meth:`wait` in kopf's loop (no thread held)."""
        landed = self.in_flight(key)
        if landed is not None:
            await asyncio.wait({asyncio.wrap_future(landed)}, timeout=timeout)


class StatusWriter:
    """Writes statuses (see the module's docstring) through ``kube`` and records them in ``ledger``."""

    def __init__(self, kube: Kube, ledger: StatusLedger | None = None) -> None:
        self.kube = kube
        self.ledger = ledger or StatusLedger()

    def write(
        self,
        server: dict[str, Any],
        new: dict[str, Any],
        logger: logging.Logger,
        *,
        pod: Mapping[str, Any] | None = None,
        created: str | None = None,
        kv: tuple[dict[str, Any], str | None] | None = None,
        via: kopf.Patch | None = None,
    ) -> dict[str, Any]:
        """Make ``server``'s status ``new`` (complete; keys absent are removed but :data:`KEPT_FIELDS`,
        explicit None values are removed too); post its Events; return the server as stored.

        Args:
            server: the VLLMServer the status was computed from (its stored ``status`` is the old one).
            new: the status (camelCase keys of :class:`kvpilot.api.models.VLLMServerStatus`).
            logger: where a phase transition is logged.
            pod: the pod state ``new`` was computed from (recorded in the ledger once stored).
            created: what the reconcile just created, said in the transition's Event
                (:func:`logic.status_events`).
            kv: ``(KVCapacity condition, warning)`` of a pre-flight just run: a Warning Event when it
                warns and the condition was not False before (:func:`logic.kv_warning_event`).
            via: kopf's ``patch`` of the running handler: the change goes into it instead of a request.

        Raises:
            kvpilot.api.models.StatusError: ``new`` does not fit the status model (a bug).
            ApiException: the API refused the write.
        """
        old = server.get("status") or {}
        safe = logic.safe_status({k: v for k, v in new.items() if k != STATUS_KOPF})
        document = status_document(safe)
        removed = {k: None for k, v in safe.items() if v is None}
        keep = tuple(k for k in KEPT_FIELDS if k not in safe)
        patch = logic.status_patch(old, {**document, **removed}, keep=keep)
        patch = {k: v for k, v in patch.items() if v is not None or k in old}
        events = logic.status_events(old, document, created) if patch else []
        if not patch and created:
            events = [logic.Event("Normal", "PodCreated", created)]
        kv_event = logic.kv_warning_event(old, *kv) if kv is not None else None
        if kv_event is not None:
            events.append(kv_event)
        meta = server["metadata"]
        key = (meta["namespace"], meta["name"])
        if logic.is_transition(old, document) and patch:
            logger.info(f"{meta['name']}: {old.get('phase')} -> {document.get('phase')} ({document.get('reason')})")
        if not patch:
            updated = server
        elif via is not None:
            via.setdefault("status", {}).update(patch)
            updated = {**server, "status": {k: v for k, v in {**old, **patch}.items() if v is not None}}
            self.ledger.handed_to_kopf(key, pod, server, events)
            return updated
        else:
            updated = self.kube.patch_server_status(meta["namespace"], meta["name"], patch)
            if not old.get("specHash"):  # read without the first status kopf's patch carried: that one is lost
                self.ledger.superseded(key)
        self.ledger.stored(key, pod)
        for event in events:
            post(server, event)
        return updated
