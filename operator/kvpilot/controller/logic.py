"""The operator's decisions as pure functions: pod → phase, status, conditions, pod actions.

No I/O here: :mod:`kvpilot.controller.handlers` reads the objects, calls these functions and
writes what they return. Timestamps are RFC 3339 strings passed in by the caller.

Sources:
- Pod phases, conditions and container states: Kubernetes "Pod Lifecycle" docs and
  ``k8s.io/api/core/v1`` (``PodScheduled=False`` with reason ``Unschedulable`` carries the
  scheduler's message; a pod past ``activeDeadlineSeconds`` is ``Failed`` with reason
  ``DeadlineExceeded``; the deadline counts from ``status.startTime``).
- Conditions: Kubernetes API conventions (``metav1.Condition``: ``lastTransitionTime`` changes
  only when ``status`` changes; ``observedGeneration``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from pydantic import ValidationError

from kvpilot.api import VLLM_PORT, SpecError, parse_spec, spec_hash
from kvpilot.api.constants import ANNOTATION_SPEC_HASH, LABEL_SERVER, STATUS_KOPF
from kvpilot.api.models import Condition, Phase, PreflightStatus, VLLMServerSpec, VLLMServerStatus
from kvpilot.api.objects import (
    ContainerState,
    ContainerStateTerminated,
    JsonObject,
    Pod,
    PodCondition,
    PodEvent,
    Service,
    VLLMServerObject,
)
from kvpilot.api.timestamps import rfc3339
from kvpilot.text.safe import one_line, redact_argv
from kvpilot.vllm.failure_log import root_cause

#: Phases after which the operator never starts a pod on its own (docs/operator.md, "Phases": an expired or
#: failed server stays, with its pod, until a person changes the spec or deletes it).
ENDED_PHASES = ("Failed", "Expired")
#: Lines of a termination message kept in ``status.message`` (the end says why vLLM exited).
TERMINATION_LINES = 3


#: A condition's ``status`` (metav1.ConditionStatus).
ConditionStatus = Literal["True", "False", "Unknown"]


@dataclass(frozen=True)
class Server:
    """A VLLMServer as the decisions read it: its identity, its ``status`` typed (:class:`VLLMServerStatus`),
    its ``spec`` validated on first use (:meth:`spec`), and the object as served (``body``: the owner of its
    pods and the target of kopf's Events).
    """

    body: VLLMServerObject
    status: VLLMServerStatus
    name: str = ""
    namespace: str = ""
    uid: str | None = None
    generation: int | None = None

    @cached_property
    def _spec(self) -> VLLMServerSpec | SpecError:
        try:
            return parse_spec(self.body.get("spec"))
        except SpecError as exc:
            return exc

    def spec(self) -> VLLMServerSpec:
        """The spec validated (:func:`kvpilot.api.parse_spec`, once per server read).

        Raises:
            SpecError: the spec is invalid (naming the field).
        """
        spec = self._spec
        if isinstance(spec, SpecError):
            raise spec
        return spec

    @classmethod
    def of(cls, body: VLLMServerObject) -> Server:
        """Parse ``body`` (kopf's or the API's VLLMServer). The stored status passed the CRD's schema, the
        model's own; one that does not fit it anyway is read as empty (the next write replaces it whole).
        """
        try:
            status = VLLMServerStatus.model_validate(body.get("status") or {}, strict=False)
        except ValidationError:
            status = VLLMServerStatus()
        meta = body.get("metadata") or {}
        name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
        return cls(body, status, name, namespace, meta.get("uid"), meta.get("generation"))


@dataclass(frozen=True)
class PodReport:
    """What a pod says about its server: a VLLMServer phase with a reason and a one-line message."""

    phase: Phase
    reason: str
    message: str
    ready: bool = False


def _condition(pod: Pod, type_: str) -> PodCondition:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return {}


def _container_states(pod: Pod) -> list[ContainerState]:
    return [cs.get("state") or {} for cs in (pod.get("status") or {}).get("containerStatuses") or []]


def _terminated(pod: Pod) -> ContainerStateTerminated | None:
    """The first terminated container state of ``pod``, if any."""
    return next((t for s in _container_states(pod) if (t := s.get("terminated"))), None)


def last_lines(text: str | None, count: int = TERMINATION_LINES) -> str:
    """The last ``count`` non-empty lines of ``text`` joined with `` | `` (one status line)."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return " | ".join(lines[-count:])


def pod_report(pod: Pod, ttl_seconds: int | None = None, failure_log: str | None = None) -> PodReport:  # noqa: C901
    """Map a Pod to the VLLMServer phase (docs/operator.md, "Phases": Pending | Loading | Ready | Failed | Expired).

    - ``Failed`` with reason ``DeadlineExceeded`` → Expired (the TTL ended it);
    - ``Failed`` otherwise → Failed: the container's termination reason (``OOMKilled``,
      ``Error`` …) and exit code, then the root cause vLLM printed
      (:func:`kvpilot.vllm.failure_log.root_cause` of ``failure_log``, the end of the
      container's log when the caller read it, else of the termination message), then the last
      lines of its termination message (with ``FallbackToLogsOnError`` that is the end of vLLM's
      log: at most 80 lines or 2,048 bytes, often only vLLM V1's "Engine core initialization
      failed. See root cause above." and the API server's traceback);
    - ``Succeeded`` → Failed (a server that exits has stopped serving);
    - ``Pending``: ``PodScheduled=False`` → the scheduler's reason and message (e.g.
      ``0/3 nodes are available: 3 Insufficient nvidia.com/gpu``); a waiting container → its
      reason (``ErrImagePull``, ``ContainerCreating`` …);
    - ``Running``: ``Ready=True`` → Ready, otherwise Loading (vLLM refuses connections while
      it loads the model, so the readiness probe fails until it can serve).
    """
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    terminated = _terminated(pod)
    if phase == "Failed" and status.get("reason") == "DeadlineExceeded":
        ttl = f" (ttlSeconds={ttl_seconds})" if ttl_seconds else ""
        return PodReport(
            "Expired",
            "DeadlineExceeded",
            f"pod ended by its deadline{ttl}; it stays for inspection, change the spec to start anew",
        )
    if phase in ("Failed", "Succeeded"):
        if terminated:
            reason = terminated.get("reason") or "Error"
            tail = last_lines(terminated.get("message"))
            cause = root_cause(failure_log) or root_cause(terminated.get("message"))
            message = f"vLLM exited with code {terminated.get('exitCode')} ({reason})"
            if cause and cause not in tail:
                message += f": {cause}" + (f"; log ends: {tail}" if tail else "")
            elif tail:
                message += f": {tail}"
        else:
            reason = status.get("reason") or "PodFailed"
            message = status.get("message") or f"pod phase {phase}"
        return PodReport("Failed", reason, message)
    if phase == "Running":
        if _condition(pod, "Ready").get("status") == "True":
            return PodReport("Ready", "Ready", "serving", ready=True)
        return PodReport("Loading", "Loading", "container running; vLLM is loading the model (not ready yet)")
    scheduled = _condition(pod, "PodScheduled")
    if scheduled.get("status") == "False":
        return PodReport(
            "Pending", scheduled.get("reason") or "Unschedulable", scheduled.get("message") or "waiting for a node"
        )
    waiting = next((w for s in _container_states(pod) if (w := s.get("waiting"))), None)
    if waiting:
        reason = waiting.get("reason") or "ContainerCreating"
        return PodReport("Pending", reason, waiting.get("message") or f"container waiting: {reason}")
    if phase == "Unknown":
        return PodReport("Pending", "PodUnknown", "the pod's node stopped reporting")
    if scheduled.get("status") == "True":
        return PodReport(
            "Pending",
            "Scheduled",
            f"on node {(pod.get('spec') or {}).get('nodeName') or '?'}; waiting for the kubelet to start the container",
        )
    return PodReport("Pending", "Scheduling", "waiting for the scheduler")


def set_condition(
    conditions: list[Condition] | None,
    type_: str,
    status: ConditionStatus,
    reason: str | None,
    message: str | None,
    *,
    now: str,
    generation: int | None,
) -> list[Condition]:
    """Return ``conditions`` with condition ``type_`` set (API conventions), sorted by type.

    ``lastTransitionTime`` is ``now`` only when the condition is new or its ``status`` changed;
    a changed reason or message keeps the old time. Other conditions are kept as they are.
    """
    old = next((c for c in conditions or [] if c.type == type_), None)
    since = old.last_transition_time if old and old.status == status and old.last_transition_time else now
    new = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )
    return sorted([*(c for c in conditions or [] if c.type != type_), new], key=lambda c: c.type)


def endpoint(service: str, namespace: str) -> str:
    """The in-cluster URL of a server's Service: ``http://<svc>.<ns>.svc:8000``."""
    return f"http://{service}.{namespace}.svc:{VLLM_PORT}"


def server_status(  # noqa: C901
    server: Server,
    pod: Pod | None,
    *,
    now: str,
    service_name: str,
    spec_hash: str,
    command: list[str] | None = None,
    kv: tuple[int, float | None] | None = None,
    failure_log: str | None = None,
) -> VLLMServerStatus:
    """The VLLMServer ``status`` for its current pod.

    Args:
        server: the VLLMServer (its ``status`` supplies what persists: ``readyAt``,
            ``kvCacheTokens``/``maxConcurrency`` of the same pod, conditions).
        pod: the server's current pod, or None when it has none (no pod yet, or it was removed).
        now: the current time, RFC 3339.
        service_name: the Service in front of the pod.
        spec_hash: hash of the spec the pod is (or would be) made from.
        command: the ``vllm serve`` argv of that spec.
        kv: ``(kvCacheTokens, maxConcurrency)`` read from the pod's log, when just read.
        failure_log: the end of a failed pod's log, when just read (its root cause leads the
            message, :func:`pod_report`); a failed pod's later events keep that message.

    Returns:
        the complete status; fields that do not apply are None (callers diff it with :func:`status_patch`).
    """
    old, generation = server.status, server.generation
    conditions = set_condition(
        old.conditions, "Valid", "True", "SpecValid", "spec accepted", now=now, generation=generation
    )
    status = VLLMServerStatus(
        observed_generation=generation,
        service_name=service_name,
        spec_hash=spec_hash,
        command=list(command) if command else None,
    )
    if pod is None:
        if old.phase in ENDED_PHASES and old.spec_hash == spec_hash:  # an ended server whose pod a person removed
            report = PodReport(old.phase, old.reason or old.phase, old.message or "")
        else:
            report = PodReport("Pending", "PodMissing", "no pod yet")
    else:
        pod_spec = pod.get("spec") or {}
        report = pod_report(pod, pod_spec.get("activeDeadlineSeconds"), failure_log)
        pod_meta = pod.get("metadata") or {}
        same_pod = old.pod_uid == pod_meta.get("uid")
        if (
            report.phase == "Failed"
            and failure_log is None
            and same_pod
            and (old.phase, old.reason) == ("Failed", report.reason)
        ):  # a terminated container does not change: keep the message its log was read for
            report = PodReport(report.phase, report.reason, old.message or report.message)
        status.pod_name, status.pod_uid = pod_meta.get("name"), pod_meta.get("uid")
        start = (pod.get("status") or {}).get("startTime")
        if start:
            status.started_at = rfc3339(start)
            if pod_spec.get("activeDeadlineSeconds"):
                status.expires_at = rfc3339(start, int(pod_spec["activeDeadlineSeconds"]))
        if same_pod and old.ready_at:
            status.ready_at = old.ready_at
        elif report.ready:
            status.ready_at = rfc3339(_condition(pod, "Ready").get("lastTransitionTime") or now)
        finished = (_terminated(pod) or {}).get("finishedAt")
        if report.phase in ENDED_PHASES:
            status.finished_at = rfc3339(finished or (old.finished_at if same_pod else None) or now)
        if kv is not None:
            status.kv_cache_tokens, status.max_concurrency = kv
        elif same_pod:
            status.kv_cache_tokens, status.max_concurrency = old.kv_cache_tokens, old.max_concurrency
    status.phase, status.reason, status.message = report.phase, report.reason, report.message
    if report.ready:
        status.endpoint = endpoint(service_name, server.namespace)
    status.conditions = set_condition(
        conditions,
        "Ready",
        "True" if report.ready else "False",
        report.reason,
        report.message,
        now=now,
        generation=generation,
    )
    return status


def invalid_status(server: Server, field_message: str, *, now: str, reason: str = "InvalidSpec") -> VLLMServerStatus:
    """Status of a refused spec: phase Invalid, ``Valid=False`` and ``Ready=False`` naming the field."""
    generation = server.generation
    conditions = set_condition(
        server.status.conditions, "Valid", "False", reason, field_message, now=now, generation=generation
    )
    conditions = set_condition(conditions, "Ready", "False", reason, field_message, now=now, generation=generation)
    return VLLMServerStatus(
        phase="Invalid", reason=reason, message=field_message, observed_generation=generation, conditions=conditions
    )


#: Status fields a write leaves alone unless the new status sets them (None set explicitly removes one): kopf's
#: own record, and the KV pre-flight's numbers, which only the pre-flight sets.
KEPT_FIELDS = (STATUS_KOPF, "preflight")


def status_patch(old: VLLMServerStatus, new: VLLMServerStatus) -> JsonObject:
    """The JSON merge patch of ``/status`` turning ``old`` into ``new``, field by field (a field ``new`` lacks
    becomes ``null``), empty when nothing changes. :data:`KEPT_FIELDS` ``new`` did not set are left alone, and
    ``kopf`` always (kopf writes its record in its own patch).
    """
    served = new.model_dump(mode="json", by_alias=True, exclude_none=True)
    patch: JsonObject = {}
    for name, info in VLLMServerStatus.model_fields.items():
        if name == STATUS_KOPF or (name in KEPT_FIELDS and name not in new.model_fields_set):
            continue
        if getattr(old, name) != getattr(new, name):
            patch[info.alias or name] = served.get(info.alias or name)
    return patch


def is_transition(old: VLLMServerStatus, new: VLLMServerStatus) -> bool:
    """True when the phase or its reason changes (each such change gets a Kubernetes Event)."""
    return (old.phase, old.reason) != (new.phase, new.reason)


def event_type(status: VLLMServerStatus) -> str:
    """``Warning`` for phases a person must look at (Failed, Expired, Invalid, unschedulable), else ``Normal``."""
    if status.phase in ("Failed", "Expired", "Invalid") or status.reason == "Unschedulable":
        return "Warning"
    return "Normal"


# ----------------------------------------------------------------------------- pod actions
@dataclass
class PodPlan:
    """What to do with a server's pods: ``delete`` these names, ``create`` one or not, ``keep`` one."""

    keep: Pod | None = None
    create: bool = False
    delete: list[str] = field(default_factory=list)


def plan_pods(server: Server, pods: Sequence[Pod], spec_hash: str) -> PodPlan:
    """Desired vs existing pods of one server (idempotent: running it twice changes nothing).

    Args:
        server: the VLLMServer (``metadata.uid``; ``status`` for phase, specHash and podName).
        pods: pods labelled ``kvpilot.dev/server=<name>`` in its namespace.
        spec_hash: hash of the current spec.

    Rules: only pods this server owns (an ownerReference with its uid) are considered; a pod
    of the current spec is kept (the one in ``status.podName`` first, else the oldest; extra
    copies are deleted); pods of an older spec are deleted (a spec change replaces the pod); a
    pod is created only when none of the current spec exists and the server has not already
    ended (Failed/Expired) with this same spec — an ended server is never restarted on its own.
    """
    uid, status = server.uid, server.status
    owned = [
        p
        for p in pods
        if any(ref.get("uid") == uid for ref in (p.get("metadata") or {}).get("ownerReferences") or [])
        and not (p.get("metadata") or {}).get("deletionTimestamp")
    ]
    current = [p for p in owned if ((p["metadata"].get("annotations") or {}).get(ANNOTATION_SPEC_HASH)) == spec_hash]
    stale = [p["metadata"]["name"] for p in owned if p not in current]
    current.sort(
        key=lambda p: (
            p["metadata"]["name"] != status.pod_name,
            p["metadata"].get("creationTimestamp", ""),
            p["metadata"]["name"],
        )
    )
    plan = PodPlan(delete=stale + [p["metadata"]["name"] for p in current[1:]])
    if current:
        plan.keep = current[0]
    elif not (status.phase in ENDED_PHASES and status.spec_hash == spec_hash):
        plan.create = True
    return plan


# ----------------------------------------------------------------------------- pod events
#: Status fields an ended server (Failed/Expired) keeps when its pod is gone: the record of the run
#: a person inspects (phase and why, which pod, when it started, expired and finished, the KV numbers).
ENDED_STATUS_FIELDS = (
    "phase",
    "reason",
    "message",
    "pod_name",
    "pod_uid",
    "started_at",
    "expires_at",
    "finished_at",
    "kv_cache_tokens",
    "max_concurrency",
)


def keep_ended_record(new: VLLMServerStatus, old: VLLMServerStatus) -> VLLMServerStatus:
    """``new`` status with :data:`ENDED_STATUS_FIELDS` taken from ``old`` (those it has): a server that ended
    with its current spec and has no pod (``plan_pods`` creates none) keeps the record of its last run.
    """
    kept = {name: getattr(old, name) for name in ENDED_STATUS_FIELDS if getattr(old, name) is not None}
    return new.model_copy(update=kept)


def is_current_pod(status: VLLMServerStatus, pod: Pod) -> bool:
    """Whether ``pod`` is the server's current pod, so its events change the server's status.

    The pod named in ``status.podName`` is; before the server handler has recorded a pod name, a pod
    made from the spec in ``status.specHash`` (its spec-hash annotation) is. Never before the server
    handler has run (no ``specHash``), and never an old pod being replaced.
    """
    if not status.spec_hash:
        return False
    meta = pod.get("metadata") or {}
    if status.pod_name:
        return bool(status.pod_name == meta.get("name"))
    return bool((meta.get("annotations") or {}).get(ANNOTATION_SPEC_HASH) == status.spec_hash)


def pod_deleted_status(
    server: Server, pod_name: str, *, now: str, spec_hash: str | None = None, command: list[str] | None = None
) -> VLLMServerStatus:
    """The server's status after its current pod ``pod_name`` was deleted.

    A running or pending server becomes ``Failed`` with reason ``PodDeleted`` (and ``Ready=False``):
    the operator does not start another pod for the same spec, a person changes the spec or deletes
    the VLLMServer. A server that had already ended (Failed/Expired) stays as it was. ``spec_hash``
    and ``command`` default to the stored status's.
    """
    status = server.status
    new = server_status(
        server,
        None,
        now=now,
        service_name=status.service_name or server.name,
        spec_hash=spec_hash or status.spec_hash or "",
        command=command if command is not None else status.command,
    )
    if status.phase in ENDED_PHASES:
        return new
    message = f"pod {pod_name} was deleted; change the spec or delete the VLLMServer"
    new.phase, new.reason, new.message = "Failed", "PodDeleted", message
    new.conditions = set_condition(
        new.conditions, "Ready", "False", "PodDeleted", message, now=now, generation=server.generation
    )
    return new


def waits_for_node_gpu_memory(server: Server, pod: Pod) -> bool:
    """Whether the KV pre-flight should run again now that ``pod`` has a node.

    True when the server's ``KVCapacity`` condition is Unknown for lack of inputs (reason
    ``InsufficientInputs``: the GPU memory was unknown), its spec gives no ``resources.gpuMemory``,
    the pre-flight is on (``spec.preflight`` other than ``off``) and ``pod`` is scheduled
    (``spec.nodeName``): the node's ``nvidia.com/gpu.memory`` label can now give the GPU memory.
    The caller runs it once per pod (the label does not change under a running pod). Never for a spec that
    is not valid (the reconcile reports it).
    """
    kv = next((c for c in server.status.conditions or [] if c.type == "KVCapacity"), None)
    if not (kv and kv.status == "Unknown" and kv.reason == "InsufficientInputs"):
        return False
    try:
        spec = server.spec()
    except SpecError:
        return False
    return bool(spec.preflight != "off" and not spec.resources.gpu_memory and (pod.get("spec") or {}).get("nodeName"))


def safe_status(status: VLLMServerStatus) -> VLLMServerStatus:
    """``status`` ready to publish: ``message`` and every condition message on one line without
    terminal control characters and with secrets redacted (:mod:`kvpilot.text.safe`), ``command``
    with ``--api-key`` values and token-shaped arguments redacted. Idempotent; other fields unchanged.
    """
    safe: dict[str, object] = {}
    if status.message is not None:
        safe["message"] = one_line(status.message)
    if status.command is not None:
        safe["command"] = redact_argv(status.command)
    if status.conditions is not None:
        safe["conditions"] = [
            c.model_copy(update={"message": one_line(c.message)}) if c.message is not None else c
            for c in status.conditions
        ]
    return status.model_copy(update=safe)


# ----------------------------------------------------------------------------- creates
@dataclass(frozen=True)
class CreateConflict:
    """What a 409 on create means once the object of that name has been read (:func:`after_create_conflict`).

    Attributes:
        outcome: ``adopt`` (this server owns it: an earlier attempt made it), ``held`` (another owner,
            or nobody, holds the name: a person must act) or ``vanished`` (no such object: the create
            raced a deletion, or a cache in front of the API server answered; a retry can succeed).
        holder: for ``held``, who holds the name (``"VLLMServer other"``, ``"no controller"``).
    """

    outcome: str
    holder: str | None = None


def after_create_conflict(existing: Pod | Service | None, server_uid: str | None) -> CreateConflict:
    """The meaning of a 409 on create, from the object of that name as read afterwards (None: 404).

    An object with an ownerReference to ``server_uid`` is this server's (adopted); one without is
    held by its controller owner, or by nobody; none at all is a transient conflict (the Kubernetes
    API conventions' "Concurrency Control and Consistency": the same request may succeed later).
    """
    if existing is None:
        return CreateConflict("vanished")
    refs = (existing.get("metadata") or {}).get("ownerReferences") or []
    if any(ref.get("uid") == server_uid for ref in refs):
        return CreateConflict("adopt")
    holder = next((f"{ref.get('kind')} {ref.get('name')}" for ref in refs if ref.get("controller")), None)
    return CreateConflict("held", holder or "no controller")


# ----------------------------------------------------------------------------- events
@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post on the VLLMServer: ``type`` (Normal | Warning), ``reason``, one-line ``message``."""

    type: str
    reason: str
    message: str


#: Longest Event message (the API server refuses more than 1 KiB: k8s.io/kubernetes pkg/apis/core/validation).
EVENT_MESSAGE_LIMIT = 1024


def status_events(old: VLLMServerStatus, new: VLLMServerStatus, created: str | None = None) -> list[Event]:
    """The Events a status change posts: one per phase transition (:func:`is_transition`; reason = the
    new phase, message = its reason and message, led by ``created`` when given), else a
    ``PodCreated`` Event carrying ``created`` (what the reconcile just made, with no transition).
    """
    if is_transition(old, new):
        said = f"{new.reason}: {new.message}"
        message = one_line(f"{created}; {said}" if created else said, limit=EVENT_MESSAGE_LIMIT)
        return [Event(event_type(new), new.phase or "Unknown", message)]
    return [Event("Normal", "PodCreated", created)] if created else []


def kv_warning_event(old: VLLMServerStatus, condition: Condition, warning: str | None) -> Event | None:
    """A Warning Event when the pre-flight warns and the ``condition``'s type was not False already in ``old``
    status (one Event per verdict, not one per reconcile).
    """
    before = next((c for c in old.conditions or [] if c.type == condition.type), None)
    if not warning or (before is not None and before.status == "False"):
        return None
    return Event("Warning", condition.reason or condition.type, one_line(warning, limit=EVENT_MESSAGE_LIMIT))


@dataclass(frozen=True)
class CreationNote:
    """How a reconcile announces the pod it made: ``event`` (its own ``PodCreated`` Event) or ``created``
    (the text that leads the new server's ``Pending`` transition Event, so it gets one Event), or neither.
    """

    event: Event | None = None
    created: str | None = None


def creation_note(
    plan: PodPlan,
    status: VLLMServerStatus,
    *,
    pod_name: str | None,
    spec_hash: str,
    service_name: str,
    service_created: bool,
    adopted: bool,
) -> CreationNote:
    """What to say about a reconcile's pod (docs/operator.md, "Events").

    Nothing when no pod was created or the create found this server's own pod (``adopted``); a
    replacement (``plan.delete``, or a server whose status already named a pod) gets its own
    ``PodCreated`` Event; a new server's first pod is said in its ``Pending`` Event, with the Service.
    """
    if not plan.create or adopted or pod_name is None:
        return CreationNote()
    if plan.delete or status.pod_name:
        return CreationNote(event=Event("Normal", "PodCreated", f"created pod {pod_name} for spec {spec_hash}"))
    service = f"and service {service_name}" if service_created else f"(service {service_name} existed)"
    return CreationNote(created=f"created pod {pod_name} for spec {spec_hash} {service}")


def replaced_event(pod_name: str) -> Event:
    """The Event of a pod deleted because it was made from an older spec (or is a duplicate)."""
    return Event("Normal", "PodReplaced", f"deleted pod {pod_name}: it was made from an older spec (or is a duplicate)")


# ----------------------------------------------------------------------------- the KV pre-flight
#: ``spec.preflight`` -> when the reconcile runs the KV pre-flight: ``enforce`` before the pod (its
#: verdict decides whether a pod may exist), ``warn`` after it (a slow Hub never delays a pod; the
#: condition goes out in the same status write), ``off`` never (docs/operator.md, "KV pre-flight").
PREFLIGHT_ORDER = {"enforce": "before", "warn": "after", "off": "never"}


def preflight_order(mode: str) -> str:
    """``before``, ``after`` or ``never`` the pod for ``spec.preflight`` ``mode`` (:data:`PREFLIGHT_ORDER`)."""
    return PREFLIGHT_ORDER[mode]


def preflight_refusal(
    server: Server, mode: str, condition: Condition, warning: str | None, *, now: str
) -> VLLMServerStatus | None:
    """The ``Invalid`` status when ``preflight: enforce`` refuses the spec (the pre-flight warned that one
    request of ``maxModelLen`` cannot fit, so vLLM would refuse to start), else None (no pod is held back).
    """
    if preflight_order(mode) != "before" or not warning:
        return None
    reason = condition.reason or condition.type
    return invalid_status(server, f"spec.engine.maxModelLen: {warning}", now=now, reason=reason)


def with_kv_condition(
    server: Server,
    status: VLLMServerStatus,
    condition: Condition,
    numbers: PreflightStatus | None,
    *,
    now: str,
) -> VLLMServerStatus:
    """``status`` with the ``KVCapacity`` ``condition`` set (:func:`set_condition`, this generation) and
    ``preflight`` = ``numbers`` (None, set, which removes it, when the pre-flight computed none).
    """
    conditions = set_condition(
        status.conditions,
        condition.type,
        condition.status,
        condition.reason,
        condition.message,
        now=now,
        generation=server.generation,
    )
    return status.model_copy(update={"conditions": conditions, "preflight": numbers})


# ----------------------------------------------------------------------------- what a pod event does
@dataclass(frozen=True)
class PodEventPlan:
    """What a pod event does to its server's status (:func:`pod_event_plan`).

    Attributes:
        action: ``ignore`` (nothing), ``deleted`` (:func:`pod_deleted_status`) or ``update``
            (:func:`server_status` from the pod).
        why: for ``ignore``, why (a log line).
        spec_hash: the spec hash the status is computed for: ``status.specHash``, or the spec's own
            when the stored status lacks it (the first status write never landed).
        command: the ``vllm serve`` argv of that spec (from status, or rendered from the spec).
        service_name: the server's Service.
        read_failure_log: read the end of the pod's log for vLLM's root cause (the pod just failed).
        read_kv_log: read the pod's log for vLLM's KV-capacity line (the pod is Ready and this pod's
            numbers are not in status yet).
        preflight_again: run the KV pre-flight again with the node's GPU-memory label
            (:func:`waits_for_node_gpu_memory`; the caller does it once per pod).
    """

    action: str
    why: str = ""
    spec_hash: str = ""
    command: list[str] | None = None
    service_name: str = ""
    read_failure_log: bool = False
    read_kv_log: bool = False
    preflight_again: bool = False


def current_spec(server: Server) -> tuple[str, list[str]] | None:
    """``(spec hash, vllm serve argv)`` of the server's spec as it is now; None when the spec is invalid
    (the reconcile reports that). The hash and the command line are the renderer's
    (:func:`kvpilot.api.spec_hash`, :func:`kvpilot.render.vllm_command`).
    """
    from kvpilot.render import vllm_command  # the renderer's templates load on first use

    try:
        spec = server.spec()
    except SpecError:
        return None
    return spec_hash(spec), vllm_command(spec)


def pod_event_plan(server: Server, pod: Pod, event_type: str | None) -> PodEventPlan:
    """What an event of ``pod`` (``ADDED``/``MODIFIED``/``DELETED``) does to ``server``'s status.

    Args:
        server: the VLLMServer as read now.
        pod: the pod of the event (labelled with the server's name).
        event_type: the watch event's type.

    Rules:
        - a server ``Invalid`` for its current generation ignores its pods (the reconcile said why);
        - a stored status without ``specHash`` (the first status write never landed: kopf lost its
          patch on a 409 or 404) is computed afresh for the spec's own hash, so the status is
          written again instead of staying empty;
        - only the current pod (:func:`is_current_pod`, owned by the server when the status names
          none) changes the status; its DELETED fails a running server (:func:`pod_deleted_status`);
        - the failure log is read when the pod has just failed (not when the stored status already
          says this pod failed: a terminated container does not change); the KV line when the pod is
          Ready and this pod's ``kvCacheTokens`` is not stored yet: each log is read once per pod.
    """
    status = server.status
    if status.phase == "Invalid" and status.observed_generation == server.generation:
        return PodEventPlan("ignore", why="the server's spec is invalid")
    digest, command = status.spec_hash, status.command
    if not digest:
        spec = current_spec(server)
        if spec is None:
            return PodEventPlan("ignore", why="no status and no valid spec yet")
        digest, command = spec
        refs = (pod.get("metadata") or {}).get("ownerReferences") or []
        if not any(ref.get("uid") == server.uid for ref in refs):
            return PodEventPlan("ignore", why="not the server's own pod")
    if not is_current_pod(status.model_copy(update={"spec_hash": digest}), pod):
        return PodEventPlan("ignore", why="an old pod being replaced, or not the server's pod")
    service_name = status.service_name or server.name
    if event_type == "DELETED":
        return PodEventPlan("deleted", spec_hash=digest, command=command, service_name=service_name)
    report = pod_report(pod)
    same_pod = status.pod_uid == (pod.get("metadata") or {}).get("uid")
    return PodEventPlan(
        "update",
        spec_hash=digest,
        command=command,
        service_name=service_name,
        read_failure_log=report.phase == "Failed" and not (same_pod and status.phase == "Failed"),
        read_kv_log=report.ready and not (same_pod and status.kv_cache_tokens is not None),
        preflight_again=waits_for_node_gpu_memory(server, pod),
    )


# ----------------------------------------------------------------------------- the reconcile's own decisions
def is_new_server(body: VLLMServerObject) -> bool:
    """A server no reconcile has written a status for yet: its body as kopf delivered it is current
    (only this operator writes status), so it is not read again.
    """
    return not body.get("status")


def service_read_first(server: Server) -> bool:
    """Whether the reconcile reads the Service before creating it: when the status names one (it most
    likely exists: a read, no failed create). A new server's Service is created first (one request;
    409 -> adopt, :func:`after_create_conflict`).
    """
    return bool(server.status.service_name)


def reconciled_status(
    server: Server,
    plan: PodPlan,
    pod: Pod | None,
    *,
    now: str,
    service_name: str,
    spec_hash: str,
    command: list[str] | None,
) -> VLLMServerStatus:
    """The status a reconcile writes (:func:`server_status` for ``pod``); a server that ended with this
    spec and has no pod (``plan`` creates none) keeps the record of its last run (:func:`keep_ended_record`).
    """
    status = server_status(server, pod, now=now, service_name=service_name, spec_hash=spec_hash, command=command)
    if pod is None and not plan.create:
        status = keep_ended_record(status, server.status)
    return status


def pod_event_server(event: PodEvent) -> str | None:
    """The server a pod watch event is about (its ``kvpilot.dev/server`` label), or None: not a server's
    pod, or not a watch event (kopf's initial listing calls the handler with ``type`` None).
    """
    if event.get("type") is None:
        return None
    labels = ((event.get("object") or {}).get("metadata") or {}).get("labels") or {}
    name = labels.get(LABEL_SERVER)
    return str(name) if name else None
