"""Pod status as the scheduler and kubelet write it, for a sandbox without nodes (pure).

There is no scheduler or kubelet behind :class:`~kvpilot.sandbox.emulator.FaithfulKubernetes`;
the demo and the tests play their part *openly* by writing the pod statuses these functions
build. The shapes follow ``k8s.io/api/core/v1`` ``PodStatus`` as a kubelet fills it:
``PodScheduled``/``Initialized``/``ContainersReady``/``Ready`` conditions, one
``containerStatuses`` entry per container with exactly one of ``waiting``/``running``/
``terminated``, ``startTime`` set when the kubelet accepts the pod (the clock
``activeDeadlineSeconds`` counts from), and ``reason: DeadlineExceeded`` with phase
``Failed`` when that deadline ends the pod (kubelet ``pkg/kubelet/active_deadline.go``).

Every function takes the current Pod and an RFC 3339 timestamp and returns a new ``status``.
"""

from __future__ import annotations

import copy

from kvpilot.api.objects import ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodCondition, PodStatus

#: The scheduler's message when no node has a free GPU (format of the scheduler's FitError).
UNSCHEDULABLE_GPU = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: "
    "3 No preemption victims found for incoming pod."
)
#: kubelet's message for a pod past ``activeDeadlineSeconds`` (pkg/kubelet/active_deadline.go).
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"


def _condition(
    type_: str, status: bool, now: str, reason: str | None = None, message: str | None = None
) -> PodCondition:
    cond: PodCondition = {
        "type": type_,
        "status": "True" if status else "False",
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def _containers(pod: Pod, state: ContainerState, *, ready: bool, started: bool) -> list[ContainerStatus]:
    return [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "ready": ready,
            "started": started,
            "restartCount": 0,
            "state": copy.deepcopy(state),
        }
        for c in pod.get("spec", {}).get("containers", [])
    ]


def _base(pod: Pod) -> PodStatus:
    old = pod.get("status") or {}
    status: PodStatus = {"qosClass": old.get("qosClass", "Burstable")}
    if old.get("startTime"):
        status["startTime"] = old["startTime"]
    return status


def unschedulable(pod: Pod, now: str, message: str = UNSCHEDULABLE_GPU) -> PodStatus:
    """The scheduler found no node: phase Pending, ``PodScheduled=False`` reason ``Unschedulable``."""
    status = _base(pod)
    status.update(
        {"phase": "Pending", "conditions": [_condition("PodScheduled", False, now, "Unschedulable", message)]}
    )
    return status


def scheduled(pod: Pod, now: str) -> PodStatus:
    """Bound to a node, image pulling: Pending, containers waiting ``ContainerCreating``, startTime set."""
    status = _base(pod)
    status.update(
        {
            "phase": "Pending",
            "startTime": _base(pod).get("startTime", now),
            "hostIP": "10.0.0.7",
            "podIP": "10.244.1.23",
            "conditions": [
                _condition("Initialized", True, now),
                _condition("ContainersReady", False, now, "ContainersNotReady"),
                _condition("Ready", False, now, "ContainersNotReady"),
                _condition("PodScheduled", True, now),
            ],
            "containerStatuses": _containers(
                pod, {"waiting": {"reason": "ContainerCreating"}}, ready=False, started=False
            ),
        }
    )
    return status


def running(pod: Pod, now: str, *, ready: bool = False) -> PodStatus:
    """Container started (vLLM loading, probes not yet passing) or, with ``ready``, serving."""
    status = scheduled(pod, now)
    started_at = now
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        started_at = (cs.get("state", {}).get("running") or {}).get("startedAt", started_at)
    status.update(
        {
            "phase": "Running",
            "containerStatuses": _containers(pod, {"running": {"startedAt": started_at}}, ready=ready, started=True),
        }
    )
    reason = None if ready else "ContainersNotReady"
    status["conditions"] = [
        _condition("Initialized", True, now),
        _condition("ContainersReady", ready, now, reason),
        _condition("Ready", ready, now, reason),
        _condition("PodScheduled", True, now),
    ]
    return status


def terminated(
    pod: Pod,
    now: str,
    *,
    exit_code: int,
    reason: str,
    message: str = "",
    pod_reason: str | None = None,
    pod_message: str | None = None,
) -> PodStatus:
    """The container ended (``restartPolicy: Never``): phase Failed (or Succeeded for exit 0).

    ``message`` is the container's termination message (with
    ``FallbackToLogsOnError``, the tail of its log when the file is empty).
    """
    status = running(pod, now)
    term: ContainerStateTerminated = {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": status["containerStatuses"][0]["state"]["running"]["startedAt"]
        if status.get("containerStatuses")
        else now,
        "finishedAt": now,
    }
    if message:
        term["message"] = message
    status.update(
        {
            "phase": "Succeeded" if exit_code == 0 else "Failed",
            "containerStatuses": _containers(pod, {"terminated": term}, ready=False, started=False),
        }
    )
    status["conditions"] = [
        _condition("Initialized", True, now),
        _condition("ContainersReady", False, now, "PodFailed"),
        _condition("Ready", False, now, "PodFailed"),
        _condition("PodScheduled", True, now),
    ]
    if pod_reason:
        status["reason"] = pod_reason
    if pod_message:
        status["message"] = pod_message
    return status


def deadline_exceeded(pod: Pod, now: str) -> PodStatus:
    """``activeDeadlineSeconds`` passed: the kubelet kills the container (SIGKILL → 137) and the
    pod ends Failed with reason ``DeadlineExceeded``.
    """
    return terminated(
        pod, now, exit_code=137, reason="Error", pod_reason="DeadlineExceeded", pod_message=DEADLINE_MESSAGE
    )
