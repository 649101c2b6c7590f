"""The kopf handlers of the VLLMServer operator (thin: read, call :mod:`logic`, write).

:func:`build_registry` returns a fresh :class:`kopf.OperatorRegistry` with:

- ``create``/``resume``/``update`` of a VLLMServer → :meth:`Controller.reconcile_server`:
  validate the spec (an invalid one → phase ``Invalid``, a ``Valid=False`` condition and a
  Warning Event naming the field, then :class:`kopf.PermanentError`: no pod, no retry loop; the
  same, reason ``NotAllowed``, for an image or service account outside the operator's allow-list),
  ensure the Service, apply :func:`logic.plan_pods` (adopt, replace on a spec change, never
  restart an ended server), write the status through ``/status``, then the KV pre-flight
  (``KVCapacity``; before the pod only with ``preflight: enforce``, so a slow Hub never
  delays a pod);
- every event of a pod labelled ``app.kubernetes.io/managed-by=kvpilot`` →
  :meth:`Controller.on_pod_event`: recompute the owning server's status from the pod; when
  the pod is Ready, read its log once and fill ``kvCacheTokens``/``maxConcurrency``; when it
  is scheduled and ``KVCapacity`` lacked the GPU memory, run the pre-flight again with its
  node's ``nvidia.com/gpu.memory`` label;
- a login handler connecting to the cluster the caller chose (a kubeconfig, the in-cluster
  service account, or the sandbox);
- a Kubernetes Event on the VLLMServer for every phase transition.

Handlers are synchronous (kopf runs them in its thread pool) and use the ``kubernetes``
client; status writes from the server and pod handlers of one VLLMServer are serialised by a
per-server lock, so a transition is seen (and announced) once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import copy
import functools
import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, cast

import kopf
import kubernetes.client
from kubernetes.client.exceptions import ApiException

from kvpilot.api import GROUP, PLURAL, VERSION, SpecError, VLLMServerSpec, parse_spec, spec_hash
from kvpilot.api.constants import LABEL_SERVER, STATUS_KOPF
from kvpilot.api.models import PreflightStatus
from kvpilot.api.quantity import parse_quantity
from kvpilot.api.timestamps import now_rfc3339
from kvpilot.controller import failures, logic, policy
from kvpilot.controller.metrics import OperatorMetrics
from kvpilot.controller.rest import JsonApi, core_path, custom_status_path
from kvpilot.controller.settings import HANDLER_THREADS, MANAGED_BY_SELECTOR, connection_info
from kvpilot.kv.hub import HubModelCache
from kvpilot.kv.preflight import gpu_memory_from_node_label, kv_preflight
from kvpilot.kv.spec import KVConfigError
from kvpilot.kv.weights import weights_from_index
from kvpilot.render import render_objects, vllm_command
from kvpilot.text.safe import one_line
from kvpilot.vllm.startup_log import parse_kv_cache_report

#: Upper bound of log bytes read to find the KV line (vLLM prints it within its first few
#: hundred lines; 8 MiB is far beyond that and bounds the read).
LOG_LIMIT_BYTES = 8 * 2**20
#: Lines and bytes of a failed pod's log read for the root cause (vLLM V1 prints it above the API
#: server's traceback, beyond the kubelet's 2,048-byte termination message; 200 lines hold both
#: tracebacks of an engine start-up failure).
FAILURE_LOG_LINES = 200
FAILURE_LOG_BYTES = 256 * 2**10
#: The node label NVIDIA GPU feature discovery sets (MiB), for the KV pre-flight.
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
#: Longest a pod event waits for a new server's first status, handed to kopf's patch, to come back in a
#: watch event (kopf's own wait for its patch, ``settings.persistence.consistency_timeout``, is 5 s).
STATUS_IN_FLIGHT_TIMEOUT = 5.0
#: kopf's index of kvpilot's pods (:func:`pods_by_server`): ``(namespace, server) -> pod objects``
PodIndex = kopf.Index[tuple[str, str], dict[str, Any]]


class NameConflict(ApiException):
    """The API server's 409 on create, when another owner (or nobody) holds the name: ``conflict_owner`` says who."""

    def __init__(self, conflict_owner: str) -> None:
        super().__init__(status=409, reason="Conflict")
        self.conflict_owner = conflict_owner


class Controller:
    """The handlers' shared state: one API client and a lock per VLLMServer."""

    def __init__(
        self,
        configuration: kubernetes.client.Configuration,
        *,
        hub: bool = True,
        retry_policy: failures.RetryPolicy | None = None,
        spec_policy: policy.SpecPolicy | None = None,
    ) -> None:
        self.hub = hub
        self.retry_policy = retry_policy or failures.RetryPolicy()
        self.spec_policy = spec_policy or policy.SpecPolicy()
        self._hub_models = HubModelCache()
        #: uids of pods whose node's GPU-memory label the pre-flight has already read.
        self._preflighted_pods: set[str] = set()
        #: ``(namespace, server) -> (pod uid, pod resourceVersion)`` the server's last status
        #: write was computed from: a pod event carrying exactly that pod state changes nothing
        #: (the status is a function of it), so it is answered without reading the server.
        self._status_from: dict[tuple[str, str], tuple[str | None, str | None]] = {}
        #: ``(namespace, server) -> flag``: a new server's first status went into kopf's patch (kopf
        #: sends it with its own record in one request after the handler returns) and no watch event
        #: of the server has shown it yet; set by :meth:`on_server_event`, awaited by pod events.
        self._status_in_flight: dict[tuple[str, str], threading.Event] = {}
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self.use(configuration)

    def use(self, configuration: kubernetes.client.Configuration) -> None:
        """Talk to the cluster through ``configuration`` from now on (e.g. after kopf re-logs in)."""
        # One pooled connection per handler thread (the client's default pool is 5 per CPU: with
        # more threads than that, connections are dropped after each request and opened anew).
        configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, HANDLER_THREADS)
        self.configuration = configuration
        self.api = kubernetes.client.ApiClient(configuration)
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)
        self.json = JsonApi(self.api)  # the writes of every new server, without the client's model layer

    def _lock(self, namespace: str, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault((namespace, name), threading.Lock())

    # ------------------------------------------------------------------ I/O helpers
    def _read_server(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            # the decoded JSON object; the client annotates custom-object reads as ``object``
            return cast(
                dict[str, Any], self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _write_status(
        self,
        server: dict[str, Any],
        new: dict[str, Any],
        logger: logging.Logger,
        created: str | None = None,
        via: kopf.Patch | None = None,
    ) -> dict[str, Any]:
        """Merge-patch ``/status`` with what changed; post an Event on a phase transition.

        ``created`` (what a new server's reconcile just created, e.g. ``created pod qwen-2c965 and
        service qwen``) leads that transition's Event, so a new server gets one Event, not two;
        without a transition it is posted as its own ``PodCreated`` Event. With ``via`` (kopf's
        ``patch`` of the running handler) the change goes into that patch instead of a request of
        its own: kopf sends it with its own record after the handler returns.
        """
        old = server.get("status") or {}
        new = logic.safe_status(new)  # no terminal controls, no secrets in status (or the Event below)
        patch = logic.status_patch(old, new, keep=("preflight", STATUS_KOPF))
        transition = logic.is_transition(old, new)
        if not patch:
            if created:
                _event(server, type="Normal", reason="PodCreated", message=created)
            return server
        meta = server["metadata"]
        if via is not None:
            via.setdefault("status", {}).update(patch)
            merged = {k: v for k, v in {**old, **patch}.items() if v is not None}
            updated = {**server, "status": merged}
        else:
            updated = self.json.merge_patch(
                custom_status_path(GROUP, VERSION, meta["namespace"], PLURAL, meta["name"]), {"status": patch}
            )
        if transition:
            logger.info(f"{meta['name']}: {old.get('phase')} -> {new.get('phase')} ({new.get('reason')})")
            said = f"{new.get('reason')}: {new.get('message')}"
            _event(
                server,
                type=logic.event_type(new),
                reason=new.get("phase") or "Unknown",
                message=one_line(f"{created}; {said}" if created else said, limit=1024),
            )
        elif created:
            _event(server, type="Normal", reason="PodCreated", message=created)
        return updated

    def _write_kv_condition(
        self,
        server: dict[str, Any],
        condition: dict[str, Any],
        warning: str | None,
        now: str,
        numbers: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Set the KVCapacity condition and ``status.preflight`` (Warning Event when the condition
        turns False) and return the server.
        """
        old = server.get("status") or {}
        new = self._with_kv_condition(server, {"conditions": old.get("conditions")}, condition, numbers, now)
        if new["conditions"] == old.get("conditions") and new["preflight"] == old.get("preflight"):
            return server
        meta = server["metadata"]
        updated = self.json.merge_patch(
            custom_status_path(GROUP, VERSION, meta["namespace"], PLURAL, meta["name"]),
            {"status": logic.safe_status(new)},
        )
        self._kv_warning_event(server, condition, warning)
        return updated

    @staticmethod
    def _with_kv_condition(
        server: dict[str, Any],
        status: dict[str, Any],
        condition: dict[str, Any],
        numbers: dict[str, Any] | None,
        now: str,
    ) -> dict[str, Any]:
        """``status`` with the ``KVCapacity`` condition set and ``preflight`` = ``numbers`` (None if empty)."""
        conditions = logic.set_condition(
            status.get("conditions"),
            condition["type"],
            condition["status"],
            condition["reason"],
            condition["message"],
            now=now,
            generation=server["metadata"].get("generation"),
        )
        return {**status, "conditions": conditions, "preflight": numbers or None}

    @staticmethod
    def _kv_warning_event(server: dict[str, Any], condition: dict[str, Any], warning: str | None) -> None:
        """A Warning Event when the pre-flight warns and ``server``'s condition was not False already."""
        old = (server.get("status") or {}).get("conditions") or []
        before: dict[str, Any] = next((c for c in old if c["type"] == condition["type"]), {})
        if warning and before.get("status") != "False":
            _event(server, type="Warning", reason=condition["reason"], message=one_line(warning, limit=1024))

    def _pods(self, namespace: str, name: str, index: PodIndex | None = None) -> list[dict[str, Any]]:
        """The server's pods: from kopf's pod index when given (no API request: kopf keeps it from
        the pod watch it already runs), else one list call by label.

        The index may lag the API by one watch event; a just-created pod missing from it makes
        the create answer 409 and the pod is adopted (:meth:`_adopt`), a just-deleted one is
        deleted again (404 ignored) or replaced on its DELETED event.
        """
        if index is not None:
            return list(index.get((namespace, name), ()))  # one C-level copy: safe beside kopf's loop
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"{LABEL_SERVER}={name}")
        return [self.api.sanitize_for_serialization(p) for p in pods.items]

    def _ensure_service(self, service: dict[str, Any], server: dict[str, Any]) -> bool:
        """Create the Service unless this server's already exists (one it does not own is a conflict);
        True when this call created it.

        A server whose status names no Service yet is new: the create comes first (one request;
        409 -> adopt). Otherwise the Service most likely exists: read first.
        """
        meta = service["metadata"]
        if (server.get("status") or {}).get("serviceName"):
            try:
                self._adopt(self.core.read_namespaced_service, service, server, "service")
                return False
            except ApiException as exc:
                if exc.status != 404:
                    raise
        try:
            self.json.create(core_path(meta["namespace"], "services"), service)
            return True
        except ApiException as exc:
            if exc.status != 409:
                raise
            self._adopt(self.core.read_namespaced_service, service, server, "service")  # created meanwhile
            return False

    def _create_pod(self, pod: dict[str, Any], server: dict[str, Any]) -> dict[str, Any] | None:
        """Create ``pod``; None when its name is taken (409: the caller adopts or reports the holder)."""
        try:
            return self.json.create(core_path(pod["metadata"]["namespace"], "pods"), pod)  # the JSON as served
        except ApiException as exc:
            if exc.status != 409:
                raise
            return None

    def _adopt(
        self, read: Callable[..., Any], wanted: dict[str, Any], server: dict[str, Any], kind: str
    ) -> dict[str, Any]:
        """The existing object named like ``wanted`` when this server owns it (an earlier attempt
        created it: adopted); otherwise the 409 is re-raised with ``conflict_owner`` naming the holder.

        Raises:
            ApiException: 404 when there is no such object; 409 with ``conflict_owner`` set when
                another owner (or nobody) holds the name.
        """
        meta = wanted["metadata"]
        existing: dict[str, Any] | None = self.api.sanitize_for_serialization(read(meta["name"], meta["namespace"]))
        if existing is None:  # pragma: no cover - the client raises 404 instead
            raise ApiException(status=404, reason="NotFound")
        refs = (existing.get("metadata") or {}).get("ownerReferences") or []
        uid = server["metadata"].get("uid")
        if any(ref.get("uid") == uid for ref in refs):
            return existing
        holder = next((f"{ref.get('kind')} {ref.get('name')}" for ref in refs if ref.get("controller")), None)
        conflict = NameConflict(holder or "no controller")
        conflict.body = json.dumps({"message": f'{kind} "{meta["name"]}" already exists and is not this server\'s'})
        raise conflict

    def _kv_from_log(self, pod: dict[str, Any], logger: logging.Logger) -> tuple[int, float | None] | None:
        meta = pod["metadata"]
        try:
            text = self.core.read_namespaced_pod_log(
                meta["name"], meta["namespace"], container="vllm", limit_bytes=LOG_LIMIT_BYTES
            )
        except ApiException as exc:
            logger.warning(f"could not read the log of pod {meta['name']}: {exc.status} {exc.reason}")
            return None
        report = parse_kv_cache_report(text or "")
        return None if report is None else (report.kv_cache_tokens, report.max_concurrency)

    def _failure_log(self, pod: dict[str, Any], logger: logging.Logger) -> str | None:
        """The end of a failed pod's vLLM log (bounded: :data:`FAILURE_LOG_LINES` lines, at most
        :data:`FAILURE_LOG_BYTES`), or None when it cannot be read (the termination message is
        used then).
        """
        meta = pod["metadata"]
        try:
            return str(
                self.core.read_namespaced_pod_log(
                    meta["name"],
                    meta["namespace"],
                    container="vllm",
                    tail_lines=FAILURE_LOG_LINES,
                    limit_bytes=FAILURE_LOG_BYTES,
                )
                or ""
            )
        except ApiException as exc:
            logger.warning(f"could not read the log of failed pod {meta['name']}: {exc.status} {exc.reason}")
            return None

    # ------------------------------------------------------------------ KV pre-flight
    def _model_files(self, namespace: str, spec: VLLMServerSpec) -> tuple[dict[str, Any] | None, int | None, str]:
        """``(config.json, weight bytes or None, where from)`` of the spec's model, or ``(None, None, why)``.

        Sources: the ``modelConfigRef`` ConfigMap (its key, plus an optional
        ``model.safetensors.index.json`` key whose ``metadata.total_size`` is the weight size), else
        the Hugging Face Hub when this operator may use it (``hub``; HF_HUB_OFFLINE honoured).
        """
        ref = spec.model_config_ref
        if ref is not None:
            try:
                data = self.core.read_namespaced_config_map(ref.name, namespace).data or {}
            except ApiException as exc:
                return None, None, f"ConfigMap {ref.name}: {exc.status} {exc.reason}"
            if ref.key not in data:
                return None, None, f"ConfigMap {ref.name} has no key {ref.key}"
            try:
                config = json.loads(data[ref.key])
                index = (
                    json.loads(data["model.safetensors.index.json"]) if "model.safetensors.index.json" in data else None
                )
            except ValueError as exc:
                return None, None, f"ConfigMap {ref.name}: not JSON: {exc}"
            return config, weights_from_index(index), f"ConfigMap {ref.name}"
        if not self.hub:
            return None, None, "no modelConfigRef, and this operator does not use the Hub"
        found = self._hub_models.get(spec.model)
        return found.config, found.weights_bytes, found.source

    def _gpu_memory(self, spec: VLLMServerSpec, pods: list[dict[str, Any]]) -> tuple[int | None, str | None]:
        """``(bytes of one GPU, where from)``: ``spec.resources.gpuMemory``, else the label
        ``nvidia.com/gpu.memory`` (MiB, NVIDIA GPU feature discovery) of the node a pod runs on;
        ``(None, None)`` when neither is known (no pod scheduled yet, no label, unreadable node).
        """
        if spec.resources.gpu_memory is not None:
            quantity = spec.resources.gpu_memory
            return int(parse_quantity(quantity)), f"{quantity} (spec.resources.gpuMemory)"
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                try:
                    node_meta = self.core.read_node(node).metadata
                    label = ((node_meta and node_meta.labels) or {}).get(GPU_MEMORY_LABEL)
                    if label:
                        return gpu_memory_from_node_label(label), f"{label} MiB (node {node} label {GPU_MEMORY_LABEL})"
                except (ApiException, KVConfigError):
                    pass
                return None, None
        return None, None

    def preflight(
        self, namespace: str, spec: VLLMServerSpec, pods: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], str | None, dict[str, Any]]:
        """The ``KVCapacity`` condition (kvpilot.kv.preflight), a warning when one request of
        ``maxModelLen`` cannot fit, and the numbers for ``status.preflight`` (camelCase; empty when
        not computed); Unknown when the model config or GPU memory is not known.
        """
        config, weights, source = self._model_files(namespace, spec)
        if config is None:
            return (
                {
                    "type": "KVCapacity",
                    "status": "Unknown",
                    "reason": "NoModelConfig",
                    "message": f"KV capacity not computed: model config.json not available ({source})",
                },
                None,
                {},
            )
        gpu_memory, gpu_source = self._gpu_memory(spec, pods)
        engine = spec.engine.model_dump(by_alias=True, exclude_none=True) if spec.engine else {}
        result = kv_preflight(config, engine, gpu_memory_bytes=gpu_memory, weights_bytes=weights)
        numbers = {}
        if result.numbers:
            numbers = PreflightStatus(**result.numbers, config_source=source, gpu_memory=gpu_source).model_dump(
                by_alias=True, exclude_none=True
            )
        return result.condition, result.warning, numbers

    # ------------------------------------------------------------------ VLLMServer handlers
    def reconcile_server(
        self,
        body: Any,
        namespace: str,
        name: str,
        logger: logging.Logger,
        retry: int = 0,
        pods_by_server: PodIndex | None = None,
        patch: kopf.Patch | None = None,
        **_: Any,
    ) -> None:
        """create/resume/update: validate, ensure Service and Pod, write status (idempotent).

        A new server's status (its body has none) goes into kopf's ``patch``: kopf sends it in
        one ``/status`` request with its own record of the handled spec (``status.kopf``),
        instead of a status write and kopf's patch.

        Never stuck: any exception is classified (:func:`kvpilot.controller.failures.classify`)
        into a phase, a ``Ready=False`` condition with its reason and a Warning Event, then a
        :class:`kopf.PermanentError` (the spec or the cluster must change) or a
        :class:`kopf.TemporaryError` with the policy's exponential, bounded backoff.
        """
        step = ["reading the VLLMServer"]
        server: dict[str, Any] | None = None
        with self._lock(namespace, name):
            try:
                # A body without status is a server no reconcile has written yet: kopf's copy is
                # current (only this operator writes status), so it is not read again.
                new = not body.get("status")
                server = copy.deepcopy(dict(body)) if new else self._read_server(namespace, name)
                if server is None:
                    return
                self._reconcile(server, namespace, name, logger, step, pods_by_server, patch if new else None)
            except kopf.PermanentError:
                raise
            except Exception as exc:  # noqa: BLE001 - every failure ends in a phase, an Event and retry-or-stop
                self._fail(server or body, exc, step[0], retry, logger)

    def _fail(self, server: Any, exc: Exception, step: str, retry: int, logger: logging.Logger) -> NoReturn:
        """Report a failed reconcile (status, Warning Event, log) and raise kopf's retry-or-stop."""
        failure = failures.classify(
            exc, step=step, retry=retry, policy=self.retry_policy, conflict_owner=getattr(exc, "conflict_owner", None)
        )
        server = dict(server or {})
        meta = server.get("metadata") or {}
        # the failure status replaces it
        self._status_from.pop((meta.get("namespace") or "", meta.get("name") or ""), None)
        logger.warning(f"{meta.get('name')}: {failure.reason}: {failure.message}")
        if server.get("metadata", {}).get("uid"):
            try:  # best effort: the status write may be what is failing
                self._write_status(server, failures.failure_status(server, failure, now=now_rfc3339()), logger)
            except Exception as write_exc:  # noqa: BLE001 - already failing; the Event and the log carry it
                logger.warning(f"could not write the failure status: {type(write_exc).__name__}")
            _event(server, type="Warning", reason=failure.reason, message=one_line(failure.message, limit=1024))
        if failure.permanent:
            raise kopf.PermanentError(failure.message) from None
        raise kopf.TemporaryError(failure.message, delay=failure.delay) from None

    def _reconcile(
        self,
        server: dict[str, Any],
        namespace: str,
        name: str,
        logger: logging.Logger,
        step: list[str],
        pods_index: PodIndex | None = None,
        via: kopf.Patch | None = None,
    ) -> None:
        """The reconcile proper; ``step[0]`` names what it is doing (for a failure's message).

        Requests for a new server: the Service and Pod creates; its status (with ``preflight:
        warn`` the KV pre-flight's condition too) goes into ``via``, kopf's patch, when given, else
        one status write; the pods come from kopf's index (:meth:`_pods`).
        """
        now = now_rfc3339()
        step[0] = "validating and rendering the spec"
        try:
            spec = parse_spec(server.get("spec"))
            pod_obj, service = render_objects(name, namespace, spec, owner=server)  # pod named <name>-<hash[:5]>
        except SpecError as exc:
            step[0] = "writing the Invalid status"
            self._write_status(server, logic.invalid_status(server, str(exc), now=now), logger)
            raise kopf.PermanentError(f"invalid spec: {exc}") from None
        refused = policy.violation(self.spec_policy, pod_obj)
        if refused is not None:  # the operator's allow-list (kvpilot operator --allowed-image ...)
            step[0] = "writing the Invalid status"
            self._write_status(server, logic.invalid_status(server, refused, now=now, reason="NotAllowed"), logger)
            raise kopf.PermanentError(f"not allowed: {refused}")
        digest = spec_hash(spec)
        step[0] = "listing the server's pods"
        pods = self._pods(namespace, name, pods_index)
        if spec.preflight == "enforce":  # the verdict decides whether a pod may exist: before it
            server, warning, condition = self._preflight_status(server, spec, pods, now)
            if warning:
                self._write_status(
                    server,
                    logic.invalid_status(
                        server, f"spec.engine.maxModelLen: {warning}", now=now, reason=condition["reason"]
                    ),
                    logger,
                )
                raise kopf.PermanentError(f"pre-flight refused the spec: {warning}")
        step[0] = f"creating service {service['metadata']['name']}"
        service_created = self._ensure_service(service, server)
        plan = logic.plan_pods(server, pods, digest)
        for stale in plan.delete:
            logger.info(f"deleting pod {stale} (spec changed or duplicate)")
            step[0] = f"deleting pod {stale}"
            try:
                self.core.delete_namespaced_pod(stale, namespace)
            except ApiException as exc:
                if exc.status != 404:
                    raise
            _event(
                server,
                type="Normal",
                reason="PodReplaced",
                message=f"deleted pod {stale}: it was made from an older spec (or is a duplicate)",
            )
        pod = plan.keep
        created = None  # a new server's first pod: said in its Pending transition's Event (one Event, not two)
        if plan.create:
            step[0] = f"creating pod {pod_obj['metadata']['name']}"
            pod = self._create_pod(pod_obj, server)
            if pod is None:  # the name is taken: ours from an earlier attempt (adopt it), or a conflict
                try:
                    pod = self._adopt(self.core.read_namespaced_pod, pod_obj, server, "pod")
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    raise ApiException(status=409, reason="Conflict: the pod was deleted meanwhile") from None
            elif plan.delete or (server.get("status") or {}).get("podName"):  # a replacement: its own Event
                _event(
                    server,
                    type="Normal",
                    reason="PodCreated",
                    message=f"created pod {pod['metadata']['name']} for spec {digest}",
                )
            else:
                service_name = service["metadata"]["name"]
                created = f"created pod {pod['metadata']['name']} for spec {digest} " + (
                    f"and service {service_name}" if service_created else f"(service {service_name} existed)"
                )
        status = logic.server_status(
            server,
            pod,
            now=now,
            service_name=service["metadata"]["name"],
            spec_hash=digest,
            command=vllm_command(spec),
        )
        if pod is None and not plan.create:  # ended with this spec: stays ended, no new pod
            status = logic.keep_ended_record(status, server.get("status"))
        kv: tuple[dict[str, Any], str | None] | None = None
        if spec.preflight == "warn":
            # After the pod exists: a slow or unreachable Hub (bounded by kvpilot.kv.hub) never
            # delays the pod; the condition goes out in the same status write.
            step[0] = "running the KV pre-flight"
            condition, warning, numbers = self.preflight(namespace, spec, [pod] if pod else [])
            status = self._with_kv_condition(server, status, condition, numbers, now)
            kv = condition, warning
        step[0] = "writing the status"
        self._write_status(server, status, logger, created, via)
        if via is not None and via.get("status"):  # kopf sends it after this handler returns
            self._status_in_flight[(namespace, name)] = threading.Event()
        self._remember_pod_state(namespace, name, pod)
        if kv is not None:
            self._kv_warning_event(server, *kv)

    def _preflight_status(
        self, server: dict[str, Any], spec: VLLMServerSpec, pods: list[dict[str, Any]], now: str
    ) -> tuple[dict[str, Any], str | None, dict[str, Any]]:
        """Compute the pre-flight and write ``KVCapacity`` and ``status.preflight``; returns
        ``(server as updated, warning or None, condition)``.
        """
        condition, warning, numbers = self.preflight(server["metadata"]["namespace"], spec, pods)
        return self._write_kv_condition(server, condition, warning, now, numbers), warning, condition

    # ------------------------------------------------------------------ Pod handler
    def pod_event_changes_nothing(self, event: Mapping[str, Any], namespace: str) -> bool:
        """Whether a pod event needs no work (no I/O, cheap enough for kopf's loop): not a server's
        pod, or its server's status was written from this very pod state (e.g. the ADDED of the pod
        the reconcile just created).
        """
        pod = event.get("object") or {}
        name = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_SERVER)
        return not name or event.get("type") is None or self._status_is_from(event, namespace, name, pod)

    def on_pod_event(self, event: Mapping[str, Any], namespace: str, logger: logging.Logger, **_: Any) -> None:
        """Any change of a kvpilot pod: recompute its server's status (and read the KV line once Ready)."""
        if self.pod_event_changes_nothing(event, namespace):
            return
        pod = event["object"]
        name = pod["metadata"]["labels"][LABEL_SERVER]
        with self._lock(namespace, name):
            if self._status_is_from(event, namespace, name, pod):
                return  # the reconcile holding the lock just wrote it (the pod's ADDED came during its status write)
            in_flight = self._status_in_flight.get((namespace, name))
            if in_flight is not None:  # the new server's first status is in kopf's patch: read it after it landed
                in_flight.wait(STATUS_IN_FLIGHT_TIMEOUT)
                self._status_in_flight.pop((namespace, name), None)
            server = self._read_server(namespace, name)
            if server is None:
                return
            status = server.get("status") or {}
            meta = server["metadata"]
            if status.get("phase") == "Invalid" and status.get("observedGeneration") == meta.get("generation"):
                return
            if not logic.is_current_pod(status, pod):
                return  # an old pod being replaced, or the server handler has not run yet
            now = now_rfc3339()
            if event["type"] == "DELETED":
                self._write_status(server, logic.pod_deleted_status(server, pod["metadata"]["name"], now=now), logger)
                self._status_from.pop((namespace, name), None)
                return
            report = logic.pod_report(pod)
            kv = None
            failure_log = None
            if report.phase == "Failed" and not (
                status.get("podUid") == pod["metadata"].get("uid") and status.get("phase") == "Failed"
            ):
                failure_log = self._failure_log(pod, logger)
            same_pod = status.get("podUid") == pod["metadata"].get("uid")
            if report.ready and not (same_pod and status.get("kvCacheTokens") is not None):
                kv = self._kv_from_log(pod, logger)
            new = logic.server_status(
                server,
                pod,
                now=now,
                service_name=status.get("serviceName") or name,
                spec_hash=status["specHash"],
                command=status.get("command"),
                kv=kv,
                failure_log=failure_log,
            )
            server = self._write_status(server, new, logger)
            self._remember_pod_state(namespace, name, pod)
            uid = pod["metadata"].get("uid")
            if uid not in self._preflighted_pods and logic.waits_for_node_gpu_memory(server, pod):
                # The pod has a node now: its nvidia.com/gpu.memory label gives the GPU memory the
                # pre-flight lacked on create (once per pod: the label does not change under a pod).
                self._preflighted_pods.add(uid)
                self._preflight_status(server, parse_spec(server.get("spec")), [pod], now)

    def on_server_event(self, event: Mapping[str, Any], namespace: str | None, name: str | None, **_: Any) -> None:
        """A watch event of a VLLMServer (in kopf's loop): a new server's status handed to kopf's
        patch has landed once an event shows it (or the server is gone).
        """
        key = (namespace or "", name or "")
        if key not in self._status_in_flight:
            return
        body = event.get("object") or {}
        if event.get("type") == "DELETED" or (body.get("status") or {}).get("specHash"):
            flag = self._status_in_flight.pop(key, None)
            if flag is not None:
                flag.set()

    def _status_is_from(self, event: Mapping[str, Any], namespace: str, name: str, pod: dict[str, Any]) -> bool:
        """True when the server's last status write was computed from exactly this pod state (not DELETED)."""
        return event["type"] != "DELETED" and self._status_from.get((namespace, name)) == _pod_state(pod)

    def _remember_pod_state(self, namespace: str, name: str, pod: dict[str, Any] | None) -> None:
        """Note the pod state the server's status was just computed from (None: forget)."""
        if pod is None:
            self._status_from.pop((namespace, name), None)
        else:
            self._status_from[(namespace, name)] = _pod_state(pod)


def _pod_state(pod: dict[str, Any]) -> tuple[str | None, str | None]:
    """A pod state's identity: ``(metadata.uid, metadata.resourceVersion)``."""
    meta = pod.get("metadata") or {}
    return meta.get("uid"), meta.get("resourceVersion")


def _event(obj: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:  # noqa: A002 - kopf.event's keyword
    """``kopf.event`` for a plain-dict object (kopf reads only its apiVersion, kind and metadata)."""
    # kopf annotates ``objs`` as its Body view; any mapping works (bodies.build_object_reference)
    kopf.event(obj, type=type, reason=reason, message=message)  # type: ignore[arg-type]


def pods_by_server(
    namespace: str | None, labels: Any, body: Any, **_: Any
) -> dict[tuple[str, str], dict[str, Any]] | None:
    """Kopf index of kvpilot's pods: ``(namespace, server name) -> [pod]`` (label ``kvpilot.dev/server``).

    Reconciles read a server's pods here instead of listing them (kopf keeps the index from the
    pod watch it runs anyway, and fills it before any handler runs at start-up).
    """
    server = (labels or {}).get(LABEL_SERVER)
    return {(namespace, server): dict(body)} if server and namespace is not None else None  # pods are namespaced


def build_registry(
    configuration: kubernetes.client.Configuration,
    *,
    hub: bool = True,
    reload: Callable[[], kubernetes.client.Configuration] | None = None,
    metrics: OperatorMetrics | None = None,
    retry_policy: failures.RetryPolicy | None = None,
    spec_policy: policy.SpecPolicy | None = None,
) -> kopf.OperatorRegistry:
    """A kopf registry with the VLLMServer operator's handlers, talking to ``configuration``'s cluster.

    Args:
        configuration: where the cluster is (``kvpilot.controller.load_configuration()`` for a
            kubeconfig or the in-cluster service account; the sandbox's own for the demo/tests).
        hub: whether the KV pre-flight may fetch a model's config.json from the Hugging Face
            Hub (off for the offline sandbox; a ``modelConfigRef`` ConfigMap always works).
        reload: how to load the configuration again when kopf logs in anew (its credentials were
            refused: an expired token); None keeps ``configuration``.
        metrics: where the handlers count and time their runs and the VLLMServers' limits are
            kept for ``/metrics`` (:mod:`kvpilot.controller.metrics`); None: a fresh, unserved one.
        retry_policy: the backoff of transient API failures (:class:`failures.RetryPolicy`).
        spec_policy: the allow-list of images and service accounts (:class:`policy.SpecPolicy`;
            None: anything allowed).
    """
    registry = kopf.OperatorRegistry()
    controller = Controller(configuration, hub=hub, retry_policy=retry_policy, spec_policy=spec_policy)
    logins = iter(range(1 << 62))

    def login(**_: Any) -> kopf.ConnectionInfo:
        if reload is not None and next(logins) > 0:  # the first login uses the configuration given
            controller.use(reload())
        return connection_info(controller.configuration)

    metrics = metrics or OperatorMetrics()
    kopf.on.login(registry=registry)(login)
    reconcile = metrics.timed("reconcile", controller.reconcile_server)
    for decorator in (kopf.on.create, kopf.on.resume, kopf.on.update):
        decorator(GROUP, VERSION, PLURAL, registry=registry, id="reconcile")(reconcile)

    async def pods_index(**kwargs: Any) -> dict[tuple[str, str], dict[str, Any]] | None:
        return pods_by_server(**kwargs)  # in kopf's loop: a sync index handler costs a thread-pool hop per pod event

    kopf.index("v1", "pods", registry=registry, labels=MANAGED_BY_SELECTOR, id="pods_by_server")(pods_index)
    pod_threads = concurrent.futures.ThreadPoolExecutor(HANDLER_THREADS, thread_name_prefix="kvpilot-pod-event")

    async def on_pod_event(event: Mapping[str, Any], namespace: str, **kwargs: Any) -> None:
        """A pod event that changes nothing is answered in kopf's loop; the others run
        :meth:`Controller.on_pod_event` in a thread (it makes requests), with kopf's context (its Event queue).
        """
        if controller.pod_event_changes_nothing(event, namespace):
            return
        run = functools.partial(contextvars.copy_context().run, controller.on_pod_event, event, namespace, **kwargs)
        await asyncio.get_running_loop().run_in_executor(pod_threads, run)

    on_pod = metrics.timed_async("pod_event", on_pod_event)
    kopf.on.event("v1", "pods", registry=registry, labels=MANAGED_BY_SELECTOR, id="pod_event")(on_pod)

    async def stop_pod_threads(**_: Any) -> None:  # the operator stops: its idle pod-event threads end too
        pod_threads.shutdown(wait=False)

    kopf.on.cleanup(registry=registry)(stop_pod_threads)

    async def on_server_event(**kwargs: Any) -> None:  # in kopf's loop: no thread-pool hop per server event
        metrics.on_server_event(**kwargs)
        controller.on_server_event(**kwargs)

    kopf.on.event(GROUP, VERSION, PLURAL, registry=registry, id="metrics")(on_server_event)
    return registry
