"""The image as CI builds it: what it contains, the operator against the sandbox API, the vLLM stand-in.

The operator container runs like the Deployment in manifests/operator/40-deployment.yaml runs it:
uid 65532, read-only root filesystem with a /tmp tmpfs, all capabilities dropped, no new privileges.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import kubernetes.client
import pytest
import yaml

from kvpilot.api.crd import crd_manifest
from kvpilot.metrics.exposition import parse_exposition
from kvpilot.sandbox import SandboxCluster
from kvpilot.vllm.startup_log import parse_kv_cache_report
from tests.conftest import REPO
from tests.integration.image.conftest import VERSION
from tests.support.prom import PrometheusServer, free_port
from tests.support.waiting import wait_for

pytestmark = pytest.mark.image

RESTRICTED = ["--user", "65532:65532", "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL"]
RESTRICTED += ["--security-opt", "no-new-privileges"]


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return 0, b""


def test_help_runs_as_the_entrypoint(containers, image):
    result = containers("run", "--rm", "--network", "host", image, "--help")
    assert result.stdout.startswith("Usage: kvpilot [OPTIONS] COMMAND [ARGS]...")
    for command in ("operator", "alert-hook", "diagnose", "simulate", "kv"):
        assert f"\n  {command} " in result.stdout


def test_image_metadata_user_labels_and_environment(containers, image):
    (info,) = json.loads(containers("image", "inspect", image).stdout)
    config = info["Config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["kvpilot"]
    assert "PYTHONDONTWRITEBYTECODE=1" in config["Env"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.source"].startswith("https://")


def test_runtime_has_the_shim_as_vllm_and_no_build_or_test_tools(containers, image):
    probe = (
        "import importlib.util as u, os, shutil; print(os.path.realpath(shutil.which('vllm')), "
        "[m for m in ('pip', 'kmock', 'pytest', 'build') if u.find_spec(m)])"
    )
    result = containers("run", "--rm", "--network", "host", "--entrypoint", "python3", image, "-c", probe)
    assert result.stdout.split() == ["/opt/venv/bin/kvpilot-vllm-shim", "[]"]
    # the host's CA bundle was a build secret: not in any layer of the image
    result = containers("run", "--rm", "--network", "host", "--entrypoint", "ls", image, "/run/secrets", check=False)
    assert result.returncode != 0 or result.stdout.strip() == ""


def test_the_image_runs_the_compiled_engine(containers, image):
    # the build stage has a C compiler (scripts/build-image.sh's build base): the engine's hot modules are compiled
    probe = "import kvpilot.engine as e, kvpilot.engine.core as c; print(e.COMPILED, c.__file__.rsplit('.', 1)[-1])"
    result = containers("run", "--rm", "--network", "host", "--entrypoint", "python3", image, "-c", probe)
    assert result.stdout.split() == ["True", "so"]


@pytest.fixture
def sandbox():
    with SandboxCluster(strict=True) as cluster:
        kubernetes.client.ApiextensionsV1Api(cluster.api_client()).create_custom_resource_definition(crd_manifest())
        yield cluster


def test_operator_container_creates_the_pod_and_service_of_a_vllmserver(containers, image, sandbox, tmp_path):
    kubeconfig = sandbox.write_kubeconfig(tmp_path / "kubeconfig")
    kubeconfig.chmod(0o644)  # read by uid 65532 inside the container
    health, metrics = free_port(), free_port()
    name = containers.run_detached(
        *RESTRICTED,
        "-v", f"{kubeconfig}:/kube/config:ro", "-e", "KUBECONFIG=/kube/config",
        image, "operator", "--all-namespaces", "--standalone", f"--liveness=http://127.0.0.1:{health}/healthz",
        "--metrics-host=127.0.0.1", f"--metrics-port={metrics}",
    )  # fmt: skip
    api = sandbox.api_client()
    core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
    core.create_namespace({"metadata": {"name": "llm"}})
    server = yaml.safe_load((REPO / "manifests" / "examples" / "experiment.yaml").read_text())
    try:
        # kopf's liveness endpoint answers once the operator runs (the Deployment's livenessProbe)
        wait_for(lambda: get(f"http://127.0.0.1:{health}/healthz")[0] == 200, timeout=60, what="kopf's /healthz")
        created = custom.create_namespaced_custom_object("kvpilot.dev", "v1alpha1", "llm", "vllmservers", server)
        uid = created["metadata"]["uid"]
        pods = wait_for(
            lambda: core.list_namespaced_pod("llm", label_selector="kvpilot.dev/server=qwen-experiment").items,
            timeout=60,
            interval=0.2,
            what="the vLLM pod",
        )
        service = wait_for(lambda: sandbox.get("v1/services", "llm", "qwen-experiment"), 30, 0.2, "the Service")
        # the operator's own /metrics (the chart's metrics Service and ServiceMonitor point at it)
        status, body = get(f"http://127.0.0.1:{metrics}/metrics")
    except BaseException:
        print(containers.logs(name))
        raise
    (pod,) = pods
    assert pod.metadata.owner_references[0].uid == uid
    assert service["metadata"]["ownerReferences"][0]["uid"] == uid
    assert pod.spec.containers[0].command[:3] == ["vllm", "serve", "Qwen/Qwen2.5-1.5B-Instruct"]
    assert pod.spec.active_deadline_seconds == 3600  # spec.ttlSeconds of the example
    assert status == 200
    assert b"# TYPE kvpilot_" in body


@pytest.mark.prometheus
def test_vllm_stand_in_serves_health_models_and_metrics_to_prometheus(containers, image, tmp_path):
    port = free_port()
    # the command kvpilot renders for manifests/examples/experiment.yaml, on a free loopback port
    argv = ["serve", "Qwen/Qwen2.5-1.5B-Instruct", "--gpu-memory-utilization", "0.6", "--max-model-len", "8192"]
    argv += ["--max-num-seqs", "4", "--enable-prefix-caching", "--host", "127.0.0.1", "--port", str(port)]
    name = containers.run_detached(*RESTRICTED, "--entrypoint", "vllm", image, *argv)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: get(url + "/health")[0] == 200, timeout=60, interval=0.2, what="/health")
    except BaseException:
        print(containers.logs(name))
        raise
    # vLLM's startup KV-capacity line, which the operator reads into status.kvCacheTokens
    report = parse_kv_cache_report(containers.logs(name))
    assert report is not None
    assert report.max_model_len == 8192
    # vLLM's relation: tokens = blocks x 16; concurrency = blocks / (8192 / 16 blocks per request)
    assert report.kv_cache_tokens % 16 == 0
    assert report.max_concurrency == round(report.kv_cache_tokens / 16 / 512, 2)
    status, body = get(url + "/v1/models")
    assert status == 200
    (model,) = json.loads(body)["data"]
    assert model["id"] == "Qwen/Qwen2.5-1.5B-Instruct"
    assert model["max_model_len"] == 8192
    samples = parse_exposition(get(url + "/metrics")[1].decode())
    info = [s for s in samples if s.name == "vllm:cache_config_info"]
    assert info
    assert info[0].labels["gpu_memory_utilization"] == "0.6"
    with PrometheusServer(tmp_path / "prom", scrape_targets=[f"127.0.0.1:{port}"]) as prom:
        series = prom.wait_for_series('{__name__=~"vllm[:_]num_requests_running"}', timeout=60)
    assert series[0]["metric"]["model_name"] == "Qwen/Qwen2.5-1.5B-Instruct"
