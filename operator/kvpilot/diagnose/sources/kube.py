"""Read-only Kubernetes lookups for the limits: the VLLMServer spec and the pod it runs as.

Only GET requests (``get_namespaced_custom_object``, ``read_namespaced_pod``,
``read_namespaced_pod_log``): diagnose never changes a cluster (a test records every request
method). Without a reachable cluster the caller falls back to the command line and
``vllm:cache_config_info``.

:func:`lookup_pod_limits` reads the limits of *any* vLLM pod, not only kvpilot's (production-stack,
KServe, a hand-written Deployment): the vLLM container's command line, parsed with the parser the
simulator's ``vllm`` shim uses (:func:`kvpilot.vllm.args.parse_vllm_args`), and its startup
log (:func:`kvpilot.vllm.startup_log.startup_limits`), read from the start and bounded by
``limitBytes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from kvpilot.api.constants import GROUP, LABEL_SERVER, PLURAL, VERSION
from kvpilot.vllm.args import VLLMFlags, parse_vllm_args
from kvpilot.vllm.startup_log import startup_limits

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from kvpilot.api.models import EngineSpec
    from kvpilot.api.objects import Container, Pod

#: bytes of a pod's log read from its start: vLLM prints its arguments and KV capacity in the first
#: hundred lines (a few KiB to tens of KiB with long config dumps); the rest is request logging
POD_LOG_BYTES = 1 << 20

#: the ``vllm/vllm-openai`` image's entrypoint (its Dockerfile: ``ENTRYPOINT ["vllm", "serve"]``),
#: prepended when a container gives only ``args``
VLLM_IMAGE_ENTRYPOINT = ("vllm", "serve")


@dataclass
class ServerInfo:
    """What the cluster says about one VLLMServer.

    Attributes:
        name / namespace: the VLLMServer.
        engine: ``spec.engine`` parsed (:func:`kvpilot.api.parse_spec`), None when the spec sets none or is
            refused (a note names the field).
        pod: ``status.podName`` or "".
        notes: sentences for the report (what could not be read).
    """

    name: str = ""
    namespace: str = ""
    engine: EngineSpec | None = None
    pod: str = ""
    notes: list[str] = field(default_factory=list)


def _api_client(kubeconfig: str | None, context: str | None) -> ApiClient:
    import yaml
    from kubernetes import client, config

    # kubernetes.config's loaders are unannotated; new_client_from_config returns an ApiClient
    try:
        if kubeconfig or context:
            return cast("ApiClient", config.new_client_from_config(config_file=kubeconfig, context=context))
        try:
            config.load_incluster_config()
            return client.ApiClient()
        except config.ConfigException:
            return cast("ApiClient", config.new_client_from_config())
    # kubernetes raises ConfigException, OSError, and YAML/type/key errors for malformed files
    except (config.ConfigException, OSError, yaml.YAMLError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise LookupError(
            f"no Kubernetes configuration ({type(exc).__name__}: {str(exc).splitlines()[0][:150]})"
        ) from None


def lookup_server(
    namespace: str,
    server: str = "",
    pod: str = "",
    kubeconfig: str | None = None,
    context: str | None = None,
    timeout: float = 5.0,
) -> ServerInfo:
    """Find the VLLMServer behind ``--server`` or ``--pod`` (GET only).

    Args:
        namespace: the namespace (required for any lookup).
        server: VLLMServer name (or give ``pod``).
        pod: a pod whose ``kvpilot.dev/server`` label names the VLLMServer.
        kubeconfig: optional kubeconfig file (default: in-cluster, then ``~/.kube/config``).
        context: optional kubeconfig context.
        timeout: seconds per request.

    Returns:
        a :class:`ServerInfo`; on any failure its ``notes`` say why and ``engine`` is None (the
        caller falls back to other limit sources). Never raises for cluster problems.
    """
    info = ServerInfo(name=server, namespace=namespace)
    if not namespace or not (server or pod):
        return info
    try:
        api = _api_client(kubeconfig, context)
    except LookupError as exc:
        info.notes.append(f"VLLMServer spec not read: {exc}")
        return info
    import urllib3
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        with api:
            if not server and pod:
                body = client.CoreV1Api(api).read_namespaced_pod(pod, namespace, _request_timeout=timeout)
                server = ((body.metadata and body.metadata.labels) or {}).get(LABEL_SERVER, "")
                info.name, info.pod = server, pod
                if not server:
                    info.notes.append(f"pod {namespace}/{pod} has no {LABEL_SERVER} label: not a kvpilot server")
                    return info
            # the decoded JSON object; the client annotates custom-object reads as ``object``
            obj = cast(
                "dict[str, Any] | None",
                client.CustomObjectsApi(api).get_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, server, _request_timeout=timeout
                ),
            )
    except ApiException as exc:
        info.notes.append(f"VLLMServer {namespace}/{server or pod} not read: HTTP {exc.status} {exc.reason}")
        return info
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:  # connection errors, timeouts, a bad body
        info.notes.append(f"VLLMServer {namespace}/{server or pod} not read: {type(exc).__name__}")
        return info
    spec = (obj or {}).get("spec") or {}
    if spec.get("engine"):
        from kvpilot.api import SpecError, parse_spec

        try:
            info.engine = parse_spec(spec).engine
        except SpecError as exc:
            info.notes.append(f"VLLMServer {namespace}/{server} spec not read: {exc}")
    info.pod = info.pod or str(((obj or {}).get("status") or {}).get("podName") or "")
    return info


@dataclass
class PodLimits:
    """The limits one vLLM pod states, by source.

    Attributes:
        args: ``{limit: value}`` from the container's command line (vLLM flag names, snake case).
        log: ``{limit: value}`` from its startup log (``non-default args``, budget and KV lines).
        container: the container they came from ("" when none looks like vLLM).
        notes: sentences for the report (what was read, or why not).
        unread: why the pod could not be read ("no Kubernetes configuration (...)", "HTTP 403 Forbidden", ...);
            "" when it was read (its spec fetched, whatever it stated).
    """

    args: VLLMFlags = field(default_factory=VLLMFlags)
    log: VLLMFlags = field(default_factory=VLLMFlags)
    container: str = ""
    notes: list[str] = field(default_factory=list)
    unread: str = ""

    @classmethod
    def not_read(cls, namespace: str, pod: str, why: str) -> PodLimits:
        """A pod that could not be read, with the note that says why."""
        return cls(notes=[f"pod {namespace}/{pod} not read: {why}"], unread=why)


def vllm_argv(container: Container) -> list[str] | None:
    """The ``vllm serve`` argv of a container spec (``command`` + ``args``), or None if it is not vLLM.

    Recognised: ``vllm serve ...`` anywhere in the argv (also behind ``/bin/sh -c "..."`` with the
    line split on spaces), ``python -m vllm.entrypoints.openai.api_server ...``, and a ``vllm``
    image with ``args`` only (its entrypoint ``vllm serve``).
    """
    import shlex

    command, args = list(container.get("command") or []), list(container.get("args") or [])
    argv = command + args
    if len(argv) >= 2 and argv[0] in ("sh", "/bin/sh", "bash", "/bin/bash") and "-c" in argv:
        script = argv[argv.index("-c") + 1] if argv.index("-c") + 1 < len(argv) else ""
        try:
            argv = shlex.split(script)
        except ValueError:
            return None
    for i, word in enumerate(argv):
        if word.rsplit("/", 1)[-1] == "vllm" and i + 1 < len(argv) and argv[i + 1] == "serve":
            return argv[i + 1 :]
        if word == "vllm.entrypoints.openai.api_server":
            return argv[i + 1 :]
    if not command and "vllm" in str(container.get("image") or ""):
        return list(VLLM_IMAGE_ENTRYPOINT[1:]) + args
    return None


def pod_limits_from(pod: Pod, log: str | None) -> PodLimits:
    """The limits a pod object (Kubernetes JSON) and its log state (pure; see :func:`lookup_pod_limits`)."""
    out = PodLimits()
    containers = ((pod.get("spec") or {}).get("containers")) or []
    name = (pod.get("metadata") or {}).get("name", "")
    for container in containers:
        argv = vllm_argv(container)
        if argv is None:
            continue
        out.container = str(container.get("name") or "")
        try:
            parsed = parse_vllm_args(argv)
        except ValueError as exc:
            out.notes.append(f"pod {name} container {out.container}: command line not read ({exc})")
            break
        # the flags that are limits: some of the keys of a VLLMFlags, so one too
        out.args = cast(VLLMFlags, {k: v for k, v in parsed.overrides.items() if k in _POD_LIMITS})
        break
    if not out.container:
        out.notes.append(f"pod {name}: no container runs vllm serve (command and args checked)")
    if log:
        out.log = startup_limits(log)
    return out


#: engine overrides of :func:`parse_vllm_args` that are diagnose limits
_POD_LIMITS = {
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "gpu_memory_utilization",
    "block_size",
    "num_gpu_blocks",
    "kv_cache_dtype",
    "tensor_parallel_size",
    "enable_prefix_caching",
}


def lookup_pod_limits(
    namespace: str,
    pod: str,
    kubeconfig: str | None = None,
    context: str | None = None,
    timeout: float = 5.0,
    log_bytes: int = POD_LOG_BYTES,
) -> PodLimits:
    """GET the pod and the first ``log_bytes`` of its vLLM container's log; the limits they state.

    Never raises for cluster problems: :attr:`PodLimits.notes` say what could not be read and the
    caller falls back to the other limit sources.
    """
    try:
        api = _api_client(kubeconfig, context)
    except LookupError as exc:
        return PodLimits.not_read(namespace, pod, str(exc))
    import urllib3
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        with api:
            core = client.CoreV1Api(api)
            body = api.sanitize_for_serialization(core.read_namespaced_pod(pod, namespace, _request_timeout=timeout))
            limits = pod_limits_from(body, None)
            if limits.container:
                try:
                    log = core.read_namespaced_pod_log(
                        pod, namespace, container=limits.container, limit_bytes=log_bytes, _request_timeout=timeout
                    )
                except ApiException as exc:
                    limits.notes.append(f"pod {namespace}/{pod} log not read: HTTP {exc.status} {exc.reason}")
                else:
                    limits.log = startup_limits(log if isinstance(log, str) else str(log))
    except ApiException as exc:
        return PodLimits.not_read(namespace, pod, f"HTTP {exc.status} {exc.reason}")
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
        return PodLimits.not_read(namespace, pod, type(exc).__name__)
    return limits
