"""The kopf handlers of the VLLMServer operator and their registration (thin: read, call :mod:`logic`, write).

:func:`build_registry` returns a fresh :class:`kopf.OperatorRegistry` with:

- ``create``/``resume``/``update`` of a VLLMServer → :meth:`Controller.reconcile_server`:
  validate the spec (an invalid one → phase ``Invalid``, a ``Valid=False`` condition and a
  Warning Event naming the field, then :class:`kopf.PermanentError`: no pod, no retry loop; the
  same, reason ``NotAllowed``, for an image or service account outside the operator's allow-list),
  ensure the Service, apply :func:`logic.plan_pods` (adopt, replace on a spec change, never
  restart an ended server), the KV pre-flight (``KVCapacity``; before the pod only with
  ``preflight: enforce``, so a slow Hub never delays a pod), then one status write;
- every event of a pod labelled ``app.kubernetes.io/managed-by=kvpilot`` →
  :meth:`Controller.on_pod_event` (:func:`logic.pod_event_plan` decides): recompute the owning
  server's status from the pod; when the pod is Ready, read its log once and fill
  ``kvCacheTokens``/``maxConcurrency``; when it failed, read the end of its log once for vLLM's
  root cause; when it is scheduled and ``KVCapacity`` lacked the GPU memory, run the pre-flight
  again with its node's ``nvidia.com/gpu.memory`` label;
- a kopf index of those pods by server (reconciles read it instead of listing);
- every event of a VLLMServer → the operator's metrics;
- a login handler connecting to the cluster the caller chose (a kubeconfig, the in-cluster
  service account, or the sandbox).

Where the work is: :mod:`kvpilot.controller.kube` (requests), :mod:`kvpilot.controller.status`
(the one status write path, retried until it lands, its Events, the ledger of what the stored status
was computed from),
:mod:`kvpilot.controller.preflight` (the KV pre-flight's inputs), :mod:`kvpilot.controller.logic`
(every decision), :mod:`kvpilot.controller.failures` (what a failure becomes).

The reconcile is synchronous (kopf runs it in its thread pool, ``settings.execution.max_workers``);
the pod handler is a coroutine in kopf's loop that answers the events that change nothing there and
runs the others in a pool of its own. The reconcile and the pod handler of one VLLMServer take its
lock, so a transition is seen (and announced) once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import copy
import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, NoReturn, cast

import kopf
import kubernetes.client

from kvpilot.api import GROUP, PLURAL, VERSION, SpecError, spec_hash
from kvpilot.api.constants import LABEL_SERVER
from kvpilot.api.objects import Pod, PodEvent, Service, VLLMServerObject
from kvpilot.api.timestamps import now_rfc3339
from kvpilot.controller import failures, logic, policy
from kvpilot.controller.kube import FAILURE_LOG_BYTES, FAILURE_LOG_LINES, LOG_LIMIT_BYTES, Kube
from kvpilot.controller.metrics import OperatorMetrics
from kvpilot.controller.preflight import Preflight
from kvpilot.controller.settings import HANDLER_THREADS, MANAGED_BY_SELECTOR, connection_info
from kvpilot.controller.status import StatusLedger, StatusWriter, post
from kvpilot.render import render_objects, vllm_command
from kvpilot.vllm.startup_log import parse_kv_cache_report

#: kopf's index of kvpilot's pods (:func:`pods_by_server`): ``(namespace, server) -> pod objects``
PodIndex = kopf.Index[tuple[str, str], Pod]


class Controller:
    """The handlers and their shared state: the cluster I/O, the status writer and a lock per VLLMServer."""

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
        self.ledger = StatusLedger()
        #: uids of pods whose node's GPU-memory label the pre-flight has already read.
        self._preflighted_pods: set[str | None] = set()
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self.use(configuration)

    def use(self, configuration: kubernetes.client.Configuration) -> None:
        """Talk to the cluster through ``configuration`` from now on (e.g. after kopf re-logs in)."""
        self.configuration = configuration
        self.kube = Kube(configuration)
        self.status = StatusWriter(self.kube, self.ledger)
        self.preflight = Preflight(self.kube, hub=self.hub)

    def _lock(self, namespace: str, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault((namespace, name), threading.Lock())

    # ------------------------------------------------------------------ VLLMServer handlers
    def reconcile_server(
        self,
        body: Any,
        namespace: str,
        name: str,
        logger: logging.Logger,
        retry: int = 0,
        pods_by_server: PodIndex | None = None,
        **_: Any,
    ) -> None:
        """create/resume/update: validate, ensure Service and Pod, write status (idempotent).

        Never stuck: any exception is classified (:func:`kvpilot.controller.failures.classify`)
        into a phase, a ``Ready=False`` condition with its reason and a Warning Event, then a
        :class:`kopf.PermanentError` (the spec or the cluster must change) or a
        :class:`kopf.TemporaryError` with the policy's exponential, bounded backoff.
        """
        step = ["reading the VLLMServer"]
        server: logic.Server | None = None
        with self._lock(namespace, name):
            try:
                # A body without status is a server no reconcile has written yet: kopf's copy is
                # current (only this operator writes status), so it is not read again.
                stored = (
                    cast(VLLMServerObject, copy.deepcopy(dict(body)))
                    if logic.is_new_server(body)
                    else self.kube.read_server(namespace, name)
                )
                if stored is None:
                    return
                server = logic.Server.of(stored)
                self._reconcile(server, namespace, name, logger, step, pods_by_server)
            except kopf.PermanentError:
                raise
            except Exception as exc:  # noqa: BLE001 - every failure ends in a phase, an Event and retry-or-stop
                self._fail(
                    server or logic.Server.of(cast(VLLMServerObject, dict(body or {}))), exc, step[0], retry, logger
                )

    def _fail(self, server: logic.Server, exc: Exception, step: str, retry: int, logger: logging.Logger) -> NoReturn:
        """Report a failed reconcile (status, Warning Event, log) and raise kopf's retry-or-stop."""
        failure = failures.classify(
            exc, step=step, retry=retry, policy=self.retry_policy, conflict_owner=getattr(exc, "conflict_owner", None)
        )
        logger.warning(f"{server.name}: {failure.reason}: {failure.message}")
        if server.uid:
            try:  # best effort: the status write may be what is failing
                self.status.write(server, failures.failure_status(server, failure, now=now_rfc3339()), logger)
            except Exception as write_exc:  # noqa: BLE001 - already failing; the Event and the log carry it
                self.ledger.forget((server.namespace, server.name))
                logger.warning(f"could not write the failure status: {type(write_exc).__name__}")
            post(server.body, failures.failure_event(failure))
        if failure.permanent:
            raise kopf.PermanentError(failure.message) from None
        raise kopf.TemporaryError(failure.message, delay=failure.delay) from None

    def _reconcile(
        self,
        server: logic.Server,
        namespace: str,
        name: str,
        logger: logging.Logger,
        step: list[str],
        pods_index: PodIndex | None = None,
    ) -> None:
        """The reconcile proper; ``step[0]`` names what it is doing (for a failure's message).

        Requests for a new server: the Service and Pod creates and one status write (with the KV
        pre-flight's condition); the pods come from kopf's index.
        """
        now = now_rfc3339()
        step[0] = "validating and rendering the spec"
        try:
            spec = server.spec()
            pod_obj, service = render_objects(name, namespace, spec, owner=server.body)  # pod named <name>-<hash[:5]>
        except SpecError as exc:
            step[0] = "writing the Invalid status"
            self.status.write(server, logic.invalid_status(server, str(exc), now=now), logger)
            raise kopf.PermanentError(f"invalid spec: {exc}") from None
        refused = policy.violation(self.spec_policy, pod_obj)
        if refused is not None:  # the operator's allow-list (kvpilot operator --allowed-image ...)
            step[0] = "writing the Invalid status"
            self.status.write(server, logic.invalid_status(server, refused, now=now, reason="NotAllowed"), logger)
            raise kopf.PermanentError(f"not allowed: {refused}")
        digest = spec_hash(spec)
        step[0] = "listing the server's pods"
        pods = (
            list(pods_index.get((namespace, name), ()))  # one C-level copy: safe beside kopf's loop
            if pods_index is not None
            else self.kube.list_pods(namespace, name)
        )
        order = logic.preflight_order(spec.preflight)
        kv = None
        if order == "before":  # the verdict decides whether a pod may exist
            step[0] = "running the KV pre-flight"
            kv = self.preflight.run(namespace, spec, pods)
            refusal = logic.preflight_refusal(server, spec.preflight, kv.condition, kv.warning, now=now)
            if refusal is not None:
                step[0] = "writing the Invalid status"
                refusal = logic.with_kv_condition(server, refusal, kv.condition, kv.numbers, now=now)
                self.status.write(server, refusal, logger, kv=(kv.condition, kv.warning))
                raise kopf.PermanentError(f"pre-flight refused the spec: {kv.warning}")
        step[0] = f"creating service {service['metadata']['name']}"
        service_created = self._ensure_service(service, server)
        plan = logic.plan_pods(server, pods, digest)
        for stale in plan.delete:
            logger.info(f"deleting pod {stale} (spec changed or duplicate)")
            step[0] = f"deleting pod {stale}"
            self.kube.delete_pod(namespace, stale)
            post(server.body, logic.replaced_event(stale))
        pod: Pod | None
        pod, adopted = plan.keep, False
        if plan.create:
            step[0] = f"creating pod {pod_obj['metadata']['name']}"
            pod, made = self.kube.create_or_adopt(pod_obj, "pods", server.uid)
            adopted = not made
        note = logic.creation_note(
            plan,
            server.status,
            pod_name=(pod or {}).get("metadata", {}).get("name"),
            spec_hash=digest,
            service_name=service["metadata"]["name"],
            service_created=service_created,
            adopted=adopted,
        )
        if note.event is not None:
            post(server.body, note.event)
        status = logic.reconciled_status(
            server,
            plan,
            pod,
            now=now,
            service_name=service["metadata"]["name"],
            spec_hash=digest,
            command=vllm_command(spec),
        )
        if order == "after":  # after the pod exists: a slow or unreachable Hub never delays it
            step[0] = "running the KV pre-flight"
            kv = self.preflight.run(namespace, spec, [pod] if pod else [])
        if kv is not None:
            status = logic.with_kv_condition(server, status, kv.condition, kv.numbers, now=now)
        step[0] = "writing the status"
        self.status.write(
            server,
            status,
            logger,
            pod=pod,
            created=note.created,
            kv=(kv.condition, kv.warning) if kv is not None else None,
        )

    def _ensure_service(self, service: Service, server: logic.Server) -> bool:
        """Create the Service unless this server's already exists (one it does not own is a conflict);
        True when this call created it (read first or create first: :func:`logic.service_read_first`).
        """
        if logic.service_read_first(server):
            existing = self.kube.read(service, "services")
            if existing is not None:
                self.kube.adopt(existing, service, "services", server.uid)  # NameConflict when it is not ours
                return False
        return self.kube.create_or_adopt(service, "services", server.uid)[1]

    # ------------------------------------------------------------------ Pod handler
    def pod_event_changes_nothing(self, event: PodEvent, namespace: str) -> bool:
        """Whether a pod event needs no work (no I/O, cheap enough for kopf's loop): not a server's
        pod, or its server's status was computed from this very pod state (e.g. the ADDED of the pod
        the reconcile just created).
        """
        name = logic.pod_event_server(event)
        if name is None:
            return True
        return event.get("type") != "DELETED" and self.ledger.is_from((namespace, name), event["object"])

    def on_pod_event(self, event: PodEvent, namespace: str, logger: logging.Logger, **_: Any) -> None:
        """Any change of a kvpilot pod: recompute its server's status (:func:`logic.pod_event_plan`)."""
        if self.pod_event_changes_nothing(event, namespace):
            return
        pod = event["object"]
        name = pod["metadata"]["labels"][LABEL_SERVER]
        with self._lock(namespace, name):
            if self.pod_event_changes_nothing(event, namespace):
                return  # the reconcile that held the lock computed the status from this pod state
            stored = self.kube.read_server(namespace, name)
            if stored is None:
                return
            server = logic.Server.of(stored)
            plan = logic.pod_event_plan(server, pod, event["type"])
            now = now_rfc3339()
            if plan.action == "ignore":
                logger.debug(f"pod {pod['metadata']['name']}: {plan.why}")
                return
            if plan.action == "deleted":
                deleted = logic.pod_deleted_status(
                    server, pod["metadata"]["name"], now=now, spec_hash=plan.spec_hash, command=plan.command
                )
                self.status.write(server, deleted, logger)
                return
            failure_log = (
                self._log(pod, logger, FAILURE_LOG_BYTES, FAILURE_LOG_LINES) if plan.read_failure_log else None
            )
            kv = self._kv_from_log(pod, logger) if plan.read_kv_log else None
            new = logic.server_status(
                server,
                pod,
                now=now,
                service_name=plan.service_name,
                spec_hash=plan.spec_hash,
                command=plan.command,
                kv=kv,
                failure_log=failure_log,
            )
            server = self.status.write(server, new, logger, pod=pod)
            uid = pod["metadata"].get("uid")
            if plan.preflight_again and uid not in self._preflighted_pods:
                # The pod has a node now: its nvidia.com/gpu.memory label gives the GPU memory the
                # pre-flight lacked on create (once per pod: the label does not change under a pod).
                self._preflighted_pods.add(uid)
                result = self.preflight.run(namespace, server.spec(), [pod])
                status = logic.with_kv_condition(server, server.status, result.condition, result.numbers, now=now)
                self.status.write(server, status, logger, pod=pod, kv=(result.condition, result.warning))

    def _log(self, pod: Pod, logger: logging.Logger, limit: int, lines: int | None = None) -> str | None:
        """The pod's vLLM log (bounded), or None when it cannot be read (logged)."""
        try:
            return self.kube.pod_log(pod, limit_bytes=limit, tail_lines=lines)
        except kubernetes.client.ApiException as exc:
            logger.warning(f"could not read the log of pod {pod['metadata']['name']}: {exc.status} {exc.reason}")
            return None

    def _kv_from_log(self, pod: Pod, logger: logging.Logger) -> tuple[int, float | None] | None:
        """``(kvCacheTokens, maxConcurrency)`` from vLLM's KV-capacity line in the pod's log, if there."""
        report = parse_kv_cache_report(self._log(pod, logger, LOG_LIMIT_BYTES) or "")
        return None if report is None else (report.kv_cache_tokens, report.max_concurrency)


def pods_by_server(namespace: str | None, labels: Any, body: Any, **_: Any) -> dict[tuple[str, str], Pod] | None:
    """Kopf index of kvpilot's pods: ``(namespace, server name) -> [pod]`` (label ``kvpilot.dev/server``).

    Reconciles read a server's pods here instead of listing them (kopf keeps the index from the
    pod watch it runs anyway, and fills it before any handler runs at start-up).
    """
    server = (labels or {}).get(LABEL_SERVER)
    if not server or namespace is None:  # not a server's pod (pods are namespaced)
        return None
    return {(namespace, server): cast(Pod, dict(body))}


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
        configuration: where the cluster is (``kvpilot.controller.runner.load_configuration()`` for a
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

    async def pods_index(**kwargs: Any) -> dict[tuple[str, str], Pod] | None:
        return pods_by_server(**kwargs)  # in kopf's loop: a sync index handler costs a thread-pool hop per pod event

    kopf.index("v1", "pods", registry=registry, labels=MANAGED_BY_SELECTOR, id="pods_by_server")(pods_index)
    pod_threads = concurrent.futures.ThreadPoolExecutor(HANDLER_THREADS, thread_name_prefix="kvpilot-pod-event")

    async def on_pod_event(event: PodEvent, namespace: str, **kwargs: Any) -> None:
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

    kopf.on.event(GROUP, VERSION, PLURAL, registry=registry, id="metrics")(on_server_event)
    return registry
