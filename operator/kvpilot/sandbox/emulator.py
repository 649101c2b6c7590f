"""A kmock 0.8 Kubernetes emulator that a real kopf operator and the kubernetes client can trust.

:class:`FaithfulKubernetes` subclasses :class:`kmock.KubernetesEmulator` and keeps kmock's
machinery (the aiohttp server, request recording, the reaction DSL, discovery, strict mode,
``kmock.objects`` for assertions) while replacing its object semantics with a real API
server's. Every gap between stock kmock 0.8 and a real API server that kopf or the operator
notices is closed here, each in one place:

========================================  =====================================================
gap in kmock 0.8                          what this class does (where)
========================================  =====================================================
objects stored exactly as posted          sets ``apiVersion``/``kind``, ``metadata.namespace``
                                          from the URL, ``uid``, ``creationTimestamp``,
                                          ``generation``, ``resourceVersion`` (``_serve_create``)
generation on every write                 bumped only when something outside ``metadata`` and
                                          ``status`` changes (``_serve_update``)
failed JSON-patch ``test`` → 500          HTTP 422 Invalid, as kopf expects (``_apply_patch``)
watches replay everything, lose writes    ``?resourceVersion=N`` replays only newer events from
                                          a bounded history (410 Gone when older); snapshot and
                                          bus subscription taken under one lock (``_serve_watch``)
nothing discoverable                      ``resources.load_bundled()`` plus a discovery entry for
                                          every CRD created (``_register_crd``)
``/api/v1/namespaces`` mis-parsed         own URL parser (:func:`semantics.parse_api_path`)
``/api/v1`` says ``groupVersion: /v1``    ``v1``, as the API server answers, so kubectl maps the
                                          core kinds (Namespace, ServiceAccount ...) (``_serve_version``)
``pods/NAME/log`` returns the Pod JSON    ``text/plain`` from :attr:`pod_logs`; 400 before the
                                          container runs (``_serve_log``)
status writable through the main object   with a ``status`` subresource, the main endpoint
                                          ignores ``status`` and ``/status`` changes only
                                          ``status``; custom resources are pruned to their CRD
                                          schema (:func:`semantics.prune`)
no selectors                              ``labelSelector`` and ``fieldSelector`` on list/watch
no-op writes emit events                  an unchanged object keeps its resourceVersion, no event
no admission                              Pod Security ``baseline``/``restricted`` for pods created in
                                          a namespace labelled ``pod-security.kubernetes.io/enforce``
                                          → 403 with the plugin's message (:mod:`podsecurity`)
any label value accepted                  names, label keys/values, ownerReference uids
                                          validated → 422 (:func:`semantics.validate_metadata`)
========================================  =====================================================

Custom resources are also validated against their CRD's schema (422 naming the field; with
jsonschema installed). Also like a real server: 409 on create of an existing name and on a stale
``metadata.resourceVersion``; pods get ``status.phase: Pending`` on create and their spec is
immutable except the fields Kubernetes allows; deleting an owner deletes its dependents
(owner references, background propagation); finalizers hold deletion
(``deletionTimestamp``). Not emulated: admission webhooks, other admission plugins, CEL validation
rules, defaulting from the schema, server-side apply, strategic-merge list semantics (treated as a JSON merge patch),
graceful pod termination (a deleted pod is gone at once: there is no kubelet).

Legitimate API errors (404, 409, 422 …) are answered as Kubernetes ``Status`` objects, not
raised, so kmock's ``strict`` mode only reports real surprises: unknown resources or
endpoints and bugs.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import json
import random
import string
import uuid
import warnings
from collections.abc import AsyncIterator, Callable
from typing import Any, Self

import aiohttp.web
import attrs
import jsonpatch
import jsonpointer
import kmock
from kmock._internal import apps, enums, rendering  # the pieces kmock's own handlers use

from kvpilot.api.timestamps import now_rfc3339
from kvpilot.sandbox import podsecurity, semantics

NAMESPACES = kmock.resource("", "v1", "namespaces")
PODS = kmock.resource("", "v1", "pods")
CRDS = kmock.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

#: Pod spec fields an update may change (k8s.io/kubernetes pkg/apis/core/validation
#: ValidatePodUpdate): images, activeDeadlineSeconds, tolerations (additions), schedulingGates.
_POD_MUTABLE_SPEC = ("activeDeadlineSeconds", "tolerations", "schedulingGates", "nodeName")


def _status(code: int, reason: str, message: str, **details: Any) -> kmock.Response:
    """A Kubernetes ``Status`` failure response (what the kubernetes client turns into ApiException)."""
    return kmock.Response(
        status=code,
        payload={
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "details": details,
            "code": code,
        },
    )


def _invalid(what: str, name: str, errors: list[str], kind: str) -> kmock.Response:
    """422 ``Invalid``: ``<what> "<name>" is invalid: <error>; <error>`` (the API server's wording)."""
    return _status(422, "Invalid", f'{what} "{name}" is invalid: ' + "; ".join(errors), name=name, kind=kind)


#: ``reason`` of the Kubernetes ``Status`` a fault answers with, by HTTP code (apimachinery
#: ``metav1.StatusReason``: k8s.io/apimachinery/pkg/apis/meta/v1/types.go).
FAULT_REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    409: "AlreadyExists",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@attrs.define
class Fault:
    """A failure the sandbox answers instead of serving a matching request (fault injection).

    Attributes:
        verb: ``create``, ``update`` (PATCH/PUT), ``delete``, ``get``, ``list`` or ``watch``.
        plural: the resource (``pods``, ``services``, ``vllmservers``, ``events``).
        subresource: ``status`` for ``/status`` writes; None for the object itself.
        code: the HTTP status answered (a Kubernetes ``Status`` with the reason of
            :data:`FAULT_REASONS`); ignored with ``cut_watch``.
        message: the ``Status`` message (an admission webhook's or PodSecurity's text for a 403).
        times: how many matching requests fail (then the fault is spent).
        retry_after: seconds for a ``Retry-After`` header (what a 429 carries), or None.
        cut_watch: for ``watch``: the stream sends half of its next event's JSON line and closes.
        namespace: only requests in this namespace; None for any.
        hits: matching requests answered so far.
    """

    verb: str
    plural: str
    subresource: str | None = None
    code: int = 500
    message: str = "injected fault"
    times: int = 1
    retry_after: int | None = None
    cut_watch: bool = False
    namespace: str | None = None
    hits: int = 0

    def matches(self, request: rendering.Request) -> bool:
        """True when ``request`` is one this fault answers (and it is not spent)."""
        if self.hits >= self.times or request.resource is None or request.resource.plural != self.plural:
            return False
        verbs: dict[enums.action | None, str] = {
            enums.action.CREATE: "create",
            enums.action.UPDATE: "update",
            enums.action.DELETE: "delete",
            enums.action.FETCH: "get",
            enums.action.LIST: "list",
            enums.action.WATCH: "watch",
        }
        verb = verbs.get(request.action)
        return (
            verb == self.verb
            and (request.subresource or None) == self.subresource
            and (self.namespace is None or request.namespace == self.namespace)
        )

    def response(self, request: rendering.Request) -> kmock.Response:
        """The ``Status`` failure this fault answers with."""
        response = _status(self.code, FAULT_REASONS.get(self.code, "InternalError"), self.message, name=request.name)
        if self.retry_after is not None:
            response = kmock.Response(
                status=response.status, payload=response.payload, headers={"Retry-After": str(self.retry_after)}
            )
        return response


async def _cut_after_half_an_event(stream: AsyncIterator[Any], request: rendering.Request) -> AsyncIterator[Any]:
    """Pass a watch stream's header flush through, send half of the next event's JSON line, then
    drop the connection without the end of the chunked body (what a network cut looks like).
    """
    async for item in stream:
        if isinstance(item, bytes):
            yield item
            continue
        line = json.dumps(item).encode()
        yield line[: len(line) // 2]
        raw = request._raw_request  # kmock keeps the aiohttp request privately
        transport = raw.transport if raw is not None else None
        if transport is not None:
            transport.close()  # flushes the half line, then closes: no terminating chunk
        raise _WatchCutError()


def _resource_of(request: rendering.Request) -> kmock.resource:
    """The request's resource: set for every request ``_handle`` serves (it checks)."""
    if request.resource is None:
        raise kmock.KubernetesResourceNotFoundError()
    return request.resource


def _name_of(request: rendering.Request) -> str:
    """The object name of a fetch, update or delete (kmock guesses those actions only for a named path)."""
    if request.name is None:
        raise kmock.KubernetesEndpointNotFoundError()
    return request.name


class _WatchCutError(Exception):
    """Raised by an injected watch cut after the connection is closed (nothing more is written)."""


def _spec_part(obj: dict[str, Any]) -> dict[str, Any]:
    """Everything that counts for ``metadata.generation``: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _pod_spec_without_mutables(spec: dict[str, Any] | None) -> dict[str, Any]:
    spec = {k: v for k, v in (spec or {}).items() if k not in _POD_MUTABLE_SPEC}
    for key in ("containers", "initContainers"):
        if key in spec:
            spec[key] = [{k: v for k, v in c.items() if k != "image"} for c in spec[key]]
    return spec


@attrs.define(kw_only=True)
class FaithfulKubernetes(kmock.KubernetesEmulator):
    """kmock's Kubernetes emulator with a real API server's object semantics (see module doc).

    Use it as kmock intends, inside ``async with`` together with :class:`kmock.Server`; or via
    :class:`kvpilot.sandbox.SandboxCluster`, which runs it on a loopback port in its own thread.

    Attributes:
        pod_logs: ``{(namespace, pod name): text}`` served by ``pods/NAME/log`` once the
            container has started (the sandbox's kubelet writes it).
        faults: injected failures (:class:`Fault`), checked in order before a resource request
            is served; the first matching one that is not spent answers instead.
        history_limit: watch events kept per resource for ``?resourceVersion=`` resumption.
    """

    strict: bool = True
    history_limit: int = 10_000
    pod_logs: dict[tuple[str, str], str] = attrs.field(factory=dict, init=False)
    faults: list[Fault] = attrs.field(factory=list, init=False)
    _rv: int = attrs.field(default=0, init=False)
    _history: dict[Any, collections.deque[tuple[int, dict[str, Any]]]] = attrs.field(factory=dict, init=False)
    _history_floor: dict[Any, int] = attrs.field(factory=dict, init=False)
    _schemas: dict[Any, dict[str, Any] | None] = attrs.field(factory=dict, init=False)
    #: ``{resource: {(namespace, name): kmock object}}`` of live objects, in creation order.
    _live_index: dict[Any, dict[tuple[str | None, str], Any]] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        with warnings.catch_warnings():  # kmock 0.8 reads its bundle with a deprecated importlib call
            warnings.simplefilter("ignore", DeprecationWarning)
            self.resources.load_bundled()

    async def __aenter__(self) -> Self:  # noqa: D105
        entered = await super().__aenter__()
        async with self._lock:
            for ns in DEFAULT_NAMESPACES:
                if (NAMESPACES, None, ns) not in self.objects:
                    await self._commit(
                        NAMESPACES,
                        None,
                        ns,
                        self._new_object(
                            NAMESPACES,
                            None,
                            {
                                "metadata": {"name": ns},
                                "spec": {"finalizers": ["kubernetes"]},
                                "status": {"phase": "Active"},
                            },
                        ),
                        "ADDED",
                    )
        return entered

    # ------------------------------------------------------------------ request parsing
    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """Serve one HTTP request: kmock's ``RawHandler.__call__`` with this module's URL parser.

        kmock 0.8 parses ``/api/v1/namespaces`` as an incomplete namespace prefix and fails;
        here the request is parsed by :func:`semantics.parse_api_path`, then handled by kmock.
        """
        await raw_request.read()
        raw_response: aiohttp.web.StreamResponse | None = None
        try:
            request = await self._parse(raw_request, request_id=len(self._requests))
            self._requests.append(request)
            try:
                return await self._handle(request)
            except rendering.StreamingError as e:  # a watch failed after its headers went out
                raw_response = e.args[0]
                if isinstance(e.__cause__, _WatchCutError):  # an injected cut: the connection is gone
                    return raw_response
                raise (e.__cause__ or e) from None
        except Exception as e:  # kmock's contract: record, answer 500, re-raise at exit (strict)
            if not self._errors:
                raise
            self._errors[-1].append(e)
            if raw_response is None or not raw_response.prepared:
                return await self._render_error(e)
            await self._stream_error(e, raw_response)
            await raw_response.write_eof()
            return raw_response

    @staticmethod
    async def _parse(raw_request: aiohttp.web.BaseRequest, *, request_id: int) -> rendering.Request:
        body = await raw_request.read()
        text = body.decode("utf-8", errors="replace")
        try:
            data = json.loads(text) if text else None
        except ValueError:
            data = None
        p = semantics.parse_api_path(raw_request.path)
        resource = None if p.group is None else kmock.resource(group=p.group, version=p.version, plural=p.plural)
        method = raw_request.method.upper()
        action = None
        if p.is_resource:
            if method == "GET":
                action = (
                    enums.action.WATCH
                    if raw_request.query.get("watch") in ("true", "1")
                    else enums.action.FETCH
                    if p.name
                    else enums.action.LIST
                )
            elif method == "POST" and not p.name:
                action = enums.action.CREATE
            elif method in ("PATCH", "PUT") and p.name:
                action = enums.action.UPDATE
            elif method == "DELETE" and p.name:
                action = enums.action.DELETE
        return rendering.Request(
            id=request_id,
            raw_request=raw_request,
            url=raw_request.url,
            method=raw_request.method,
            params=dict(raw_request.query),
            headers=dict(raw_request.headers),
            cookies=dict(raw_request.cookies),
            data=data,
            body=body,
            text=text,
            action=action,
            resource=resource,
            namespace=p.namespace,
            name=p.name,
            subresource=p.subresource,
        )

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        """Serve resource requests with the ``_serve_*`` methods below; everything else (discovery,
        non-API paths) with kmock's reactions.

        Each answer is rendered through a fresh :class:`kmock.Response`: kmock 0.8 copies a
        nested Response's status and headers onto the shared fallback reaction, so one 404 (or a
        ``text/plain`` log) would otherwise stick to every later answer of that reaction. This
        also skips ``KubernetesEmulator._handle``'s as-posted object tracking.
        """
        servers: dict[enums.action | None, Callable[[rendering.Request], Any]] = {
            enums.action.LIST: self._serve_list,
            enums.action.WATCH: self._serve_watch,
            enums.action.FETCH: self._serve_fetch,
            enums.action.CREATE: self._serve_create,
            enums.action.UPDATE: self._serve_update,
            enums.action.DELETE: self._serve_delete,
        }
        serve = servers.get(request.action) if request.resource is not None and request.resource.plural else None
        if serve is None:
            return await apps.RawHandler._handle(self, request)
        fault = next((f for f in self.faults if f.matches(request)), None)
        if fault is not None:
            fault.hits += 1
            if not fault.cut_watch:
                return await fault.response(request)(request)
        result = serve(request)
        if inspect.isasyncgen(result):  # a watch
            stream: AsyncIterator[Any] = _cut_after_half_an_event(result, request) if fault is not None else result
            return await kmock.Response(payload=stream)(request)
        result = await result
        if not isinstance(result, kmock.Response):
            result = kmock.Response(status=200, payload=result)
        return await result(request)

    # ------------------------------------------------------------------ helpers
    def _info(self, res: Any) -> kmock.ResourceInfo | None:
        return self.resources[res] if res in self.resources else None

    def _known(self, request: rendering.Request) -> kmock.ResourceInfo:
        info = self._info(request.resource)
        if info is None:  # a surprise for the code under test: strict mode reports it
            raise kmock.KubernetesResourceNotFoundError()
        return info

    def _get(self, res: Any, ns: str | None, name: str) -> dict[str, Any] | None:
        key = (res, ns, name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        return semantics.clone(self.objects[key].raw)

    def _live(self, res: Any, keep: Callable[[dict[str, Any]], bool] | None = None) -> list[dict[str, Any]]:
        """Copies of the live objects of ``res`` for which ``keep`` is true, in creation order.

        The filter reads the stored objects and only what it keeps is copied, through the
        per-resource index :attr:`_live_index`: a list or watch costs O(objects of that
        resource) comparisons and O(objects returned) copies, not a copy of every object stored.
        """
        index = self._live_index.get(res) or {}
        return [semantics.clone(raw) for raw in (obj.raw for obj in index.values()) if keep is None or keep(raw)]

    def _new_object(self, res: Any, ns: str | None, body: dict[str, Any]) -> dict[str, Any]:
        info = self._info(res)
        obj = semantics.clone(body)
        obj["apiVersion"] = f"{res.group}/{res.version}" if res.group else res.version
        obj["kind"] = info.kind if info and info.kind else res.plural.capitalize()
        meta = obj.setdefault("metadata", {})
        for field in ("resourceVersion", "deletionTimestamp", "selfLink"):
            meta.pop(field, None)
        if ns is not None:
            meta["namespace"] = ns
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(), generation=1)
        return obj

    async def _commit(
        self,
        res: Any,
        ns: str | None,
        name: str,
        obj: dict[str, Any] | None,
        kind: str,
        last: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Store a new state (``obj``) or a deletion (``obj=None``, ``last`` = final state) and
        publish the watch event. Call with ``self._lock`` held.
        """
        self._rv += 1
        state = obj if obj is not None else last
        if state is None:
            raise ValueError("_commit: give the new state (obj) or, for a deletion, the final one (last)")
        shown = semantics.clone(state)
        shown["metadata"]["resourceVersion"] = str(self._rv)
        key = (res, ns, name)
        live = self._live_index.setdefault(res, {})
        if obj is None:
            self.objects[key].delete()
            live.pop((ns, name), None)
        else:
            if key in self.objects:
                self.objects[key].history.append(semantics.clone(shown))
            else:
                self.objects[key] = semantics.clone(shown)
            if (ns, name) not in live:
                live[(ns, name)] = self.objects[key]
        event = {"type": kind, "object": shown}
        history = self._history.setdefault(res, collections.deque())
        history.append((self._rv, event))
        while len(history) > self.history_limit:
            self._history_floor[res] = history.popleft()[0]
        await self._buses[res].put(semantics.clone(event))
        return semantics.clone(shown)

    def _selectors(self, request: rendering.Request) -> tuple[list[semantics.Requirement], list[semantics.Requirement]]:
        return (
            semantics.parse_label_selector(request.params.get("labelSelector")),
            semantics.parse_field_selector(request.params.get("fieldSelector")),
        )

    @staticmethod
    def _selected(
        obj: dict[str, Any],
        request: rendering.Request,
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

    def _prune(self, res: Any, obj: dict[str, Any]) -> dict[str, Any]:
        schema = self._schemas.get(res)
        if not schema:
            return obj
        props = schema.get("properties") or {}
        for part in ("spec", "status"):
            if part in obj and part in props:
                obj[part] = semantics.prune(obj[part], props[part])
            elif part in obj and not schema.get("x-kubernetes-preserve-unknown-fields"):
                del obj[part]
        return obj

    def _not_found(self, res: Any, name: str) -> kmock.Response:
        what = f"{res.plural}.{res.group}" if res.group else res.plural
        return _status(404, "NotFound", f'{what} "{name}" not found', name=name, group=res.group, kind=res.plural)

    # ------------------------------------------------------------------ CRDs
    def _register_crd(self, crd: dict[str, Any]) -> None:
        spec = crd.get("spec", {})
        names = spec.get("names", {})
        for version in spec.get("versions", []):
            if not version.get("served", True):
                continue
            res = kmock.resource(spec["group"], version["name"], names["plural"])
            self.resources[res] = kmock.ResourceInfo(
                kind=names.get("kind"),
                singular=names.get("singular") or names.get("kind", "").lower(),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                verbs={"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"},
                shortnames=names.get("shortNames", []),
                categories=names.get("categories", []),
                subresources={"status"} if "status" in (version.get("subresources") or {}) else set(),
            )
            self._schemas[res] = (version.get("schema") or {}).get("openAPIV3Schema")

    @staticmethod
    def _crd_status(crd: dict[str, Any]) -> dict[str, Any]:
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
    async def _serve_list(self, request: rendering.Request) -> Any:
        info = self._known(request)
        res = _resource_of(request)
        try:
            labels, fields = self._selectors(request)
        except ValueError as exc:
            return _status(400, "BadRequest", str(exc))
        async with self._lock:
            items = self._live(res, lambda o: self._selected(o, request, labels, fields))
            rv = self._rv
        return {
            "apiVersion": f"{res.group}/{res.version}" if res.group else res.version,
            "kind": f"{info.kind or (res.plural or '').capitalize()}List",
            "metadata": {"resourceVersion": str(rv)},
            "items": items,
        }

    async def _serve_fetch(self, request: rendering.Request) -> Any:
        self._known(request)
        res, name = _resource_of(request), _name_of(request)
        async with self._lock:
            obj = self._get(res, request.namespace, name)
        if obj is None:
            return self._not_found(res, name)
        if request.subresource == "log" and request.resource == PODS:
            return self._serve_log(request, obj)
        if request.subresource not in (None, "status"):
            raise kmock.KubernetesEndpointNotFoundError()
        return obj

    async def _serve_version(self, request: rendering.Request) -> Any:
        """Kmock's APIResourceList, with the core group's ``groupVersion`` as ``v1`` (kmock: ``/v1``)."""
        payload = await super()._serve_version(request)
        if isinstance(payload, dict) and str(payload.get("groupVersion", "")).startswith("/"):
            payload = {**payload, "groupVersion": payload["groupVersion"][1:]}
        return payload

    def _serve_log(self, request: rendering.Request, pod: dict[str, Any]) -> kmock.Response:
        name = pod["metadata"]["name"]
        containers = [c["name"] for c in pod.get("spec", {}).get("containers", [])]
        container = request.params.get("container") or (containers[0] if len(containers) == 1 else None)
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
        text = self.pod_logs.get((pod["metadata"].get("namespace"), name), "")
        if "tailLines" in request.params:
            lines = text.splitlines(keepends=True)
            n = int(request.params["tailLines"])
            text = "".join(lines[-n:]) if n > 0 else ""
        data = text.encode("utf-8")
        if "limitBytes" in request.params:
            data = data[: int(request.params["limitBytes"])]
        return kmock.Response(status=200, payload=data, headers={"Content-Type": "text/plain"})

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[Any]:
        self._known(request)
        yield b""  # send the headers now: a quiet watch is still a watch
        try:
            labels, fields = self._selectors(request)
        except ValueError as exc:
            yield {"type": "ERROR", "object": _status(400, "BadRequest", str(exc)).payload}
            return
        res = _resource_of(request)
        since = request.params.get("resourceVersion") or ""
        initial_events = request.params.get("sendInitialEvents") == "true"
        timeout = float(request.params["timeoutSeconds"]) if request.params.get("timeoutSeconds") else None
        bus = self._buses[res]
        async with self._lock:  # one lock for the snapshot and the subscription: no event lost
            marker = await bus.mark()
            backlog: list[dict[str, Any]]  # watch events: {"type", "object"}
            if since in ("", "0") or initial_events:
                backlog = [
                    {"type": "ADDED", "object": o}
                    for o in self._live(res, lambda o: self._selected(o, request, labels, fields))
                ]
                if initial_events:
                    backlog.append(
                        {
                            "type": "BOOKMARK",
                            "object": {
                                "kind": self._known(request).kind,
                                "apiVersion": f"{res.group}/{res.version}".lstrip("/"),
                                "metadata": {
                                    "resourceVersion": str(self._rv),
                                    "annotations": {"k8s.io/initial-events-end": "true"},
                                },
                            },
                        }
                    )
            elif int(since) < self._history_floor.get(res, 0):
                backlog = [
                    {
                        "type": "ERROR",
                        "object": _status(410, "Expired", f"too old resource version: {since} ({self._rv})").payload,
                    }
                ]
            else:
                backlog = [semantics.clone(ev) for rv, ev in self._history.get(res, ()) if rv > int(since)]
        try:
            for event in backlog:
                if event["type"] in ("ERROR", "BOOKMARK") or self._selected(event["object"], request, labels, fields):
                    yield event
                if event["type"] == "ERROR":
                    return
            async with asyncio.timeout(timeout):
                async for event in bus.stream(since=marker):
                    if self._selected(event["object"], request, labels, fields):
                        yield event
        except TimeoutError:
            return
        finally:
            await bus.unmark(marker)

    # ------------------------------------------------------------------ writes
    async def _serve_create(self, request: rendering.Request) -> Any:
        info = self._known(request)
        res, body = _resource_of(request), request.data
        if not isinstance(body, dict):
            return _status(400, "BadRequest", "the request body must be a JSON object")
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
        kind = info.kind or res.plural or ""
        errors = semantics.validate_metadata(body, dns1035_name=res.plural == "services" and not res.group)
        if errors:
            return _invalid(kind, name, errors, kind)
        async with self._lock:
            namespace = self._get(NAMESPACES, None, ns) if ns is not None else None
            if ns is not None and namespace is None:
                return _status(404, "NotFound", f'namespaces "{ns}" not found', name=ns, kind="namespaces")
            if res == PODS and (enforced := podsecurity.enforced_level(namespace)) is not None:
                found = podsecurity.violations(body.get("spec") or {}, enforced[0])
                if found:
                    message = podsecurity.admission_message(name, *enforced, found)
                    return _status(403, "Forbidden", message, name=name, kind="pods")
            if self._get(res, ns, name) is not None:
                what = f"{res.plural}.{res.group}" if res.group else res.plural
                return _status(409, "AlreadyExists", f'{what} "{name}" already exists', name=name, kind=res.plural)
            obj = self._new_object(res, ns, body)
            if "status" in info.subresources:
                obj.pop("status", None)
            if res == PODS:
                obj["status"] = {"phase": "Pending", "qosClass": "Burstable"}
            if res == CRDS:
                self._register_crd(obj)
                obj["status"] = self._crd_status(obj)
            obj = self._prune(res, obj)
            errors = semantics.schema_errors(obj, self._schemas.get(res))
            if errors:
                return _invalid(f"{kind}.{res.group}", name, errors, kind)
            shown = await self._commit(res, ns, name, obj, "ADDED")
        return kmock.Response(status=201, payload=shown)

    def _apply_patch(self, request: rendering.Request, current: dict[str, Any]) -> dict[str, Any] | kmock.Response:
        content_type = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        body = request.data
        if request.method == "PUT":
            new = semantics.clone(body)
        elif content_type == "application/json-patch+json":
            try:
                new = jsonpatch.apply_patch(current, body)
            except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
                # kopf relies on this 422 for its resourceVersion `test` (kmock 0.8 answers 500)
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
        return new

    async def _serve_update(self, request: rendering.Request) -> Any:
        info = self._known(request)
        res, ns, name, sub = _resource_of(request), request.namespace, _name_of(request), request.subresource
        if sub not in (None, "status") or (sub == "status" and "status" not in info.subresources):
            raise kmock.KubernetesEndpointNotFoundError()
        async with self._lock:
            current = self._get(res, ns, name)
            if current is None:
                return self._not_found(res, name)
            new = self._apply_patch(request, current)
            if isinstance(new, kmock.Response):
                return new
            if "status" in info.subresources:  # /status changes only status; the main object never
                if sub == "status":
                    new = {**current, "status": new.get("status")}
                else:
                    new["status"] = current.get("status")
                if new.get("status") is None:
                    new.pop("status", None)
            meta = new.setdefault("metadata", {})
            for field in (
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "generation",
                "resourceVersion",
                "deletionTimestamp",
            ):
                if field in current["metadata"]:
                    meta[field] = current["metadata"][field]
                else:
                    meta.pop(field, None)
            new["apiVersion"], new["kind"] = current["apiVersion"], current["kind"]
            errors = semantics.validate_metadata(new, dns1035_name=res.plural == "services" and not res.group)
            if res == PODS and _pod_spec_without_mutables(new.get("spec")) != _pod_spec_without_mutables(
                current.get("spec")
            ):
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
                return current  # a write that changes nothing: same resourceVersion, no watch event
            if _spec_part(new) != _spec_part(current):
                meta["generation"] = current["metadata"].get("generation", 1) + 1
            if res == CRDS:
                self._register_crd(new)
            if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                return await self._delete_now(res, ns, name, new)
            return await self._commit(res, ns, name, new, "MODIFIED")

    async def _delete_now(
        self, res: Any, ns: str | None, name: str, last: dict[str, Any], orphan: bool = False
    ) -> dict[str, Any]:
        """Remove an object and, like the garbage collector, its dependents (unless ``orphan``,
        ``propagationPolicy: Orphan``). Lock held.
        """
        shown = await self._commit(res, ns, name, None, "DELETED", last=last)
        uid = last["metadata"].get("uid")
        for (r, n, nm), obj in list(self.objects.items()):
            if obj.deleted or (orphan and res != NAMESPACES):
                continue
            raw = obj.raw
            owned = any(ref.get("uid") == uid for ref in raw["metadata"].get("ownerReferences") or [])
            if owned or (res == NAMESPACES and n == name):
                await self._mark_or_delete(r, n, nm, semantics.clone(raw))
        if res == CRDS:
            for version in last.get("spec", {}).get("versions", []):
                gone = kmock.resource(last["spec"]["group"], version["name"], last["spec"]["names"]["plural"])
                if gone in self.resources:
                    del self.resources[gone]
                self._schemas.pop(gone, None)
        return shown

    async def _mark_or_delete(
        self, res: Any, ns: str | None, name: str, obj: dict[str, Any], orphan: bool = False
    ) -> dict[str, Any]:
        meta = obj["metadata"]
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return obj
            meta["deletionTimestamp"] = now_rfc3339()
            meta["deletionGracePeriodSeconds"] = 0
            return await self._commit(res, ns, name, obj, "MODIFIED")
        return await self._delete_now(res, ns, name, obj, orphan)

    async def _serve_delete(self, request: rendering.Request) -> Any:
        self._known(request)
        res, ns, name = _resource_of(request), request.namespace, _name_of(request)
        async with self._lock:
            current = self._get(res, ns, name)
            if current is None:
                return self._not_found(res, name)
            options = request.data if isinstance(request.data, dict) else {}
            policy = request.params.get("propagationPolicy") or options.get("propagationPolicy")
            return await self._mark_or_delete(res, ns, name, current, orphan=policy == "Orphan")

    # ------------------------------------------------------------------ for the kubelet stand-in
    async def write_status(
        self, res: Any, ns: str | None, name: str, status: dict[str, Any], spec_changes: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """Replace an object's ``status`` (and merge ``spec_changes``, e.g. the scheduler's
        ``nodeName``) as the control plane's own components do; None when the object is gone.
        Emits MODIFIED only when something changed.
        """
        async with self._lock:
            current = self._get(res, ns, name)
            if current is None:
                return None
            new = semantics.clone(current)
            new["status"] = semantics.clone(status)
            if spec_changes:
                new["spec"] = semantics.merge_patch(new.get("spec"), spec_changes)
            if new == current:
                return current
            return await self._commit(res, ns, name, new, "MODIFIED")
