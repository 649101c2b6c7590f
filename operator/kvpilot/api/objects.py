"""Kubernetes objects as the API serves them, typed for the fields kvpilot reads and writes.

The operator reads and writes Pods, Services and VLLMServers as the JSON the API serves (no client model
layer: :mod:`kvpilot.controller.rest`); these ``TypedDict`` views give that JSON its shape where it crosses
the product's layers. Every key is optional (``total=False``): the API leaves empty fields out, so a
reader still writes ``.get(...) or {}``. The names and fields are ``k8s.io/api/core/v1``'s and
``k8s.io/apimachinery/pkg/apis/meta/v1``'s (``ObjectMeta``, ``OwnerReference``, ``PodStatus`` …); only
the fields kvpilot touches are declared, the objects carry the others unchanged.

A VLLMServer's ``spec`` and ``status`` are declared as what the API served (``object``): they become
:class:`~kvpilot.api.models.VLLMServerSpec` (:func:`kvpilot.api.parse_spec`) and
:class:`~kvpilot.api.models.VLLMServerStatus` where they are read, never passed on as JSON.
"""

from __future__ import annotations

from typing import Literal, TypedDict

from kvpilot.text.documents import JsonObject

__all__ = [
    "ConfigMap",
    "Container",
    "ContainerState",
    "ContainerStateRunning",
    "ContainerStateTerminated",
    "ContainerStateWaiting",
    "ContainerStatus",
    "JsonObject",
    "KubeObject",
    "Node",
    "ObjectMeta",
    "OwnerReference",
    "Pod",
    "PodCondition",
    "PodEvent",
    "PodList",
    "PodSpec",
    "PodStatus",
    "Service",
    "VLLMServerEvent",
    "VLLMServerObject",
    "WatchEventType",
]


class KubeObject(TypedDict, total=False):
    """Any Kubernetes object: the fields every kind has (its others are the kind's own)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta


class OwnerReference(TypedDict, total=False):
    """``metav1.OwnerReference``."""

    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ObjectMeta(TypedDict, total=False):
    """``metav1.ObjectMeta``: the fields kvpilot reads (the operator; the sandbox, which manages them all)."""

    name: str
    generateName: str
    namespace: str
    uid: str
    generation: int
    resourceVersion: str
    creationTimestamp: str
    deletionTimestamp: str
    deletionGracePeriodSeconds: int
    selfLink: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    finalizers: list[str]


class PodCondition(TypedDict, total=False):
    """``PodCondition`` (``PodScheduled``, ``Ready`` …)."""

    type: str
    status: str
    reason: str
    message: str
    lastProbeTime: str | None
    lastTransitionTime: str


class ContainerStateWaiting(TypedDict, total=False):
    """``ContainerStateWaiting``."""

    reason: str
    message: str


class ContainerStateRunning(TypedDict, total=False):
    """``ContainerStateRunning``."""

    startedAt: str


class ContainerStateTerminated(TypedDict, total=False):
    """``ContainerStateTerminated``."""

    exitCode: int
    reason: str
    message: str
    startedAt: str
    finishedAt: str


class ContainerState(TypedDict, total=False):
    """``ContainerState``: at most one of its fields is set."""

    waiting: ContainerStateWaiting
    running: ContainerStateRunning
    terminated: ContainerStateTerminated


class ContainerStatus(TypedDict, total=False):
    """``ContainerStatus``."""

    name: str
    image: str
    imageID: str
    ready: bool
    started: bool
    restartCount: int
    state: ContainerState


class PodStatus(TypedDict, total=False):
    """``PodStatus``."""

    phase: str
    reason: str
    message: str
    startTime: str
    qosClass: str
    hostIP: str
    podIP: str
    conditions: list[PodCondition]
    containerStatuses: list[ContainerStatus]


class Container(TypedDict, total=False):
    """``Container``: the fields kvpilot reads (the renderer writes the rest)."""

    name: str
    image: str
    command: list[str]
    args: list[str]


class PodSpec(TypedDict, total=False):
    """``PodSpec``: the fields kvpilot reads."""

    nodeName: str
    activeDeadlineSeconds: int
    serviceAccountName: str
    containers: list[Container]
    initContainers: list[Container]


class Pod(TypedDict, total=False):
    """A ``v1`` Pod."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


class PodList(TypedDict, total=False):
    """A ``v1`` PodList."""

    items: list[Pod]


class Service(TypedDict, total=False):
    """A ``v1`` Service (kvpilot reads its metadata; the renderer writes its spec)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta


class ConfigMap(TypedDict, total=False):
    """A ``v1`` ConfigMap."""

    metadata: ObjectMeta
    data: dict[str, str]


class Node(TypedDict, total=False):
    """A ``v1`` Node (kvpilot reads its labels)."""

    metadata: ObjectMeta


class VLLMServerObject(TypedDict, total=False):
    """A VLLMServer as the API (or kopf) serves it; ``spec`` and ``status`` as served (the module's docstring)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: object
    status: object


#: A watch event's ``type`` (``None``: kopf's initial listing calls an event handler with no type).
WatchEventType = Literal["ADDED", "MODIFIED", "DELETED"] | None


class PodEvent(TypedDict):
    """A watch event of a Pod, as kopf hands it to an event handler."""

    type: WatchEventType
    object: Pod


class VLLMServerEvent(TypedDict):
    """A watch event of a VLLMServer, as kopf hands it to an event handler."""

    type: WatchEventType
    object: VLLMServerObject
