"""The kopf handlers of the VLLMServer operator (thin: read, call :mod:`logic`, write).

:func:`build_registry` returns a fresh :class:`kopf.OperatorRegistry` with:

- ``create``/``resume``/``update`` of a VLLMServer → :meth:`Controller.reconcile_server`:
  validate the spec (an invalid one → phase ``Invalid``, a ``Valid=False`` condition and a
  Warning Event naming the field, then :class:`kopf.PermanentError`: no pod, no retry loop),
  ensure the Service, apply :func:`logic.plan_pods` (adopt, replace on a spec change, never
  restart an ended server), write the status through ``/status``;
- every event of a pod labelled ``app.kubernetes.io/managed-by=kvpilot`` →
  :meth:`Controller.on_pod_event`: recompute the owning server's status from the pod; when
  the pod is Ready, read its log once and fill ``kvCacheTokens``/``maxConcurrency``;
- a login handler connecting to the cluster the caller chose (a kubeconfig, the in-cluster
  service account, or the sandbox);
- a Kubernetes Event on the VLLMServer for every phase transition.

Handlers are synchronous (kopf runs them in its thread pool) and use the ``kubernetes``
client; status writes from the server and pod handlers of one VLLMServer are serialised by a
per-server lock, so a transition is seen (and announced) once.
"""

from __future__ import annotations

import datetime
import logging
import threading
from typing import Any

import kopf
import kubernetes.client
from kubernetes.client.exceptions import ApiException

from kvpilot.api import GROUP, PLURAL, VERSION, SpecError, parse_spec, spec_hash
from kvpilot.controller import logic
from kvpilot.controller.vllm_log import parse_kv_cache_report
from kvpilot.render import render_objects, vllm_command

#: kopf keeps its progress and last-handled spec in annotations under this prefix (never in
#: ``status``: a real API server prunes status fields the CRD does not declare).
ANNOTATION_PREFIX = "kvpilot.dev"
MANAGED_BY_SELECTOR = {"app.kubernetes.io/managed-by": "kvpilot"}
#: Upper bound of log bytes read to find the KV line (vLLM prints it within its first few
#: hundred lines; 8 MiB is far beyond that and bounds the read).
LOG_LIMIT_BYTES = 8 * 2**20
#: The node label NVIDIA GPU feature discovery sets (MiB), for the KV pre-flight.
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"


def now_rfc3339() -> str:
    """The current UTC time as an RFC 3339 string (seconds)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_settings(settings: kopf.OperatorSettings | None = None) -> kopf.OperatorSettings:
    """kopf settings for kvpilot: progress and diff-base in ``kvpilot.dev/…`` annotations (status
    keeps only CRD-declared fields), kopf's own log lines not posted as Events (only warnings),
    and quiet finalizers (no delete handler: owner references delete the pod and service)."""
    settings = settings or kopf.OperatorSettings()
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration")
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    return settings


def connection_info(configuration: kubernetes.client.Configuration) -> kopf.ConnectionInfo:
    """kopf's connection from a kubernetes-client ``Configuration`` (so both talk to one cluster)."""
    token = None
    auth = (configuration.api_key or {}).get("authorization") or (configuration.api_key or {}).get("BearerToken")
    if auth:
        token = auth.split(" ", 1)[1] if auth.lower().startswith("bearer ") else auth
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        username=configuration.username or None,
        password=configuration.password or None,
        scheme="Bearer" if token else None,
        token=token,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
    )


class Controller:
    """The handlers' shared state: one API client and a lock per VLLMServer."""

    def __init__(self, configuration: kubernetes.client.Configuration) -> None:
        self.configuration = configuration
        self.api = kubernetes.client.ApiClient(configuration)
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def _lock(self, namespace: str, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault((namespace, name), threading.Lock())

    # ------------------------------------------------------------------ I/O helpers
    def _read_server(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _write_status(self, server: dict[str, Any], new: dict[str, Any], logger: logging.Logger) -> dict[str, Any]:
        """Merge-patch ``/status`` with what changed; post an Event on a phase transition."""
        old = server.get("status") or {}
        patch = logic.status_patch(old, new, keep=("preflight",))
        if not patch:
            return server
        meta = server["metadata"]
        updated = self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], {"status": patch})
        if logic.is_transition(old, new):
            logger.info(f"{meta['name']}: {old.get('phase')} -> {new.get('phase')} ({new.get('reason')})")
            kopf.event(server, type=logic.event_type(new), reason=new.get("phase") or "Unknown",
                       message=f"{new.get('reason')}: {new.get('message')}"[:1024])
        return updated

    def _pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"{logic.SERVER_LABEL}={name}")
        return [self.api.sanitize_for_serialization(p) for p in pods.items]

    def _ensure_service(self, service: dict[str, Any]) -> None:
        meta = service["metadata"]
        try:
            self.core.read_namespaced_service(meta["name"], meta["namespace"])
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.core.create_namespaced_service(meta["namespace"], service)

    def _kv_from_log(self, pod: dict[str, Any], logger: logging.Logger) -> tuple[int, float | None] | None:
        meta = pod["metadata"]
        try:
            text = self.core.read_namespaced_pod_log(meta["name"], meta["namespace"], container="vllm",
                                                     limit_bytes=LOG_LIMIT_BYTES)
        except ApiException as exc:
            logger.warning(f"could not read the log of pod {meta['name']}: {exc.status} {exc.reason}")
            return None
        report = parse_kv_cache_report(text or "")
        return None if report is None else (report.kv_cache_tokens, report.max_concurrency)

    # ------------------------------------------------------------------ VLLMServer handlers
    def reconcile_server(self, body: Any, namespace: str, name: str, logger: logging.Logger, **_: Any) -> None:
        """create/resume/update: validate, ensure Service and Pod, write status (idempotent)."""
        with self._lock(namespace, name):
            server = self._read_server(namespace, name)
            if server is None:
                return
            now = now_rfc3339()
            try:
                spec = parse_spec(server.get("spec"))
            except SpecError as exc:
                self._write_status(server, logic.invalid_status(server, str(exc), now=now), logger)
                raise kopf.PermanentError(f"invalid spec: {exc}") from None
            digest = spec_hash(spec)
            pod_obj, service = render_objects(name, namespace, spec, owner=server)
            pod_obj["metadata"]["name"] = logic.pod_name(name, digest)
            self._ensure_service(service)
            plan = logic.plan_pods(server, self._pods(namespace, name), digest)
            for stale in plan.delete:
                logger.info(f"deleting pod {stale} (spec changed or duplicate)")
                try:
                    self.core.delete_namespaced_pod(stale, namespace)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
            pod = plan.keep
            if plan.create:
                created = self.core.create_namespaced_pod(namespace, pod_obj)
                pod = self.api.sanitize_for_serialization(created)
                kopf.event(server, type="Normal", reason="PodCreated",
                           message=f"created pod {pod['metadata']['name']} for spec {digest}")
            status = logic.server_status(server, pod, now=now, service_name=service["metadata"]["name"],
                                         spec_hash=digest, command=vllm_command(spec))
            if pod is None and not plan.create:  # ended with this spec: stays ended, no new pod
                status.update({k: v for k, v in (server.get("status") or {}).items()
                               if k in ("phase", "reason", "message", "podName", "podUid", "startedAt",
                                        "expiresAt", "finishedAt", "kvCacheTokens", "maxConcurrency")})
            self._write_status(server, status, logger)

    # ------------------------------------------------------------------ Pod handler
    def on_pod_event(self, event: dict[str, Any], namespace: str, logger: logging.Logger, **_: Any) -> None:
        """Any change of a kvpilot pod: recompute its server's status (and read the KV line once Ready)."""
        pod = event.get("object") or {}
        labels = (pod.get("metadata") or {}).get("labels") or {}
        name = labels.get(logic.SERVER_LABEL)
        if not name or event.get("type") is None:
            return
        with self._lock(namespace, name):
            server = self._read_server(namespace, name)
            if server is None:
                return
            status = server.get("status") or {}
            meta = server["metadata"]
            if status.get("phase") == "Invalid" and status.get("observedGeneration") == meta.get("generation"):
                return
            pod_name = pod["metadata"]["name"]
            digest = (pod["metadata"].get("annotations") or {}).get(logic.SPEC_HASH_ANNOTATION)
            current = status.get("podName") == pod_name or (not status.get("podName")
                                                           and digest == status.get("specHash"))
            if not current or not status.get("specHash"):
                return  # an old pod being replaced, or the server handler has not run yet
            now = now_rfc3339()
            if event["type"] == "DELETED":
                new = logic.server_status(server, None, now=now, service_name=status.get("serviceName") or name,
                                          spec_hash=status["specHash"], command=status.get("command"))
                if status.get("phase") not in logic.ENDED_PHASES:  # an ended server stays Expired/Failed
                    new.update(phase="Failed", reason="PodDeleted",
                               message=f"pod {pod_name} was deleted; change the spec or delete the VLLMServer")
                    new["conditions"] = logic.set_condition(new["conditions"], "Ready", "False", "PodDeleted",
                                                            new["message"], now=now,
                                                            generation=meta.get("generation"))
                self._write_status(server, new, logger)
                return
            report = logic.pod_report(pod)
            kv = None
            same_pod = status.get("podUid") == pod["metadata"].get("uid")
            if report.ready and not (same_pod and status.get("kvCacheTokens") is not None):
                kv = self._kv_from_log(pod, logger)
            new = logic.server_status(server, pod, now=now, service_name=status.get("serviceName") or name,
                                      spec_hash=status["specHash"], command=status.get("command"), kv=kv)
            self._write_status(server, new, logger)


def build_registry(configuration: kubernetes.client.Configuration) -> kopf.OperatorRegistry:
    """A kopf registry with the VLLMServer operator's handlers, talking to ``configuration``'s cluster.

    Args:
        configuration: where the cluster is (``kvpilot.controller.load_configuration()`` for a
            kubeconfig or the in-cluster service account; the sandbox's own for the demo/tests).
    """
    registry = kopf.OperatorRegistry()
    controller = Controller(configuration)

    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(configuration)

    kopf.on.login(registry=registry)(login)
    for decorator in (kopf.on.create, kopf.on.resume, kopf.on.update):
        decorator(GROUP, VERSION, PLURAL, registry=registry, id="reconcile")(controller.reconcile_server)
    kopf.on.event("v1", "pods", registry=registry, labels=MANAGED_BY_SELECTOR)(controller.on_pod_event)
    return registry
