"""How kopf runs kvpilot's operator: its settings and its connection to the cluster the caller chose.

Used by :mod:`kvpilot.controller.runner` (``kopf.run``/``kopf.operator``) and by the login handler
of :func:`kvpilot.controller.handlers.build_registry`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any, cast

import kopf
import kubernetes.client

from kvpilot.api.constants import LABEL_MANAGED_BY, STATUS_KOPF

MANAGED_BY_SELECTOR = {LABEL_MANAGED_BY: "kvpilot"}
#: Threads running the synchronous handlers (kopf's ``settings.execution.max_workers``). Each
#: reconcile waits on three or more API round trips, so the thread count, not the CPU, bounds how
#: many are in flight; Python's default pool, ``min(32, CPUs + 4)``, is 6 on a 2-core node, and a
#: burst then queues behind round trips. More threads buy little: the GIL and kopf's event loop
#: bind next (the burst's latency at 6, 20 and 32 threads: docs/performance.md, "What the code's choices bought").
HANDLER_THREADS = 20


#: kopf's default peering lifetime (s): a peer not heard of for this long is dead
#: (``kopf.OperatorSettings().peering.lifetime``; kopf touches its record 5-10 s before it ends).
DEFAULT_PEERING_LIFETIME = 60
#: Longest ``reportingInstance`` of an Event (k8s.io/kubernetes pkg/apis/events/validation:
#: ``ReportingInstanceLengthLimit = 128``).
REPORTING_INSTANCE_LIMIT = 128


#: Where kopf's record of the last handled spec goes (a digest, :class:`DigestDiffBaseStorage`).
DIFFBASE_FIELD = f"status.{STATUS_KOPF}.last-handled-digest"


class DigestDiffBaseStorage(kopf.StatusDiffBaseStorage):
    """kopf's diff-base in ``status`` as a SHA-256 of the object's essence, not the essence itself.

    kopf compares the essence it stored when a handler last succeeded (spec, labels, annotations:
    ``DiffBaseStorage.build``) with the current one to tell a change (update) from a restart
    (resume). kopf's ``StatusDiffBaseStorage`` stores the essence as JSON: a copy of the spec in
    ``status``, a secret a person pasted into the spec included, which status must never carry
    (:func:`kvpilot.controller.logic.safe_status`). A digest tells equal from different as well.
    What is lost: an update handler's ``old``/``diff`` kwargs compare the new essence with an empty
    one; kvpilot's reconcile uses neither (it acts on the whole current spec). kopf documents
    custom storages as its extension point ("Persistence", kopf 1.45 ``kopf/_cogs/configs/diffbase.py``).
    """

    def __init__(self, *, field: str) -> None:
        super().__init__(field=field)
        #: ``((uid, resourceVersion), essence)`` of the last body built: kopf fetches and builds the
        #: same body's essence per event (``kopf/_core/reactor/processing.py``), so the second of the
        #: two calls reuses it, in whichever order kopf makes them. A resourceVersion names one state
        #: of the object (Kubernetes API conventions, "Concurrency Control and Consistency"), so the
        #: same key always has the same spec, labels and annotations: the memo is never wrong, it only
        #: saves work while kopf asks for the same state twice in a row. A body without a uid or
        #: resourceVersion is never memoised.
        self._last: tuple[tuple[str, str], kopf.BodyEssence] | None = None

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        """The essence kopf compares (spec, labels, annotations), without deep-copying ``status`` first
        (kopf's ``build`` copies the whole body, then drops status), built once per object state.
        """
        if extra_fields:  # a handler filtering on status fields (kvpilot has none): kopf's own way
            return super().build(body=body, extra_fields=extra_fields)
        meta = body.get("metadata") or {}
        key = (meta.get("uid"), meta.get("resourceVersion"))
        last = self._last
        if last is not None and None not in key and last[0] == key:
            return last[1]
        slim = cast(kopf.RawBody, {k: v for k, v in body.items() if k != "status"})
        essence = super().build(body=kopf.Body(slim))
        if None not in key:
            self._last = (cast(tuple[str, str], key), essence)
        return essence

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        """The current essence when it hashes to the stored digest, an empty one when not, None when none is stored."""
        stored: Any = super().fetch(body=body)  # the JSON stored: {"sha256": ...}, not an essence
        if stored is None:
            return None
        current = self.build(body=body)
        return current if stored == _digest(current) else cast(kopf.BodyEssence, {})

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        """Put ``{"sha256": <hex digest of the essence's sorted JSON>}`` into ``patch`` at :data:`DIFFBASE_FIELD`."""
        super().store(body=body, patch=patch, essence=cast(kopf.BodyEssence, _digest(essence)))


def _digest(essence: Any) -> dict[str, str]:
    """``{"sha256": hex}`` of ``essence`` as compact JSON with sorted keys."""
    encoded = json.dumps(essence, sort_keys=True, separators=(",", ":")).encode()
    return {"sha256": hashlib.sha256(encoded).hexdigest()}


def make_settings(
    settings: kopf.OperatorSettings | None = None,
    *,
    peering_lifetime: int | None = None,
    reporting_instance: str | None = None,
) -> kopf.OperatorSettings:
    """Kopf settings for kvpilot: kopf's progress and diff-base (a digest, :class:`DigestDiffBaseStorage`)
    in ``status.kopf`` (the CRD declares the field, a real API server prunes undeclared status fields), so a new
    server's status, written through kopf's ``patch``, and kopf's record go out in one ``/status``
    request (in annotations they are a request of their own); kopf's own log lines not posted as Events (only warnings),
    watches of pods filtered server-side by ``app.kubernetes.io/managed-by=kvpilot``; no
    finalizers (no delete handler: owner references delete the pod and service);
    :data:`HANDLER_THREADS` handler threads unless ``settings`` already says how many.

    Args:
        settings: kopf settings to adjust (a fresh ``kopf.OperatorSettings()`` when None).
        peering_lifetime: seconds a peer's record in the peering object counts as alive
            (``settings.peering.lifetime``, default :data:`DEFAULT_PEERING_LIFETIME`): a replica
            killed without a goodbye blocks the others this long; kopf refreshes the record every
            ``max(1, lifetime - 5..10)`` s (kopf/_core/engines/peering.py, ``keepalive``).
        reporting_instance: the Events' ``reportingInstance`` (which replica acted; kopf's
            default is ``dev``), cut to 128 characters.
    """
    settings = settings or kopf.OperatorSettings()
    if peering_lifetime is not None:
        settings.peering.lifetime = peering_lifetime
    if reporting_instance:
        settings.posting.reporting_instance = reporting_instance[:REPORTING_INSTANCE_LIMIT]
    settings.persistence.progress_storage = kopf.StatusProgressStorage(name=STATUS_KOPF)
    settings.persistence.diffbase_storage = DigestDiffBaseStorage(field=DIFFBASE_FIELD)
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    if settings.execution.max_workers is None:
        settings.execution.max_workers = HANDLER_THREADS
    # Only kvpilot's pods, filtered by the API server (not every pod of the cluster in memory).
    settings.watching.label_selectors["v1", "pods"] = ",".join(f"{k}={v}" for k, v in MANAGED_BY_SELECTOR.items())
    return settings


def start_order_priority(started_ns: int, tie_breaker: int) -> int:
    """The kopf peering priority of a replica that started at ``started_ns`` (ns since the epoch):
    the earlier a replica started, the higher its priority, so the longest-running live replica
    acts and a replica that joins (a rollout, a rescheduled pod) waits instead of taking over.

    kopf pauses every operator that sees a live peer of higher *or equal* priority
    (kopf/_core/engines/peering.py, ``process_peering_event``): replicas of one Deployment sharing
    one ``--priority`` would all pause. Returns ``-(milliseconds * 1000 + tie_breaker % 1000)``:
    distinct for replicas started in different milliseconds, the ``tie_breaker`` (random) separates
    the same millisecond; magnitude below 2**53 (about 1.8e15 in 2026, exact as a JSON number) and
    below 0, so any explicit ``--priority`` of 0 or more (an operator run by hand) outranks it.
    """
    return -((started_ns // 1_000_000) * 1000 + tie_breaker % 1000)


def connection_info(configuration: kubernetes.client.Configuration) -> kopf.ConnectionInfo:
    """Kopf's connection from a kubernetes-client ``Configuration`` (so both talk to one cluster)."""
    token = None
    auth = (configuration.api_key or {}).get("authorization") or (configuration.api_key or {}).get("BearerToken")
    if auth:
        token = auth.split(" ", 1)[1] if auth.lower().startswith("bearer ") else auth
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        username=configuration.username or None,
        password=configuration.password or None,
        scheme="Bearer" if token else None,
        token=token,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
    )
