"""The floor for ``operator_burst.py``: a bare kopf operator that creates one Pod per VLLMServer.

Same kopf, same ``kubernetes`` client, same synchronous handler style, same kopf persistence
settings (progress and a digest diff-base in ``status.kopf``: the same storage classes, imported;
Events only for warnings) as kvpilot's operator; it does nothing else: no validation, no Service, no
status of its own, no pod watch.

Run: python benchmarks/bare_kopf_operator.py --kubeconfig FILE --namespace NS
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

import kopf
import kubernetes.client
import kubernetes.config

from kvpilot.api.constants import STATUS_KOPF
from kvpilot.controller.settings import DIFFBASE_FIELD, DigestDiffBaseStorage

GROUP, VERSION, PLURAL = "kvpilot.dev", "v1alpha1", "vllmservers"


def main() -> None:
    """Parse the arguments and run kopf until SIGTERM."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--namespace", required=True)
    args = ap.parse_args()
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=args.kubeconfig, client_configuration=configuration)
    core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))
    registry = kopf.OperatorRegistry()

    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=configuration.host, token="sandbox", scheme="Bearer")

    def create_pod(body: Any, name: str, namespace: str, **_: Any) -> None:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{name}-pod", "labels": {"kvpilot.dev/server": name}},
            "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.29.0"}]},
        }
        kopf.adopt(pod, owner=body)
        core.create_namespaced_pod(namespace, pod)

    kopf.on.login(registry=registry)(login)
    kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)(create_pod)
    settings = kopf.OperatorSettings()
    settings.persistence.progress_storage = kopf.StatusProgressStorage(name=STATUS_KOPF)
    settings.persistence.diffbase_storage = DigestDiffBaseStorage(field=DIFFBASE_FIELD)
    settings.posting.level = logging.WARNING
    kopf.configure(quiet=True)
    kopf.run(registry=registry, settings=settings, namespaces=[args.namespace], standalone=True)


if __name__ == "__main__":
    main()
