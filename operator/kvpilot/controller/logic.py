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

from dataclasses import dataclass, field
from typing import Any

from kvpilot.api import VLLM_PORT, SpecError, parse_spec, spec_hash
from kvpilot.api.constants import ANNOTATION_SPEC_HASH, LABEL_SERVER
from kvpilot.api.timestamps import rfc3339
from kvpilot.text.safe import one_line, redact_argv
from kvpilot.vllm.failure_log import root_cause

#: Phases after which the operator never starts a pod on its own (docs/operator.md, "Phases": an expired or
#: failed server stays, with its pod, until a person changes the spec or deletes it).
ENDED_PHASES = ("Failed", "Expired")
#: Lines of a termination message kept in ``status.message`` (the end says why vLLM exited).
TERMINATION_LINES = 3


@dataclass(frozen=True)
class PodReport:
    """What a pod says about its server: a VLLMServer phase with a reason and a one-line message."""

    phase: str
    reason: str
    message: str
    ready: bool = False


def _condition(pod: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def _container_states(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [cs.get("state") or {} for cs in (pod.get("status") or {}).get("containerStatuses") or []]


def last_lines(text: str | None, count: int = TERMINATION_LINES) -> str:
    """The last ``count`` non-empty lines of ``text`` joined with `` | `` (one status line)."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return " | ".join(lines[-count:])


def pod_report(pod: dict[str, Any], ttl_seconds: int | None = None, failure_log: str | None = None) -> PodReport:  # noqa: C901
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
    terminated = next((s["terminated"] for s in _container_states(pod) if s.get("terminated")), None)
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
    waiting = next((s["waiting"] for s in _container_states(pod) if s.get("waiting")), None)
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
    conditions: list[dict[str, Any]] | None,
    type_: str,
    status: str,
    reason: str,
    message: str,
    *,
    now: str,
    generation: int | None,
) -> list[dict[str, Any]]:
    """Return ``conditions`` with condition ``type_`` set (API conventions).

    ``lastTransitionTime`` is ``now`` only when the condition is new or its ``status`` changed;
    a changed reason or message keeps the old time. Other conditions are kept as they are.
    """
    out = [dict(c) for c in conditions or [] if c.get("type") != type_]
    old = next((c for c in conditions or [] if c.get("type") == type_), None)
    since = old["lastTransitionTime"] if old and old.get("status") == status and old.get("lastTransitionTime") else now
    new = {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": since}
    if generation is not None:
        new["observedGeneration"] = generation
    out.append(new)
    return sorted(out, key=lambda c: c["type"])


def endpoint(service: str, namespace: str) -> str:
    """The in-cluster URL of a server's Service: ``http://<svc>.<ns>.svc:8000``."""
    return f"http://{service}.{namespace}.svc:{VLLM_PORT}"


def server_status(  # noqa: C901
    server: dict[str, Any],
    pod: dict[str, Any] | None,
    *,
    now: str,
    service_name: str,
    spec_hash: str,
    command: list[str] | None = None,
    kv: tuple[int, float | None] | None = None,
    failure_log: str | None = None,
) -> dict[str, Any]:
    """The VLLMServer ``status`` for its current pod (every key declared in the CRD's status schema).

    Args:
        server: the VLLMServer object (its ``status`` supplies what persists: ``readyAt``,
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
        the complete status; keys that do not apply are absent (callers diff it with
        :func:`status_patch`).
    """
    old = server.get("status") or {}
    meta = server.get("metadata") or {}
    generation = meta.get("generation")
    namespace = meta.get("namespace") or ""
    status: dict[str, Any] = {"observedGeneration": generation, "serviceName": service_name, "specHash": spec_hash}
    if command:
        status["command"] = list(command)
    conditions = old.get("conditions")
    conditions = set_condition(
        conditions, "Valid", "True", "SpecValid", "spec accepted", now=now, generation=generation
    )
    if pod is None:
        phase = old.get("phase") if old.get("phase") in ENDED_PHASES and old.get("specHash") == spec_hash else None
        if phase:  # an ended server whose pod a person removed: it stays ended
            report = PodReport(phase, old.get("reason") or phase, old.get("message") or "")
        else:
            report = PodReport("Pending", "PodMissing", "no pod yet")
    else:
        pod_spec = pod.get("spec") or {}
        report = pod_report(pod, pod_spec.get("activeDeadlineSeconds"), failure_log)
        pod_meta = pod.get("metadata") or {}
        if (
            report.phase == "Failed"
            and failure_log is None
            and old.get("podUid") == pod_meta.get("uid")
            and (old.get("phase"), old.get("reason")) == ("Failed", report.reason)
        ):  # a terminated container does not change: keep the message its log was read for
            report = PodReport(report.phase, report.reason, old.get("message") or report.message)
        status.update(podName=pod_meta.get("name"), podUid=pod_meta.get("uid"))
        start = (pod.get("status") or {}).get("startTime")
        if start:
            status["startedAt"] = rfc3339(start)
            if pod_spec.get("activeDeadlineSeconds"):
                status["expiresAt"] = rfc3339(start, int(pod_spec["activeDeadlineSeconds"]))
        same_pod = old.get("podUid") == pod_meta.get("uid")
        if same_pod and old.get("readyAt"):
            status["readyAt"] = old["readyAt"]
        elif report.ready:
            status["readyAt"] = rfc3339(_condition(pod, "Ready").get("lastTransitionTime") or now)
        finished = next(
            (s["terminated"].get("finishedAt") for s in _container_states(pod) if s.get("terminated")), None
        )
        if report.phase in ENDED_PHASES:
            status["finishedAt"] = rfc3339(finished or (old.get("finishedAt") if same_pod else None) or now)
        if kv is not None:
            status["kvCacheTokens"], concurrency = kv
            if concurrency is not None:
                status["maxConcurrency"] = concurrency
        elif same_pod:
            for key in ("kvCacheTokens", "maxConcurrency"):
                if old.get(key) is not None:
                    status[key] = old[key]
    status.update(phase=report.phase, reason=report.reason, message=report.message)
    if report.ready:
        status["endpoint"] = endpoint(service_name, namespace)
    conditions = set_condition(
        conditions,
        "Ready",
        "True" if report.ready else "False",
        report.reason,
        report.message,
        now=now,
        generation=generation,
    )
    status["conditions"] = conditions
    return {k: v for k, v in status.items() if v is not None}


def invalid_status(
    server: dict[str, Any], field_message: str, *, now: str, reason: str = "InvalidSpec"
) -> dict[str, Any]:
    """Status of a refused spec: phase Invalid, ``Valid=False`` and ``Ready=False`` naming the field."""
    old = server.get("status") or {}
    generation = (server.get("metadata") or {}).get("generation")
    conditions = set_condition(
        old.get("conditions"), "Valid", "False", reason, field_message, now=now, generation=generation
    )
    conditions = set_condition(conditions, "Ready", "False", reason, field_message, now=now, generation=generation)
    return {
        "phase": "Invalid",
        "reason": reason,
        "message": field_message,
        "observedGeneration": generation,
        "conditions": conditions,
    }


def status_patch(old: dict[str, Any] | None, new: dict[str, Any], keep: tuple[str, ...] = ()) -> dict[str, Any]:
    """A JSON merge patch turning status ``old`` into ``new`` (removed keys become ``None``),
    empty when nothing changes; keys in ``keep`` (e.g. ``preflight``) are never removed.
    """
    old = old or {}
    patch = {k: v for k, v in new.items() if old.get(k) != v}
    patch.update({k: None for k in old if k not in new and k not in keep})
    return patch


def is_transition(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """True when the phase or its reason changes (each such change gets a Kubernetes Event)."""
    old = old or {}
    return (old.get("phase"), old.get("reason")) != (new.get("phase"), new.get("reason"))


def event_type(status: dict[str, Any]) -> str:
    """``Warning`` for phases a person must look at (Failed, Expired, Invalid, unschedulable), else ``Normal``."""
    if status.get("phase") in ("Failed", "Expired", "Invalid") or status.get("reason") == "Unschedulable":
        return "Warning"
    return "Normal"


# ----------------------------------------------------------------------------- pod actions
@dataclass
class PodPlan:
    """What to do with a server's pods: ``delete`` these names, ``create`` one or not, ``keep`` one."""

    keep: dict[str, Any] | None = None
    create: bool = False
    delete: list[str] = field(default_factory=list)


def plan_pods(server: dict[str, Any], pods: list[dict[str, Any]], spec_hash: str) -> PodPlan:
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
    uid = (server.get("metadata") or {}).get("uid")
    status = server.get("status") or {}
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
            p["metadata"]["name"] != status.get("podName"),
            p["metadata"].get("creationTimestamp", ""),
            p["metadata"]["name"],
        )
    )
    plan = PodPlan(delete=stale + [p["metadata"]["name"] for p in current[1:]])
    if current:
        plan.keep = current[0]
    elif not (status.get("phase") in ENDED_PHASES and status.get("specHash") == spec_hash):
        plan.create = True
    return plan


# ----------------------------------------------------------------------------- pod events
#: Status fields an ended server (Failed/Expired) keeps when its pod is gone: the record of the run
#: a person inspects (phase and why, which pod, when it started, expired and finished, the KV numbers).
ENDED_STATUS_FIELDS = (
    "phase",
    "reason",
    "message",
    "podName",
    "podUid",
    "startedAt",
    "expiresAt",
    "finishedAt",
    "kvCacheTokens",
    "maxConcurrency",
)


def keep_ended_record(new: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    """``new`` status with :data:`ENDED_STATUS_FIELDS` taken from ``old``: a server that ended with
    its current spec and has no pod (``plan_pods`` creates none) keeps the record of its last run.
    """
    kept = {k: v for k, v in (old or {}).items() if k in ENDED_STATUS_FIELDS}
    return {**new, **kept}


def is_current_pod(status: dict[str, Any], pod: dict[str, Any]) -> bool:
    """Whether ``pod`` is the server's current pod, so its events change the server's status.

    The pod named in ``status.podName`` is; before the server handler has recorded a pod name, a pod
    made from the spec in ``status.specHash`` (its spec-hash annotation) is. Never before the server
    handler has run (no ``specHash``), and never an old pod being replaced.
    """
    if not status.get("specHash"):
        return False
    meta = pod.get("metadata") or {}
    if status.get("podName"):
        return bool(status["podName"] == meta.get("name"))
    return bool((meta.get("annotations") or {}).get(ANNOTATION_SPEC_HASH) == status["specHash"])


def pod_deleted_status(
    server: dict[str, Any], pod_name: str, *, now: str, spec_hash: str | None = None, command: list[str] | None = None
) -> dict[str, Any]:
    """The server's status after its current pod ``pod_name`` was deleted.

    A running or pending server becomes ``Failed`` with reason ``PodDeleted`` (and ``Ready=False``):
    the operator does not start another pod for the same spec, a person changes the spec or deletes
    the VLLMServer. A server that had already ended (Failed/Expired) stays as it was. ``spec_hash``
    and ``command`` default to the stored status's.
    """
    status = server.get("status") or {}
    meta = server.get("metadata") or {}
    new = server_status(
        server,
        None,
        now=now,
        service_name=status.get("serviceName") or meta.get("name") or "",
        spec_hash=spec_hash or status["specHash"],
        command=command if command is not None else status.get("command"),
    )
    if status.get("phase") in ENDED_PHASES:
        return new
    message = f"pod {pod_name} was deleted; change the spec or delete the VLLMServer"
    new.update(phase="Failed", reason="PodDeleted", message=message)
    new["conditions"] = set_condition(
        new["conditions"], "Ready", "False", "PodDeleted", message, now=now, generation=meta.get("generation")
    )
    return new


def waits_for_node_gpu_memory(server: dict[str, Any], pod: dict[str, Any]) -> bool:
    """Whether the KV pre-flight should run again now that ``pod`` has a node.

    True when the server's ``KVCapacity`` condition is Unknown for lack of inputs (reason
    ``InsufficientInputs``: the GPU memory was unknown), its spec gives no ``resources.gpuMemory``,
    the pre-flight is on (``spec.preflight`` other than ``off``) and ``pod`` is scheduled
    (``spec.nodeName``): the node's ``nvidia.com/gpu.memory`` label can now give the GPU memory.
    The caller runs it once per pod (the label does not change under a running pod).
    """
    spec = server.get("spec") or {}
    conditions = (server.get("status") or {}).get("conditions") or []
    kv = next((c for c in conditions if c.get("type") == "KVCapacity"), None)
    return bool(
        kv
        and kv.get("status") == "Unknown"
        and kv.get("reason") == "InsufficientInputs"
        and spec.get("preflight", "warn") != "off"
        and not (spec.get("resources") or {}).get("gpuMemory")
        and (pod.get("spec") or {}).get("nodeName")
    )


def safe_status(status: dict[str, Any]) -> dict[str, Any]:
    """``status`` ready to publish: ``message`` and every condition message on one line without
    terminal control characters and with secrets redacted (:mod:`kvpilot.text.safe`), ``command``
    with ``--api-key`` values and token-shaped arguments redacted. Idempotent; other keys unchanged.
    """
    out = dict(status)
    if isinstance(out.get("message"), str):
        out["message"] = one_line(out["message"])
    if isinstance(out.get("command"), list):
        out["command"] = redact_argv(out["command"])
    if isinstance(out.get("conditions"), list):
        out["conditions"] = [
            {**c, "message": one_line(c["message"])} if isinstance(c.get("message"), str) else c
            for c in out["conditions"]
        ]
    return out


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


def after_create_conflict(existing: dict[str, Any] | None, server_uid: str | None) -> CreateConflict:
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


def status_events(old: dict[str, Any] | None, new: dict[str, Any], created: str | None = None) -> list[Event]:
    """The Events a status change posts: one per phase transition (:func:`is_transition`; reason = the
    new phase, message = its reason and message, led by ``created`` when given), else a
    ``PodCreated`` Event carrying ``created`` (what the reconcile just made, with no transition).
    """
    if is_transition(old, new):
        said = f"{new.get('reason')}: {new.get('message')}"
        message = one_line(f"{created}; {said}" if created else said, limit=EVENT_MESSAGE_LIMIT)
        return [Event(event_type(new), new.get("phase") or "Unknown", message)]
    return [Event("Normal", "PodCreated", created)] if created else []


def kv_warning_event(old: dict[str, Any] | None, condition: dict[str, Any], warning: str | None) -> Event | None:
    """A Warning Event when the pre-flight warns and the ``condition``'s type was not False already in ``old``
    status (one Event per verdict, not one per reconcile).
    """
    conditions: list[dict[str, Any]] = (old or {}).get("conditions") or []
    before: dict[str, Any] = next((c for c in conditions if c.get("type") == condition["type"]), {})
    if not warning or before.get("status") == "False":
        return None
    return Event("Warning", condition["reason"], one_line(warning, limit=EVENT_MESSAGE_LIMIT))


@dataclass(frozen=True)
class CreationNote:
    """How a reconcile announces the pod it made: ``event`` (its own ``PodCreated`` Event) or ``created``
    (the text that leads the new server's ``Pending`` transition Event, so it gets one Event), or neither.
    """

    event: Event | None = None
    created: str | None = None


def creation_note(
    plan: PodPlan,
    status: dict[str, Any] | None,
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
    if plan.delete or (status or {}).get("podName"):
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
    server: dict[str, Any], mode: str, condition: dict[str, Any], warning: str | None, *, now: str
) -> dict[str, Any] | None:
    """The ``Invalid`` status when ``preflight: enforce`` refuses the spec (the pre-flight warned that one
    request of ``maxModelLen`` cannot fit, so vLLM would refuse to start), else None (no pod is held back).
    """
    if preflight_order(mode) != "before" or not warning:
        return None
    return invalid_status(server, f"spec.engine.maxModelLen: {warning}", now=now, reason=condition["reason"])


def with_kv_condition(
    server: dict[str, Any],
    status: dict[str, Any],
    condition: dict[str, Any],
    numbers: dict[str, Any] | None,
    *,
    now: str,
) -> dict[str, Any]:
    """``status`` with the ``KVCapacity`` ``condition`` set (:func:`set_condition`, this generation) and
    ``preflight`` = ``numbers`` (None, which removes it, when the pre-flight computed none).
    """
    conditions = set_condition(
        status.get("conditions"),
        condition["type"],
        condition["status"],
        condition["reason"],
        condition["message"],
        now=now,
        generation=(server.get("metadata") or {}).get("generation"),
    )
    return {**status, "conditions": conditions, "preflight": numbers or None}


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


def current_spec(server: dict[str, Any]) -> tuple[str, list[str]] | None:
    """``(spec hash, vllm serve argv)`` of the server's spec as it is now; None when the spec is invalid
    (the reconcile reports that). The hash and the command line are the renderer's
    (:func:`kvpilot.api.spec_hash`, :func:`kvpilot.render.vllm_command`).
    """
    from kvpilot.render import vllm_command  # the renderer's templates load on first use

    try:
        spec = parse_spec(server.get("spec"))
    except SpecError:
        return None
    return spec_hash(spec), vllm_command(spec)


def pod_event_plan(server: dict[str, Any], pod: dict[str, Any], event_type: str) -> PodEventPlan:
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
    status = server.get("status") or {}
    meta = server.get("metadata") or {}
    if status.get("phase") == "Invalid" and status.get("observedGeneration") == meta.get("generation"):
        return PodEventPlan("ignore", why="the server's spec is invalid")
    digest, command = status.get("specHash"), status.get("command")
    if not digest:
        spec = current_spec(server)
        if spec is None:
            return PodEventPlan("ignore", why="no status and no valid spec yet")
        digest, command = spec
        refs = (pod.get("metadata") or {}).get("ownerReferences") or []
        if not any(ref.get("uid") == meta.get("uid") for ref in refs):
            return PodEventPlan("ignore", why="not the server's own pod")
    if not is_current_pod({**status, "specHash": digest}, pod):
        return PodEventPlan("ignore", why="an old pod being replaced, or not the server's pod")
    service_name = status.get("serviceName") or meta.get("name") or ""
    if event_type == "DELETED":
        return PodEventPlan("deleted", spec_hash=digest, command=command, service_name=service_name)
    report = pod_report(pod)
    same_pod = status.get("podUid") == (pod.get("metadata") or {}).get("uid")
    return PodEventPlan(
        "update",
        spec_hash=digest,
        command=command,
        service_name=service_name,
        read_failure_log=report.phase == "Failed" and not (same_pod and status.get("phase") == "Failed"),
        read_kv_log=report.ready and not (same_pod and status.get("kvCacheTokens") is not None),
        preflight_again=waits_for_node_gpu_memory(server, pod),
    )


# ----------------------------------------------------------------------------- the reconcile's own decisions
def is_new_server(body: dict[str, Any]) -> bool:
    """A server no reconcile has written a status for yet: its body as kopf delivered it is current
    (only this operator writes status), so it is not read again.
    """
    return not body.get("status")


def service_read_first(server: dict[str, Any]) -> bool:
    """Whether the reconcile reads the Service before creating it: when the status names one (it most
    likely exists: a read, no failed create). A new server's Service is created first (one request;
    409 -> adopt, :func:`after_create_conflict`).
    """
    return bool((server.get("status") or {}).get("serviceName"))


def reconciled_status(
    server: dict[str, Any],
    plan: PodPlan,
    pod: dict[str, Any] | None,
    *,
    now: str,
    service_name: str,
    spec_hash: str,
    command: list[str] | None,
) -> dict[str, Any]:
    """The status a reconcile writes (:func:`server_status` for ``pod``); a server that ended with this
    spec and has no pod (``plan`` creates none) keeps the record of its last run (:func:`keep_ended_record`).
    """
    status = server_status(server, pod, now=now, service_name=service_name, spec_hash=spec_hash, command=command)
    if pod is None and not plan.create:
        status = keep_ended_record(status, server.get("status"))
    return status


def pod_event_server(event: dict[str, Any]) -> str | None:
    """The server a pod watch event is about (its ``kvpilot.dev/server`` label), or None: not a server's
    pod, or not a watch event (kopf's initial listing calls the handler with ``type`` None).
    """
    if event.get("type") is None:
        return None
    labels = ((event.get("object") or {}).get("metadata") or {}).get("labels") or {}
    name = labels.get(LABEL_SERVER)
    return str(name) if name else None
