"""An in-memory Kubernetes API that a real kopf operator, kubectl and the kubernetes client can trust.

:class:`FaithfulKubernetes` keeps the objects and serves the API's requests with a real API server's
object semantics; :mod:`kvpilot.sandbox.server` puts it on HTTP (aiohttp) and
:class:`kvpilot.sandbox.SandboxCluster` runs that on loopback in a thread. Everything is the
sandbox's own code on aiohttp's public API; from kmock it takes only the table of built-in resources,
through kmock's public API (:func:`kvpilot.sandbox.resources.builtin_resources`), so a kmock release
cannot change how the sandbox behaves. The pure pieces are in :mod:`kvpilot.sandbox.semantics`;
fault injection in :mod:`kvpilot.sandbox.faults`; Pod Security admission in
:mod:`kvpilot.sandbox.podsecurity`.

What it does as a real API server does (each in one place):

========================================  =====================================================
behaviour                                 where
========================================  =====================================================
server-set ``apiVersion``/``kind``,       ``_serve_create`` (:meth:`_new_object`)
``metadata.namespace`` from the URL,
``uid``, ``creationTimestamp``,
``generation``, ``resourceVersion``
generation bumped only when something     ``_serve_update``
outside ``metadata`` and ``status``
changes
a failed JSON-patch ``test`` → 422        ``_apply_patch`` (kopf relies on it)
watches resume from ``?resourceVersion=``  ``_serve_watch``: a bounded history (410 Gone when
without replaying stale objects           older); snapshot and subscription in one step
discovery of the built-in resources and   :mod:`kvpilot.sandbox.resources`; ``_register_crd``
of every CRD created
``pods/NAME/log`` as ``text/plain``       ``_serve_log`` from :attr:`pod_logs`; 400 before
                                          the container runs
status only through ``/status``           with a ``status`` subresource the main endpoint
                                          ignores ``status`` and ``/status`` changes only
                                          ``status``; custom resources pruned to their CRD
                                          schema (:func:`semantics.prune`)
label and field selectors                 list and watch
no event for a write that changes nothing an unchanged object keeps its resourceVersion
Pod Security admission                    pods created in a namespace labelled
                                          ``pod-security.kubernetes.io/enforce`` →
                                          403 with the plugin's message (:mod:`podsecurity`)
names, label keys/values, ownerReference  → 422 (:func:`semantics.validate_metadata`)
uids validated
========================================  =====================================================

Custom resources are also validated against their CRD's schema (422 naming the field). Also like a
real server: 409 on create of an existing name and on a stale ``metadata.resourceVersion``; pods get
``status.phase: Pending`` on create and their spec is immutable except the fields Kubernetes allows;
deleting an owner deletes its dependents (owner references, background propagation; ``Orphan``
keeps them); finalizers hold deletion (``deletionTimestamp``). Not emulated: admission webhooks,
other admission plugins, CEL validation rules, defaulting from the schema, server-side apply,
strategic-merge list semantics (treated as a JSON merge patch), graceful pod termination (a deleted
pod is gone at once: there is no kubelet), the OpenAPI documents (``/openapi/v2``, ``/openapi/v3``
answer 404; kubectl then computes its patches without them).

Legitimate API errors (404, 409, 422 …) are answered as Kubernetes ``Status`` objects. In strict
mode, requests the sandbox does not serve (an unknown resource or endpoint) and its own bugs are
also collected in :attr:`FaithfulKubernetes.errors`, which :class:`~kvpilot.sandbox.SandboxCluster`
re-raises when it stops.
"""

from __future__ import annotations

import asyncio
import collections
import random
import string
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import jsonpatch
import jsonpointer

from kvpilot.api.objects import KubeObject, Pod, PodSpec, PodStatus
from kvpilot.api.timestamps import now_rfc3339
from kvpilot.sandbox import faults, podsecurity, resources, semantics
from kvpilot.sandbox.objects import (
    CRDStatus,
    CustomResourceDefinition,
    JSONSchemaProps,
    StoredObject,
    WatchEvent,
)
from kvpilot.sandbox.resources import Resource, ResourceInfo

NAMESPACES = Resource("", "v1", "namespaces")
PODS = Resource("", "v1", "pods")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
#: Non-resource paths answered 404 on purpose (not a surprise in strict mode): the sandbox serves no
#: OpenAPI documents, and kubectl falls back without them.
ABSENT_PATHS = ("/openapi/v2", "/openapi/v3")

#: Pod spec fields an update may change (k8s.io/kubernetes pkg/apis/core/validation
#: ValidatePodUpdate): images, activeDeadlineSeconds, tolerations (additions), schedulingGates.
_POD_MUTABLE_SPEC = ("activeDeadlineSeconds", "tolerations", "schedulingGates", "nodeName")
#: ``metadata`` fields only the API server sets: a new object's are dropped, an update keeps the stored ones.
_NEW_OBJECT_DROPS: tuple[Literal["resourceVersion", "deletionTimestamp", "selfLink"], ...] = (
    "resourceVersion",
    "deletionTimestamp",
    "selfLink",
)
_UPDATE_KEEPS = ("name", "namespace", "uid", "creationTimestamp", "generation", "resourceVersion", "deletionTimestamp")


class SandboxSurpriseError(Exception):
    """A request the sandbox does not serve: strict mode re-raises it when the sandbox stops."""


class UnknownResourceError(SandboxSurpriseError):
    """A request for a resource the API does not have (no built-in, no CRD)."""


class UnknownEndpointError(SandboxSurpriseError):
    """A request for a path or method the API does not serve."""


@dataclass
class Request:
    """One request as the sandbox received it (recorded in order: :attr:`FaithfulKubernetes.requests`).

    Attributes:
        id: its number, from 0.
        method: the HTTP method (``GET``, ``POST`` …).
        path: the URL path; ``query`` its parameters; ``query_string`` as sent.
        headers: the request headers.
        data: the body decoded as JSON (None when empty or not JSON).
        token: the bearer token of its ``Authorization`` header ("" without one).
        verb: the API verb: ``list``, ``watch``, ``get``, ``create``, ``update``, ``delete``; None for discovery.
        resource, namespace, name, subresource: what the path addresses (:func:`semantics.parse_api_path`).
        transport: the connection it came on (to cut a watch); not part of equality.
    """

    id: int
    method: str
    path: str
    query: dict[str, str]
    query_string: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    data: Any = None
    token: str = ""
    verb: str | None = None
    resource: Resource | None = None
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    transport: Any = field(default=None, repr=False, compare=False)


def request_verb(method: str, parsed: semantics.ApiPath, query: dict[str, str]) -> str | None:
    """The API verb of a request on a resource path (None: not one the API serves)."""
    if not parsed.is_resource:
        return None
    if method == "GET":
        return "watch" if query.get("watch") in ("true", "1") else ("get" if parsed.name else "list")
    if method == "POST" and not parsed.name:
        return "create"
    if method in ("PATCH", "PUT") and parsed.name:
        return "update"
    if method == "DELETE" and parsed.name:
        return "delete"
    return None


@dataclass
class Reply:
    """A plain answer: HTTP ``status``, ``payload`` (JSON-shaped, or bytes), ``headers``."""

    status: int
    payload: Any
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


@dataclass
class Stream:
    """A watch: its ``events`` as they come; ``cut``: send half of the first and drop the connection."""

    events: AsyncIterator[WatchEvent]
    cut: bool = False


def _status(code: int, reason: str, message: str, **details: str | None) -> Reply:
    """A Kubernetes ``Status`` failure answer (what the clients turn into their API errors)."""
    return Reply(code, faults.status_payload(code, reason, message, **details))


def _invalid(what: str, name: str, errors: list[str], kind: str) -> Reply:
    """422 ``Invalid``: ``<what> "<name>" is invalid: <error>; <error>`` (the API server's wording)."""
    return _status(422, "Invalid", f'{what} "{name}" is invalid: ' + "; ".join(errors), name=name, kind=kind)


def _spec_changed(new: StoredObject, old: StoredObject) -> bool:
    """Whether what counts for ``metadata.generation`` changed: all but metadata and status."""
    skipped = ("metadata", "status", "apiVersion", "kind")
    return {k: v for k, v in new.items() if k not in skipped} != {k: v for k, v in old.items() if k not in skipped}


def _pod_spec_changed(new: object, old: object) -> bool:
    """Whether a pod's ``spec`` changed beyond what an update may change (:data:`_POD_MUTABLE_SPEC`, images)."""
    immutable = []
    for spec in (new, old):
        kept = {k: v for k, v in (spec if isinstance(spec, dict) else {}).items() if k not in _POD_MUTABLE_SPEC}
        for key in ("containers", "initContainers"):
            if key in kept:
                kept[key] = [{k: v for k, v in c.items() if k != "image"} for c in kept[key]]
        immutable.append(kept)
    return immutable[0] != immutable[1]


#: Called with ``(watch event type, resource, stored object)`` after every change
#: (:attr:`FaithfulKubernetes.observers`).
Observer = Callable[[str, Resource, StoredObject], None]


class FaithfulKubernetes:
    """The sandbox's API: its objects and their semantics (see the module's docstring).

    Runs in one asyncio loop (:mod:`kvpilot.sandbox.server` serves it): every handler changes the
    store without awaiting in between, so each request is atomic, as one etcd transaction is.

    Attributes:
        strict: collect the requests it does not serve (and its own failures) in :attr:`errors`.
        history_limit: watch events kept per resource for ``?resourceVersion=`` resumption.
        resources: what discovery serves (the built-ins, then every CRD created).
        pod_logs: ``{(namespace, pod name): text}`` served by ``pods/NAME/log`` once the
            container has started (the sandbox's kubelet writes it).
        faults: injected failures (:class:`kvpilot.sandbox.faults.Fault`), checked in order before a
            resource request is served; the first matching one that is not spent answers instead.
        requests: every request received, in order.
        errors: the surprises of strict mode.
        observers: called after every change (e.g. a benchmark timing creates).
    """

    def __init__(self, *, strict: bool = True, history_limit: int = 10_000) -> None:
        self.strict = strict
        self.history_limit = history_limit
        self.resources: dict[Resource, ResourceInfo] = resources.builtin_resources()
        self.pod_logs: dict[tuple[str, str], str] = {}
        self.faults: list[faults.Fault] = []
        self.requests: list[Request] = []
        self.errors: list[Exception] = []
        self.observers: list[Observer] = []
        self._rv = 0
        #: ``{resource: {(namespace, name): object}}`` of live objects, in creation order.
        self._store: dict[Resource, dict[tuple[str | None, str], StoredObject]] = {}
        self._history: dict[Resource, collections.deque[tuple[int, WatchEvent]]] = {}
        self._history_floor: dict[Resource, int] = {}
        self._schemas: dict[Resource, JSONSchemaProps | None] = {}
        #: the queues of the open watches, by resource; None in a queue ends its watch (:meth:`end_watches`)
        self._watchers: dict[Resource, set[asyncio.Queue[WatchEvent | None]]] = {}
        for ns in DEFAULT_NAMESPACES:
            body: StoredObject = {
                "metadata": {"name": ns},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }
            self._commit(NAMESPACES, None, ns, self._new_object(NAMESPACES, None, body), "ADDED")

    # ------------------------------------------------------------------ serving
    async def handle(self, request: Request) -> Reply | Stream:
        """Serve one request: a resource request by its verb, else discovery.

        Raises:
            Exception: a bug of the sandbox (the server answers 500 and records it).
        """
        self.requests.append(request)
        if request.resource is None or request.verb is None:
            return self._discovery(request)
        info = self.resources.get(request.resource)
        if info is None:  # a surprise for the code under test: strict mode reports it
            return self._surprise(UnknownResourceError(f"{request.method} {request.path}: no such resource"))
        fault = faults.first_match(
            self.faults, request.verb, request.resource.plural, request.subresource, request.namespace
        )
        if fault is not None and not fault.cut_watch:
            code, payload, headers = fault.answer(request.name)
            return Reply(code, payload, headers)
        if request.verb == "watch":
            return Stream(self._serve_watch(request), cut=fault is not None)
        serve = {
            "list": self._serve_list,
            "get": self._serve_fetch,
            "create": self._serve_create,
            "update": self._serve_update,
            "delete": self._serve_delete,
        }[request.verb]
        return serve(request, info)

    def _surprise(self, error: SandboxSurpriseError) -> Reply:
        if self.strict:
            self.errors.append(error)
        return _status(404, "NotFound", str(error))

    def _discovery(self, request: Request) -> Reply:
        if request.method != "GET":
            return self._surprise(UnknownEndpointError(f"{request.method} {request.path}: not served"))
        path = request.path.rstrip("/") or "/"
        parsed = semantics.parse_api_path(path)
        parts = [p for p in path.split("/") if p]
        document: resources.DiscoveryDocument | dict[str, str] | None = None
        if path == "/":
            document = resources.root_paths(self.resources)
        elif path == "/version":
            document = dict(resources.SERVER_VERSION)
        elif path == "/api":
            document = resources.api_versions()
        elif path == "/apis":
            document = resources.api_group_list(self.resources)
        elif parts[0] == "apis" and len(parts) == 2:
            document = resources.api_group(self.resources, parts[1])
        elif parsed.group is not None and parsed.version and not parsed.is_resource and len(parts) <= 3:
            document = resources.api_resource_list(self.resources, parsed.group, parsed.version)
        elif path in ABSENT_PATHS:
            return _status(404, "NotFound", f"{path}: this sandbox publishes no OpenAPI documents")
        if document is None:
            return self._surprise(UnknownEndpointError(f"GET {request.path}: no such path"))
        return Reply(200, document)

    def end_watches(self) -> None:
        """End every open watch (the API server stopping closes its streams; clients watch anew)."""
        for queues in self._watchers.values():
            for queue in queues:
                queue.put_nowait(None)

    # ------------------------------------------------------------------ helpers
    def _get(self, res: Resource, ns: str | None, name: str) -> StoredObject | None:
        obj = (self._store.get(res) or {}).get((ns, name))
        return semantics.clone(obj) if obj is not None else None

    def _live(self, res: Resource, keep: Callable[[StoredObject], bool] | None = None) -> list[StoredObject]:
        """Copies of the live objects of ``res`` for which ``keep`` is true, in creation order (the
        filter reads the stored objects; only what it keeps is copied).
        """
        return [semantics.clone(o) for o in (self._store.get(res) or {}).values() if keep is None or keep(o)]

    def get(self, res: Resource, ns: str | None, name: str) -> StoredObject | None:
        """A copy of the stored object, or None."""
        return self._get(res, ns, name)

    def objects(self, res: Resource, ns: str | None = None) -> list[StoredObject]:
        """Copies of the live objects of ``res`` (in ``ns`` when given), in creation order."""
        return self._live(res, None if ns is None else lambda o: o["metadata"].get("namespace") == ns)

    def _new_object(self, res: Resource, ns: str | None, body: StoredObject) -> StoredObject:
        info = self.resources.get(res)
        obj = semantics.clone(body)
        obj["apiVersion"] = res.api_version
        obj["kind"] = info.kind if info and info.kind else res.plural.capitalize()
        meta = obj.setdefault("metadata", {})
        for name in _NEW_OBJECT_DROPS:
            meta.pop(name, None)
        if ns is not None:
            meta["namespace"] = ns
        meta.update({"uid": str(uuid.uuid4()), "creationTimestamp": now_rfc3339(), "generation": 1})
        return obj

    def _commit(
        self,
        res: Resource,
        ns: str | None,
        name: str,
        obj: StoredObject | None,
        kind: str,
        last: StoredObject | None = None,
    ) -> StoredObject:
        """Store a new state (``obj``) or a deletion (``obj=None``, ``last`` = final state) and
        publish the watch event; returns a copy of what was stored.
        """
        self._rv += 1
        state = obj if obj is not None else last
        if state is None:
            raise ValueError("_commit: give the new state (obj) or, for a deletion, the final one (last)")
        shown = semantics.clone(state)
        shown["metadata"]["resourceVersion"] = str(self._rv)
        live = self._store.setdefault(res, {})
        if obj is None:
            live.pop((ns, name), None)
        else:
            live[(ns, name)] = shown
        event: WatchEvent = {"type": kind, "object": semantics.clone(shown)}
        history = self._history.setdefault(res, collections.deque())
        history.append((self._rv, event))
        while len(history) > self.history_limit:
            self._history_floor[res] = history.popleft()[0]
        for queue in self._watchers.get(res, ()):
            queue.put_nowait(event)
        for observe in self.observers:
            observe(kind, res, shown)
        return semantics.clone(shown)

    def _selectors(self, request: Request) -> tuple[list[semantics.Requirement], list[semantics.Requirement]]:
        return (
            semantics.parse_label_selector(request.query.get("labelSelector")),
            semantics.parse_field_selector(request.query.get("fieldSelector")),
        )

    @staticmethod
    def _selected(
        obj: StoredObject,
        request: Request,
        labels: list[semantics.Requirement],
        fields: list[semantics.Requirement],
    ) -> bool:
        meta = obj.get("metadata", {})
        return (
            (request.namespace is None or meta.get("namespace") == request.namespace)
            and (request.name is None or meta.get("name") == request.name)
            and semantics.match_labels(meta.get("labels"), labels)
            and semantics.match_fields(obj, fields)
        )

    def _prune(self, res: Resource, obj: StoredObject) -> StoredObject:
        schema = self._schemas.get(res)
        if not schema:
            return obj
        props = schema.get("properties") or {}
        for part in semantics.SCHEMA_PARTS:
            if part in obj and part in props:
                obj[part] = semantics.prune(obj[part], props[part])
            elif part in obj and not schema.get("x-kubernetes-preserve-unknown-fields"):
                del obj[part]
        return obj

    @staticmethod
    def _not_found(res: Resource, name: str) -> Reply:
        return _status(
            404, "NotFound", f'{res.qualified} "{name}" not found', name=name, group=res.group, kind=res.plural
        )

    # ------------------------------------------------------------------ CRDs
    def _register_crd(self, crd: CustomResourceDefinition) -> None:
        for res, (info, schema) in resources.crd_resources(crd).items():
            self.resources[res] = info
            self._schemas[res] = schema

    @staticmethod
    def _crd_status(crd: CustomResourceDefinition) -> CRDStatus:
        now = now_rfc3339()
        return {
            "acceptedNames": crd.get("spec", {}).get("names", {}),
            "storedVersions": [v["name"] for v in crd.get("spec", {}).get("versions", []) if v.get("storage")],
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                    "lastTransitionTime": now,
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                    "lastTransitionTime": now,
                },
            ],
        }

    # ------------------------------------------------------------------ reads
    def _serve_list(self, request: Request, info: ResourceInfo) -> Reply:
        res = _resource_of(request)
        try:
            labels, fields = self._selectors(request)
        except ValueError as exc:
            return _status(400, "BadRequest", str(exc))
        items = self._live(res, lambda o: self._selected(o, request, labels, fields))
        return Reply(
            200,
            {
                "apiVersion": res.api_version,
                "kind": f"{info.kind}List",
                "metadata": {"resourceVersion": str(self._rv)},
                "items": items,
            },
        )

    def _serve_fetch(self, request: Request, _info: ResourceInfo) -> Reply:
        res, name = _resource_of(request), _name_of(request)
        obj = self._get(res, request.namespace, name)
        if obj is None:
            return self._not_found(res, name)
        if request.subresource == "log" and res == PODS:
            return self._serve_log(request, cast(Pod, obj))
        if request.subresource not in (None, "status"):
            return self._surprise(UnknownEndpointError(f"GET {request.path}: subresource not served"))
        return Reply(200, obj)

    def _serve_log(self, request: Request, pod: Pod) -> Reply:
        name = pod["metadata"]["name"]
        containers = [c["name"] for c in pod.get("spec", {}).get("containers", [])]
        container = request.query.get("container") or (containers[0] if len(containers) == 1 else None)
        if container is None:
            return _status(
                400, "BadRequest", f"a container name must be specified for pod {name}, choose one of: {containers}"
            )
        if container not in containers:
            return _status(400, "BadRequest", f"container {container} is not valid for pod {name}")
        statuses = {s.get("name"): s for s in pod.get("status", {}).get("containerStatuses") or []}
        state = statuses.get(container, {}).get("state") or {}
        if "running" not in state and "terminated" not in state:
            waiting = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
            return _status(400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: {waiting}')
        text = self.pod_logs.get((pod["metadata"].get("namespace") or "", name), "")
        if "tailLines" in request.query:
            lines = text.splitlines(keepends=True)
            n = int(request.query["tailLines"])
            text = "".join(lines[-n:]) if n > 0 else ""
        data = text.encode("utf-8")
        if "limitBytes" in request.query:
            data = data[: int(request.query["limitBytes"])]
        return Reply(200, data, content_type="text/plain")

    async def _serve_watch(self, request: Request) -> AsyncIterator[WatchEvent]:  # noqa: C901
        res = _resource_of(request)
        try:
            labels, fields = self._selectors(request)
        except ValueError as exc:
            yield {"type": "ERROR", "object": _status(400, "BadRequest", str(exc)).payload}
            return
        since = request.query.get("resourceVersion") or ""
        initial_events = request.query.get("sendInitialEvents") == "true"
        timeout = float(request.query["timeoutSeconds"]) if request.query.get("timeoutSeconds") else None
        # The snapshot and the subscription are taken without an await in between: no event is lost.
        queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
        self._watchers.setdefault(res, set()).add(queue)
        backlog: list[WatchEvent]
        if since in ("", "0") or initial_events:
            backlog = [
                {"type": "ADDED", "object": o}
                for o in self._live(res, lambda o: self._selected(o, request, labels, fields))
            ]
            if initial_events:
                info = self.resources[res]
                bookmark: StoredObject = {
                    "kind": info.kind,
                    "apiVersion": res.api_version,
                    "metadata": {
                        "resourceVersion": str(self._rv),
                        "annotations": {"k8s.io/initial-events-end": "true"},
                    },
                }
                backlog.append({"type": "BOOKMARK", "object": bookmark})
        elif int(since) < self._history_floor.get(res, 0):
            gone = _status(410, "Expired", f"too old resource version: {since} ({self._rv})").payload
            backlog = [{"type": "ERROR", "object": gone}]
        else:
            backlog = [semantics.clone(ev) for rv, ev in self._history.get(res, ()) if rv > int(since)]
        try:
            for event in backlog:
                if event["type"] in ("ERROR", "BOOKMARK") or self._selected(event["object"], request, labels, fields):
                    yield event
                if event["type"] == "ERROR":
                    return
            async with asyncio.timeout(timeout):
                while (live := await queue.get()) is not None:
                    if self._selected(live["object"], request, labels, fields):
                        yield live
        except TimeoutError:
            return
        finally:
            self._watchers[res].discard(queue)

    # ------------------------------------------------------------------ writes
    def _serve_create(self, request: Request, info: ResourceInfo) -> Reply:  # noqa: C901
        res, data = _resource_of(request), request.data
        if not isinstance(data, dict):
            return _status(400, "BadRequest", "the request body must be a JSON object")
        body = cast(StoredObject, data)  # the object as posted: its metadata is validated below
        meta = body.setdefault("metadata", {})
        ns = None
        if info.namespaced:
            if request.namespace and meta.get("namespace") and meta["namespace"] != request.namespace:
                return _status(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            ns = request.namespace or meta.get("namespace") or "default"
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
        name = meta.get("name") or ""
        kind = info.kind or res.plural
        errors = semantics.validate_metadata(body, dns1035_name=res.plural == "services" and not res.group)
        if errors:
            return _invalid(kind, name, errors, kind)
        namespace = self._get(NAMESPACES, None, ns) if ns is not None else None
        if ns is not None and namespace is None:
            return _status(404, "NotFound", f'namespaces "{ns}" not found', name=ns, kind="namespaces")
        if res == PODS and (enforced := podsecurity.enforced_level(cast(KubeObject | None, namespace))) is not None:
            found = podsecurity.violations(cast(podsecurity.PodSpec, body.get("spec") or {}), enforced[0])
            if found:
                message = podsecurity.admission_message(name, *enforced, found)
                return _status(403, "Forbidden", message, name=name, kind="pods")
        if (self._store.get(res) or {}).get((ns, name)) is not None:
            return _status(409, "AlreadyExists", f'{res.qualified} "{name}" already exists', name=name, kind=res.plural)
        obj = self._new_object(res, ns, body)
        if "status" in info.subresources:
            obj.pop("status", None)
        if res == PODS:
            obj["status"] = {"phase": "Pending", "qosClass": "Burstable"}
        if res == CRDS:
            crd = cast(CustomResourceDefinition, obj)
            self._register_crd(crd)
            obj["status"] = self._crd_status(crd)
        obj = self._prune(res, obj)
        errors = semantics.schema_errors(obj, self._schemas.get(res))
        if errors:
            return _invalid(f"{kind}.{res.group}", name, errors, kind)
        return Reply(201, self._commit(res, ns, name, obj, "ADDED"))

    @staticmethod
    def _apply_patch(request: Request, current: StoredObject) -> StoredObject | Reply:
        content_type = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        body = request.data
        if request.method == "PUT":
            new = semantics.clone(body)
        elif content_type == "application/json-patch+json":
            try:
                new = jsonpatch.apply_patch(current, body)
            except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
                # kopf relies on this 422 for its resourceVersion `test`
                return _status(422, "Invalid", f"the server rejected our request due to an error in our request: {exc}")
        elif content_type in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            new = semantics.merge_patch(current, body)
        else:
            return _status(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - "
                f"accepted media types include: application/json-patch+json, "
                f"application/merge-patch+json (got {content_type!r})",
            )
        if not isinstance(new, dict):
            return _status(422, "Invalid", "the patched object is not a JSON object")
        wanted_rv = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        if wanted_rv and wanted_rv != current["metadata"].get("resourceVersion"):
            return _status(
                409,
                "Conflict",
                f"Operation cannot be fulfilled on {_resource_of(request).plural} "
                f'"{current["metadata"]["name"]}": the object has been modified; '
                f"please apply your changes to the latest version and try again",
            )
        return cast(StoredObject, new)

    def _serve_update(self, request: Request, info: ResourceInfo) -> Reply:  # noqa: C901
        res, ns, name, sub = _resource_of(request), request.namespace, _name_of(request), request.subresource
        if sub not in (None, "status") or (sub == "status" and "status" not in info.subresources):
            return self._surprise(UnknownEndpointError(f"{request.method} {request.path}: subresource not served"))
        current = self._get(res, ns, name)
        if current is None:
            return self._not_found(res, name)
        new = self._apply_patch(request, current)
        if isinstance(new, Reply):
            return new
        if "status" in info.subresources:  # /status changes only status; the main object never
            if sub == "status":
                new = {**current, "status": new.get("status")}
            else:
                new["status"] = current.get("status")
            if new.get("status") is None:
                new.pop("status", None)
        meta = new.setdefault("metadata", {})
        fields = cast(dict[str, object], meta)  # the same mapping, field by field
        for key in _UPDATE_KEEPS:
            if key in current["metadata"]:
                fields[key] = current["metadata"].get(key)
            else:
                fields.pop(key, None)
        new["apiVersion"], new["kind"] = current["apiVersion"], current["kind"]
        errors = semantics.validate_metadata(new, dns1035_name=res.plural == "services" and not res.group)
        if res == PODS and _pod_spec_changed(new.get("spec"), current.get("spec")):
            errors.append(
                "spec: Forbidden: pod updates may not change fields other than "
                "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing "
                "tolerations)"
            )
        if errors:
            return _invalid(current["kind"], name, errors, current["kind"])
        new = self._prune(res, new)
        errors = semantics.schema_errors(new, self._schemas.get(res))
        if errors:
            return _invalid(current["kind"], name, errors, current["kind"])
        if new == current:
            return Reply(200, current)  # a write that changes nothing: same resourceVersion, no watch event
        if _spec_changed(new, current):
            meta["generation"] = current["metadata"].get("generation", 1) + 1
        if res == CRDS:
            self._register_crd(cast(CustomResourceDefinition, new))
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return Reply(200, self._delete_now(res, ns, name, new))
        return Reply(200, self._commit(res, ns, name, new, "MODIFIED"))

    def _delete_now(
        self, res: Resource, ns: str | None, name: str, last: StoredObject, orphan: bool = False
    ) -> StoredObject:
        """Remove an object and, like the garbage collector, its dependents (unless ``orphan``,
        ``propagationPolicy: Orphan``).
        """
        shown = self._commit(res, ns, name, None, "DELETED", last=last)
        uid = last["metadata"].get("uid")
        for r, objects in list(self._store.items()):
            if orphan and res != NAMESPACES:
                break
            for (n, nm), raw in list(objects.items()):
                owned = any(ref.get("uid") == uid for ref in raw["metadata"].get("ownerReferences") or [])
                if (owned or (res == NAMESPACES and n == name)) and (n, nm) in objects:
                    self._mark_or_delete(r, n, nm, semantics.clone(raw))
        if res == CRDS:
            for gone in resources.crd_resources(cast(CustomResourceDefinition, last)):
                self.resources.pop(gone, None)
                self._schemas.pop(gone, None)
        return shown

    def _mark_or_delete(
        self, res: Resource, ns: str | None, name: str, obj: StoredObject, orphan: bool = False
    ) -> StoredObject:
        meta = obj["metadata"]
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return obj
            meta["deletionTimestamp"] = now_rfc3339()
            meta["deletionGracePeriodSeconds"] = 0
            return self._commit(res, ns, name, obj, "MODIFIED")
        return self._delete_now(res, ns, name, obj, orphan)

    def _serve_delete(self, request: Request, _info: ResourceInfo) -> Reply:
        res, ns, name = _resource_of(request), request.namespace, _name_of(request)
        current = self._get(res, ns, name)
        if current is None:
            return self._not_found(res, name)
        options = request.data if isinstance(request.data, dict) else {}
        policy = request.query.get("propagationPolicy") or options.get("propagationPolicy")
        return Reply(200, self._mark_or_delete(res, ns, name, current, orphan=policy == "Orphan"))

    # ------------------------------------------------------------------ for the kubelet stand-in
    def write_pod_status(
        self, ns: str, name: str, status: PodStatus, spec_changes: PodSpec | None = None
    ) -> Pod | None:
        """Replace a pod's ``status`` (and merge ``spec_changes``, e.g. the scheduler's ``nodeName``) as
        the scheduler and kubelet do; None when the pod is gone. Emits MODIFIED only when something changed.
        """
        res = PODS
        current = self._get(res, ns, name)
        if current is None:
            return None
        new = semantics.clone(current)
        new["status"] = semantics.clone(status)
        if spec_changes:
            new["spec"] = semantics.merge_patch(new.get("spec"), spec_changes)
        if new == current:
            return cast(Pod, current)
        return cast(Pod, self._commit(res, ns, name, new, "MODIFIED"))


def _resource_of(request: Request) -> Resource:
    """The request's resource: set for every request :meth:`FaithfulKubernetes.handle` serves by verb."""
    if request.resource is None:  # pragma: no cover - handle() checks
        raise UnknownResourceError(f"{request.method} {request.path}: no resource")
    return request.resource


def _name_of(request: Request) -> str:
    """The object name of a fetch, update or delete (their verbs need a named path)."""
    if request.name is None:  # pragma: no cover - request_verb() checks
        raise UnknownEndpointError(f"{request.method} {request.path}: no object name")
    return request.name
