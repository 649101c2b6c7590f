"""Opt-in end-to-end run of the Helm chart on a real cluster (kind or k3d; docs/e2e.md).

Runs only with ``KVPILOT_E2E=1`` and a reachable kubeconfig; otherwise skipped (also under CI, where
no cluster exists). Prerequisite: the image is in the cluster (``kind load`` / ``k3d image import``)
as ``$KVPILOT_E2E_IMAGE`` (default ``localhost/kvpilot:<version>``). The test

1. advertises fake ``nvidia.com/gpu`` capacity on nodes that have none (Kubernetes docs, "Advertise
   Extended Resources for a Node"; removed at the end), so the GPU pod can be scheduled;
2. installs charts/kvpilot (``helm install --wait``) into ``kvpilot-e2e-system``;
3. applies a VLLMServer whose image is kvpilot's own (``vllm serve`` is the engine-model stand-in) with
   ``ttlSeconds: 60`` and checks phase Ready, the endpoint, ``kvCacheTokens``/``maxConcurrency`` from the
   startup log, ``/v1/models`` through the Service, ``kvpilot diagnose`` with the cluster's spec, expiry;
4. uninstalls the chart (the CRD and the VLLMServer stay) and deletes what it created.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

pytestmark = pytest.mark.e2e

if os.environ.get("KVPILOT_E2E") != "1":
    pytest.skip("opt-in: set KVPILOT_E2E=1 and point KUBECONFIG at a test cluster", allow_module_level=True)

import jsonschema  # noqa: E402
import kubernetes.client  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from kvpilot.controller.runner import ClusterConfigError, load_configuration  # noqa: E402
from tests.conftest import REPO, require_tool  # noqa: E402
from tests.support.prom import free_port  # noqa: E402
from tests.support.waiting import stop_process, wait_for  # noqa: E402

VERSION = next(
    line.split('"')[1] for line in (REPO / "pyproject.toml").read_text().splitlines() if line.startswith("version =")
)
IMAGE = os.environ.get("KVPILOT_E2E_IMAGE", f"localhost/kvpilot:{VERSION}")
RELEASE, SYSTEM = "kvpilot-e2e", "kvpilot-e2e-system"
GPU = "nvidia.com/gpu"
TTL = 60  # the CRD's minimum
SERVERS = ("kvpilot.dev", "v1alpha1")


def server(name: str) -> dict:
    return {
        "apiVersion": "kvpilot.dev/v1alpha1",
        "kind": "VLLMServer",
        "metadata": {"name": name},
        "spec": {
            "model": "Qwen/Qwen2.5-1.5B-Instruct",
            "image": IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "engine": {"gpuMemoryUtilization": 0.6, "maxModelLen": 8192, "maxNumSeqs": 4},
            "resources": {"gpus": 1, "memory": "512Mi"},
            "ttlSeconds": TTL,
        },
    }


def _wait(probe, timeout: float, what: str):
    return wait_for(probe, timeout=timeout, interval=1.0, what=what)  # polling a real cluster


@pytest.fixture(scope="module")
def api():
    try:
        return kubernetes.client.ApiClient(load_configuration())
    except ClusterConfigError as exc:
        pytest.skip(f"KVPILOT_E2E=1 but no cluster: {exc}")


@pytest.fixture(scope="module")
def fake_gpus(api):
    core = kubernetes.client.CoreV1Api(api)
    patched = []
    for node in core.list_node().items:
        if GPU not in (node.status.capacity or {}):
            path = "/status/capacity/" + GPU.replace("/", "~1")
            core.patch_node_status(node.metadata.name, [{"op": "add", "path": path, "value": "4"}])
            patched.append((node.metadata.name, path))
    yield
    for name, path in patched:
        core.patch_node_status(name, [{"op": "remove", "path": path}])


@pytest.fixture(scope="module")
def chart(api, fake_gpus):  # noqa: ARG001 - the nodes advertise GPUs before the chart installs
    helm = require_tool("helm")
    repository, _, tag = IMAGE.rpartition(":")
    install = [helm, "install", RELEASE, str(REPO / "charts" / "kvpilot"), "-n", SYSTEM, "--create-namespace"]
    install += ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}", "--wait", "--timeout", "5m"]
    result = subprocess.run(install, capture_output=True, text=True, timeout=400, check=False)
    assert result.returncode == 0, result.stderr
    yield helm
    subprocess.run([helm, "uninstall", RELEASE, "-n", SYSTEM, "--wait"], capture_output=True, timeout=300, check=False)
    kubernetes.client.CoreV1Api(api).delete_namespace(SYSTEM)


@pytest.fixture(scope="module")
def namespace(api, chart):  # noqa: ARG001 - the chart (the CRD, the operator) is installed first
    name = f"kvpilot-e2e-{uuid.uuid4().hex[:6]}"
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def status_of(api, namespace: str, name: str) -> dict:
    obj = kubernetes.client.CustomObjectsApi(api).get_namespaced_custom_object(*SERVERS, namespace, "vllmservers", name)
    return obj.get("status") or {}


@pytest.mark.usefixtures("chart")
def test_chart_runs_a_stand_in_server_to_ready_then_expiry(api, namespace):
    custom, core = kubernetes.client.CustomObjectsApi(api), kubernetes.client.CoreV1Api(api)
    apps = kubernetes.client.AppsV1Api(api)
    assert apps.read_namespaced_deployment("kvpilot-e2e-operator", SYSTEM).status.ready_replicas == 1
    custom.create_namespaced_custom_object(*SERVERS, namespace, "vllmservers", server("e2e"))
    status = _wait(lambda: (s := status_of(api, namespace, "e2e")).get("phase") == "Ready" and s, 300, "phase Ready")
    assert status["endpoint"] == f"http://e2e.{namespace}.svc:8000"
    # the stand-in logs vLLM's KV-capacity line; the operator copies it into status
    assert status["kvCacheTokens"] > 0
    assert status["kvCacheTokens"] % 16 == 0
    assert status["maxConcurrency"] == round(status["kvCacheTokens"] / 16 / (8192 // 16), 2)
    models = core.connect_get_namespaced_service_proxy_with_path("e2e:8000", namespace, "v1/models")
    assert "Qwen/Qwen2.5-1.5B-Instruct" in str(models)

    # diagnosis through the cluster path: the limits come from the VLLMServer spec, the metrics from the pod
    kubectl, port = require_tool("kubectl"), free_port()
    forward = subprocess.Popen(
        [kubectl, "-n", namespace, "port-forward", "svc/e2e", f"{port}:8000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        diagnose = [
            sys.executable,
            "-m",
            "kvpilot.cli",
            "diagnose",
            "--metrics-url",
            f"http://127.0.0.1:{port}/metrics",
        ]
        diagnose += ["-n", namespace, "--server", "e2e", "--quick", "-o", "json"]
        result = _wait(
            lambda: (r := subprocess.run(diagnose, capture_output=True, text=True, timeout=120)).returncode != 3 and r,
            120,
            "a diagnosis (exit status other than 3, could not diagnose)",
        )
    finally:
        stop_process(forward)
    assert result.returncode in (0, 1, 2), result.stderr
    report = json.loads(result.stdout)
    schema = json.loads((REPO / "docs" / "diagnose-output.schema.json").read_text())
    jsonschema.validate(report, schema)
    assert report["targets"][0]["target"]["server"] == "e2e"

    # the kubelet ends the pod at activeDeadlineSeconds = ttlSeconds; the operator reports Expired
    expired = _wait(lambda: status_of(api, namespace, "e2e").get("phase") == "Expired", TTL + 180, "phase Expired")
    assert expired


def test_uninstall_keeps_the_crd_and_the_servers(api, chart, namespace):
    result = subprocess.run([chart, "uninstall", RELEASE, "-n", SYSTEM, "--wait"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    with pytest.raises(ApiException) as gone:
        kubernetes.client.AppsV1Api(api).read_namespaced_deployment("kvpilot-e2e-operator", SYSTEM)
    assert gone.value.status == 404
    # helm never deletes what crds/ installed: the CRD and every VLLMServer stay (docs/install.md, "Uninstall")
    kubernetes.client.ApiextensionsV1Api(api).read_custom_resource_definition("vllmservers.kvpilot.dev")
    assert status_of(api, namespace, "e2e") is not None
