"""Read-only Kubernetes lookups for the limits: the VLLMServer spec and the pod it runs as.

Only GET requests (``get_namespaced_custom_object``, ``read_namespaced_pod``): diagnose never
changes a cluster (background.md §10; a test records every request method). Without a
reachable cluster the caller falls back to the command line and ``vllm:cache_config_info``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvpilot.api.constants import GROUP, LABEL_SERVER, PLURAL, VERSION


@dataclass
class ServerInfo:
    """What the cluster says about one VLLMServer.

    Attributes:
        name / namespace: the VLLMServer.
        engine: ``spec.engine`` (camelCase keys) or {}.
        pod: ``status.podName`` or "".
        notes: sentences for the report (what could not be read).
    """

    name: str = ""
    namespace: str = ""
    engine: dict = field(default_factory=dict)
    pod: str = ""
    notes: list[str] = field(default_factory=list)


def _api_client(kubeconfig: str | None, context: str | None):
    import yaml
    from kubernetes import client, config

    try:
        if kubeconfig or context:
            return config.new_client_from_config(config_file=kubeconfig, context=context)
        try:
            config.load_incluster_config()
            return client.ApiClient()
        except config.ConfigException:
            return config.new_client_from_config()
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
        a :class:`ServerInfo`; on any failure its ``notes`` say why and ``engine`` is {} (the
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
                server = (body.metadata.labels or {}).get(LABEL_SERVER, "")
                info.name, info.pod = server, pod
                if not server:
                    info.notes.append(f"pod {namespace}/{pod} has no {LABEL_SERVER} label: not a kvpilot server")
                    return info
            obj = client.CustomObjectsApi(api).get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, server, _request_timeout=timeout
            )
    except ApiException as exc:
        info.notes.append(f"VLLMServer {namespace}/{server or pod} not read: HTTP {exc.status} {exc.reason}")
        return info
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:  # connection errors, timeouts, a bad body
        info.notes.append(f"VLLMServer {namespace}/{server or pod} not read: {type(exc).__name__}")
        return info
    spec = (obj or {}).get("spec") or {}
    info.engine = dict(spec.get("engine") or {})
    info.pod = info.pod or str(((obj or {}).get("status") or {}).get("podName") or "")
    return info
