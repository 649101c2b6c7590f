"""Run :class:`FaithfulKubernetes` on loopback in its own thread, with a synchronous face.

The kubernetes client is synchronous and kopf runs its own event loop, so the sandbox API
gets a thread and a loop of its own; tests and ``kvpilot demo`` talk to it over HTTP like
to any cluster, and use the few methods here to read state directly, to inject faults, to
see the requests it served, or to play the scheduler and kubelet (:class:`Kubelet`).
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml

from kvpilot.api.objects import Pod, PodSpec, PodStatus
from kvpilot.api.timestamps import now_rfc3339
from kvpilot.sandbox import kubelet
from kvpilot.sandbox.emulator import FaithfulKubernetes, Observer, Request
from kvpilot.sandbox.faults import Fault
from kvpilot.sandbox.objects import StoredObject
from kvpilot.sandbox.resources import Resource
from kvpilot.sandbox.server import ApiServer

T = TypeVar("T")


class SandboxCluster:
    """A Kubernetes API on ``http://127.0.0.1:<random port>`` for the length of a ``with`` block.

    Args:
        strict: requests to unknown resources or endpoints, and the sandbox's own failures, are
            re-raised when the block exits (default on; :class:`~kvpilot.sandbox.emulator.SandboxSurpriseError`).
        timeout: seconds to wait for the server to start and for each cross-thread call.

    Example::

        with SandboxCluster() as cluster:
            core = kubernetes.client.CoreV1Api(cluster.api_client())
            core.create_namespace({"metadata": {"name": "demo"}})

    Raises (on exit): the first error strict mode collected (an ``ExceptionGroup`` of several).
    """

    def __init__(self, *, strict: bool = True, timeout: float = 10.0) -> None:
        self.strict = strict
        self.timeout = timeout
        self.url = ""
        self.emulator: FaithfulKubernetes | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="kvpilot-sandbox-api", daemon=True)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> SandboxCluster:
        self._thread.start()
        if not self._started.wait(self.timeout) or self._error is not None:
            raise RuntimeError(f"the sandbox API did not start: {self._error!r}")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(self.timeout)
        if self._error is not None and exc_info[0] is None:
            raise self._error
        errors = self.emulator.errors if self.emulator is not None else []
        if self.strict and errors and exc_info[0] is None:
            if len(errors) == 1:
                raise errors[0]
            raise ExceptionGroup("the sandbox API met several surprises", list(errors))

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread by __enter__/__exit__
            self._error = exc
            self._started.set()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        api = FaithfulKubernetes(strict=self.strict)
        async with ApiServer(api) as server:
            self.emulator = api
            self.url = server.url
            self._started.set()
            await self._stop.wait()

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the sandbox's loop (between two requests) and return its result."""
        if self._loop is None:
            raise RuntimeError("the sandbox is not running")

        async def run() -> T:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(self.timeout)

    # ------------------------------------------------------------------ clients
    def configuration(self) -> Any:
        """A ``kubernetes.client.Configuration`` for this API (plain HTTP on loopback)."""
        import kubernetes.client

        return kubernetes.client.Configuration(host=self.url)

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` bound to this API (not to ``KUBECONFIG``)."""
        import kubernetes.client

        return kubernetes.client.ApiClient(self.configuration())

    def write_kubeconfig(self, path: str | Path, namespace: str = "default", token: str = "sandbox") -> Path:
        """Write a kubeconfig for this API (context ``kvpilot-sandbox``) and return its path;
        ``token`` is the bearer token its clients send (:meth:`requests` tells clients apart by it).
        """
        path = Path(path)
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "kvpilot-sandbox",
                    "clusters": [{"name": "kvpilot-sandbox", "cluster": {"server": self.url}}],
                    "users": [{"name": "kvpilot-sandbox", "user": {"token": token}}],
                    "contexts": [
                        {
                            "name": "kvpilot-sandbox",
                            "context": {
                                "cluster": "kvpilot-sandbox",
                                "user": "kvpilot-sandbox",
                                "namespace": namespace,
                            },
                        }
                    ],
                }
            )
        )
        return path

    # ------------------------------------------------------------------ direct state access
    def _running(self) -> FaithfulKubernetes:
        """The emulator; RuntimeError before the sandbox has started (entered)."""
        if self.emulator is None:
            raise RuntimeError("the sandbox is not running")
        return self.emulator

    def get(self, resource: str, namespace: str | None, name: str) -> StoredObject | None:
        """The stored object (``resource`` as ``"v1/pods"`` or ``"kvpilot.dev/v1alpha1/vllmservers"``)."""
        return self.call(self._running().get, Resource.parse(resource), namespace, name)

    def list(self, resource: str, namespace: str | None = None) -> list[StoredObject]:
        """Live objects of ``resource`` (in ``namespace`` when given), sorted by creation order."""
        return self.call(self._running().objects, Resource.parse(resource), namespace)

    def served(self) -> builtins.list[Request]:  # `list` here is the method above
        """Every request served so far, in order (:class:`~kvpilot.sandbox.emulator.Request`: method,
        path, query, parsed JSON body, bearer token, API verb, resource, namespace, name, subresource).
        """
        return builtins.list(self._running().requests)  # appended by the sandbox's loop: a snapshot

    def requests(self) -> builtins.list[tuple[str, str, str]]:
        """Every request served so far, in order, as ``(method, path, bearer token or "")``."""
        return [(r.method, r.path, r.token) for r in self.served()]

    def observe(self, observer: Observer) -> None:
        """Call ``observer(event type, resource, object)`` in the sandbox's loop after every change."""
        self._running().observers.append(observer)

    def inject(self, verb: str, plural: str, **fault: Any) -> Fault:
        """Answer matching requests with a failure from now on (see :class:`~kvpilot.sandbox.faults.Fault`).

        Example: ``cluster.inject("create", "pods", code=403, message="violates PodSecurity ...")``;
        ``cluster.inject("update", "vllmservers", subresource="status", code=500, times=2)``;
        ``cluster.inject("watch", "pods", cut_watch=True)``. Returns the fault (its ``hits`` count
        the requests answered); :meth:`clear_faults` removes every fault.
        """
        injected = Fault(verb=verb, plural=plural, **fault)
        self._running().faults.append(injected)
        return injected

    def clear_faults(self) -> None:
        """Serve every request normally again."""
        self._running().faults.clear()

    def set_pod_log(self, namespace: str, name: str, text: str) -> None:
        """What the pod's container printed (served by ``pods/NAME/log`` once it runs)."""
        self._running().pod_logs[(namespace, name)] = text

    def set_pod_status(
        self, namespace: str, name: str, status: PodStatus, spec_changes: PodSpec | None = None
    ) -> Pod | None:
        """Write a pod's status as the kubelet does (a MODIFIED event when it changed)."""
        return self.call(self._running().write_pod_status, namespace, name, copy.deepcopy(status), spec_changes)


class Kubelet:
    """Plays the scheduler and kubelet for pods of a :class:`SandboxCluster`, openly.

    Each method moves one pod to the next state a real node would report (see
    :mod:`kvpilot.sandbox.kubelet`) and returns the new pod, or None when the pod is gone.
    """

    def __init__(self, cluster: SandboxCluster, node: str = "gpu-node-1") -> None:
        self.cluster = cluster
        self.node = node

    def _apply(
        self,
        namespace: str,
        name: str,
        build: Callable[..., PodStatus],
        *args: Any,
        spec_changes: PodSpec | None = None,
        **kwargs: Any,
    ) -> Pod | None:
        pod = cast(Pod | None, self.cluster.get("v1/pods", namespace, name))
        if pod is None:
            return None
        return self.cluster.set_pod_status(namespace, name, build(pod, now_rfc3339(), *args, **kwargs), spec_changes)

    def unschedulable(self, namespace: str, name: str, message: str = kubelet.UNSCHEDULABLE_GPU) -> Any:
        """The scheduler reports that no node fits (default: no free ``nvidia.com/gpu``)."""
        return self._apply(namespace, name, kubelet.unschedulable, message=message)

    def schedule(self, namespace: str, name: str) -> Any:
        """Bind the pod to this node; the kubelet starts pulling the image."""
        return self._apply(namespace, name, kubelet.scheduled, spec_changes={"nodeName": self.node})

    def start(self, namespace: str, name: str, log: str | None = None) -> Any:
        """The container runs (vLLM loads the model); ``log`` is what it printed so far."""
        if log is not None:
            self.cluster.set_pod_log(namespace, name, log)
        return self._apply(namespace, name, kubelet.running, spec_changes={"nodeName": self.node})

    def ready(self, namespace: str, name: str, log: str | None = None) -> Any:
        """The readiness probe passes (``/v1/models`` answers)."""
        if log is not None:
            self.cluster.set_pod_log(namespace, name, log)
        return self._apply(namespace, name, kubelet.running, ready=True, spec_changes={"nodeName": self.node})

    def fail(self, namespace: str, name: str, *, exit_code: int = 1, reason: str = "Error", message: str = "") -> Any:
        """The container exits non-zero (e.g. vLLM refuses to start); ``message`` = termination message."""
        return self._apply(namespace, name, kubelet.terminated, exit_code=exit_code, reason=reason, message=message)

    def deadline_exceeded(self, namespace: str, name: str) -> Any:
        """``activeDeadlineSeconds`` (the server's ttlSeconds) is over: the kubelet ends the pod."""
        return self._apply(namespace, name, kubelet.deadline_exceeded)
