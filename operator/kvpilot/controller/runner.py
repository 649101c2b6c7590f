"""Where the operator connects, and running it (in the foreground or in a thread).

The kubernetes client captures ``KUBECONFIG`` when it is imported; :func:`load_configuration`
reads the variable when called instead, so the same process can be pointed elsewhere.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

import kopf
import kubernetes.client
import kubernetes.config
import yaml

from kvpilot.api.constants import CRD_NAME
from kvpilot.api.crd import missing_status_fields
from kvpilot.controller.handlers import build_registry
from kvpilot.controller.metrics import OperatorMetrics
from kvpilot.controller.policy import SpecPolicy
from kvpilot.controller.settings import make_settings, start_order_priority

#: ``gc.set_threshold`` of the operator process: a young-generation collection per 50,000 net
#: allocations of tracked objects instead of CPython's 700, and 20 (not 10) of each generation
#: before the next older one. kopf keeps every watched object's body, so the heap holds a few
#: hundred thousand long-lived objects per 1,000 servers and each full collection walks them
#: all (the CPU a burst spent collecting, before and after: docs/performance.md, "What the code's
#: choices bought"). Python's ``gc`` docs: https://docs.python.org/3/library/gc.html#gc.set_threshold
GC_THRESHOLDS = (50_000, 20, 20)


def tune_gc() -> None:
    """Set :data:`GC_THRESHOLDS` for this process (``kvpilot operator`` does, before kopf starts)."""
    gc.set_threshold(*GC_THRESHOLDS)


class ClusterConfigError(Exception):
    """No usable cluster configuration (message names what was tried)."""


def load_configuration(kubeconfig: str | None = None, context: str | None = None) -> kubernetes.client.Configuration:
    """The cluster to use: ``kubeconfig`` (or ``$KUBECONFIG``), else the in-cluster service account
    (``KUBERNETES_SERVICE_HOST`` set), else ``~/.kube/config``.

    Raises:
        ClusterConfigError: naming the source that failed as the user gave it, and a missing file as
            missing: ``FILE: no such file`` for ``kubeconfig`` (the caller names its option), ``$KUBECONFIG
            names FILE: no such file``, ``~/.kube/config: no such file, and not in a cluster ...``.
    """
    configuration = kubernetes.client.Configuration()
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if kubeconfig or os.environ.get("KUBECONFIG"):
        path = (kubeconfig or os.environ["KUBECONFIG"]).split(os.pathsep)[0]
        source = path if kubeconfig else f"$KUBECONFIG names {path}"
    elif in_cluster:
        path, source = "", "the in-cluster service account"
    else:
        path, source = "~/.kube/config", "~/.kube/config"
    if path and not os.path.isfile(os.path.expanduser(path)):
        missing = "is a directory, not a file" if os.path.isdir(os.path.expanduser(path)) else "no such file"
        where = (
            "" if kubeconfig or os.environ.get("KUBECONFIG") else ", and not in a cluster (no KUBERNETES_SERVICE_HOST)"
        )
        raise ClusterConfigError(f"{source}: {missing}{where}")
    try:
        if path:
            kubernetes.config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
        else:
            kubernetes.config.load_incluster_config(client_configuration=configuration)
    except (kubernetes.config.ConfigException, OSError, TypeError, ValueError, yaml.YAMLError) as exc:
        # ValueError: not UTF-8; YAMLError: not YAML (the client parses the file with PyYAML and lets it through)
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        mark = getattr(exc, "problem_mark", None)
        if isinstance(exc, yaml.YAMLError) and mark is not None:
            detail = f"not valid YAML at line {mark.line + 1}, column {mark.column + 1}: {getattr(exc, 'problem', '')}"
        raise ClusterConfigError(f"{source}: no usable cluster configuration: {detail}") from None
    return configuration


class OutdatedCRDError(Exception):
    """The VLLMServer CRD in the cluster lacks status fields this operator writes (message names them)."""


#: Longest wait (s) for the API server's answer to the CRD read of :func:`check_crd`.
CRD_READ_TIMEOUT = 10.0


def check_crd(configuration: kubernetes.client.Configuration) -> None:
    """Refuse to run beside a VLLMServer CRD older than this operator (:func:`missing_status_fields`).

    Helm installs ``crds/`` but never upgrades them: after ``helm upgrade`` from the release that
    kept kopf's record in annotations, the cluster's CRD lacks ``status.kopf``, the API server
    prunes kopf's record at every write, and kopf takes every event of a server for a new server
    (its creation handler again, a warning per write) and loses its retry state. A CRD that cannot be
    read (no RBAC, not installed, no answer within :data:`CRD_READ_TIMEOUT`) is left to kopf,
    which reports it.

    Raises:
        OutdatedCRDError: naming the missing fields and the fix.
    """
    api = kubernetes.client.ApiextensionsV1Api(kubernetes.client.ApiClient(configuration))
    try:
        response = api.read_custom_resource_definition(
            CRD_NAME, _preload_content=False, _request_timeout=CRD_READ_TIMEOUT
        )
        installed = json.loads(response.data)  # type: ignore[attr-defined]  # _preload_content=False: the raw HTTP response
    except Exception as exc:  # noqa: BLE001 - a check only: kopf reports an unreadable CRD itself
        logging.getLogger(__name__).warning(f"could not read CRD {CRD_NAME} to check it: {type(exc).__name__}")
        return
    missing = missing_status_fields(installed)
    if missing:
        raise OutdatedCRDError(
            f"the cluster's CRD {CRD_NAME} does not declare {', '.join(missing)}, which this operator writes "
            "(the API server would drop it at every write): apply this release's CRD first, "
            "kubectl apply -f manifests/crd/vllmservers.yaml (helm upgrade never updates a chart's crds/)"
        )


def operator_identity() -> str:
    """This replica's name among its peers and in its Events' ``reportingInstance``: ``$POD_NAME``
    (the Deployment sets it from the downward API), else ``<hostname>/<pid>``.
    """
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}/{os.getpid()}"


def run_operator(
    configuration: kubernetes.client.Configuration,
    *,
    namespaces: Collection[str] = (),
    clusterwide: bool = False,
    standalone: bool = False,
    peering_name: str | None = None,
    liveness_endpoint: str | None = None,
    priority: int | None = None,
    peering_lifetime: int | None = None,
    stop_flag: Any = None,
    ready_flag: Any = None,
    loop: asyncio.AbstractEventLoop | None = None,
    hub: bool = True,
    reload: Callable[[], kubernetes.client.Configuration] | None = None,
    metrics: OperatorMetrics | None = None,
    spec_policy: SpecPolicy | None = None,
    settings: kopf.OperatorSettings | None = None,
) -> None:
    """Run the operator until stopped (kopf's ``run`` with kvpilot's registry and settings).

    Arguments are kopf's run options (``kopf run --help``); ``stop_flag``/``ready_flag`` are
    ``threading.Event`` (or asyncio) flags as :func:`kopf.run` takes them; ``hub`` lets the KV
    pre-flight fetch model configs from the Hugging Face Hub; ``reload`` re-reads the cluster
    configuration when kopf must log in again (expired credentials); ``metrics`` receives the
    handlers' counters and the servers' limits (serve it with :meth:`OperatorMetrics.serve`);
    ``spec_policy`` is the allow-list of images and service accounts (None: anything);
    ``settings``: kopf settings to start from (kvpilot's are applied on top, :func:`make_settings`).

    With ``peering_name`` and no ``priority``, the priority follows the start time
    (:func:`~kvpilot.controller.settings.start_order_priority`): the oldest live replica acts, the
    others wait; ``peering_lifetime`` is how long a replica killed without a goodbye still blocks
    the others (kopf's ``settings.peering.lifetime``, 60 s by default). The peer's identity and
    its Events' ``reportingInstance`` are :func:`operator_identity`.

    Raises:
        OutdatedCRDError: before kopf starts, when the cluster's CRD is older than this operator (:func:`check_crd`).
    """
    check_crd(configuration)
    identity = operator_identity()
    if peering_name and priority is None:
        priority = start_order_priority(time.time_ns(), random.randrange(1000))
    kopf.run(
        registry=build_registry(configuration, hub=hub, reload=reload, metrics=metrics, spec_policy=spec_policy),
        settings=make_settings(settings, peering_lifetime=peering_lifetime, reporting_instance=identity),
        identity=identity,  # type: ignore[arg-type]  # kopf's peering.Identity: a NewType of str it does not export
        namespaces=list(namespaces),
        clusterwide=clusterwide,
        standalone=standalone,
        peering_name=peering_name,
        liveness_endpoint=liveness_endpoint,
        priority=priority,
        stop_flag=stop_flag,
        ready_flag=ready_flag,
        loop=loop,
    )


class OperatorThread:
    """The operator in a background thread, for ``kvpilot demo`` (tests use kopf's KopfRunner);
    offline: the KV pre-flight uses ``modelConfigRef`` ConfigMaps only, never the Hub.

    Example::

        with OperatorThread(cluster.configuration(), namespaces=["demo"]):
            ...  # create VLLMServers, wait for pods
    """

    def __init__(
        self, configuration: kubernetes.client.Configuration, *, namespaces: Collection[str], timeout: float = 10.0
    ) -> None:
        self.configuration = configuration
        self.namespaces = list(namespaces)
        self.timeout = timeout
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="kvpilot-operator", daemon=True)

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            run_operator(
                self.configuration,
                namespaces=self.namespaces,
                standalone=True,
                stop_flag=self._stop,
                ready_flag=self._ready,
                loop=loop,
                hub=False,
            )
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread by __enter__/__exit__
            self.error = exc
            self._ready.set()
        finally:
            loop.close()

    def __enter__(self) -> OperatorThread:
        self._thread.start()
        if not self._ready.wait(self.timeout) or self.error is not None:
            raise RuntimeError(f"the operator did not start: {self.error!r}")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(self.timeout)
        if self._thread.is_alive():
            raise RuntimeError("the operator did not stop in time")
