"""`kvpilot demo` and `kvpilot operator` as a user runs them: separate processes, real output."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
from pathlib import Path

import kubernetes.client

from kvpilot.api.crd import crd_manifest
from kvpilot.sandbox import SandboxCluster
from tests.conftest import REPO
from tests.integration.operator.conftest import SERVERS, wait_for
from tests.integration.operator.test_operator import EXPERIMENT

KVPILOT = str(Path(sys.executable).with_name("kvpilot"))


def test_demo_prints_command_line_phase_and_kv_tokens():
    # The subprocess timeout bounds the run (generous: a loaded machine); speed is for benchmarks/, not tests.
    # Piped, rich takes the width from $COLUMNS: 200 shows kubectl's table as one row.
    env = {**os.environ, "COLUMNS": "200"}
    result = subprocess.run([KVPILOT, "demo"], capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    # docs/background.md §7: the experiment's flags, exactly as the operator renders them
    assert (
        "vllm serve Qwen/Qwen2.5-1.5B-Instruct --gpu-memory-utilization 0.6 --max-model-len 8192 "
        "--max-num-seqs 4 --enable-prefix-caching --port 8000"
    ) in out
    assert "21520" in out  # kvCacheTokens, read back from the played startup log (21,520 tokens)
    assert "2.63" in out  # 21,520 / 8,192 = 2.627 -> vLLM prints 2.63x
    row = next(line for line in out.splitlines() if line.strip().startswith("qwen-experiment "))
    assert row.split()[:4] == ["qwen-experiment", "Qwen/Qwen2.5-1.5B-Instruct", "Ready", "21520"]
    assert "playing the node" in out.lower() or "played" in out  # says openly that it plays the kubelet
    # The KV pre-flight with the node's 8,192 MiB label: vLLM claims ceil(8,589,934,592 x 0.6) = 5,153,960,756 B;
    # minus 3,087,428,608 B of weights and the 1,449,510,708 B overhead estimate (what this deployment leaves,
    # docs/kv.md) = 617,021,440 B of KV // (16 x 28,672 B per block) = 1,345 blocks = 21,520 tokens, vLLM's figure.
    assert "condition KVCapacity True (Fits)" in out
    assert "21,520 tokens" in out
    assert "predicted 21,520 KV tokens" in out
    assert "reported 21,520 (0.00 %)" in out
    assert "Traceback" not in out + result.stderr
    assert "Handler 'reconcile'" not in out + result.stderr  # kopf's own log stays off the output


def test_packaged_example_equals_the_manifest():
    packaged = REPO / "operator" / "kvpilot" / "data" / "experiment.yaml"
    assert packaged.read_text() == (REPO / "manifests" / "examples" / "experiment.yaml").read_text()


def test_operator_command_reads_kubeconfig_and_runs(cluster, namespace, tmp_path):
    kubeconfig = cluster.write_kubeconfig(tmp_path / "config")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HF_HUB_OFFLINE": "1"}  # no network in tests
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = subprocess.Popen(
        [KVPILOT, "operator", "--namespace", namespace, "--standalone", "--quiet"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        kubernetes.client.CustomObjectsApi(cluster.api_client()).create_namespaced_custom_object(
            *SERVERS, namespace, "vllmservers", copy.deepcopy(EXPERIMENT)
        )
        pod = wait_for(lambda: (cluster.list("v1/pods", namespace) or [None])[0], timeout=30, what="the pod")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert pod["metadata"]["labels"]["kvpilot.dev/server"] == "qwen"
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_operator_command_refuses_bad_options_in_one_line():
    result = subprocess.run(
        [KVPILOT, "operator", "--all-namespaces", "--namespace", "x"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "kvpilot: error: --all-namespaces: cannot be combined with --namespace"


def test_demo_sections_can_be_extended_in_process():
    """Later issues append sections before the clean-up; they see the Ready server and the sandbox."""
    import io

    from rich.console import Console

    from kvpilot.commands import demo

    seen = {}

    def probe(ctx):
        seen["phase"] = ctx.server_object()["status"]["phase"]
        seen["tokens"] = ctx.server_object()["status"]["kvCacheTokens"]

    sections = [*demo.SECTIONS[:-1], ("probe", probe), demo.SECTIONS[-1]]
    output = io.StringIO()
    ctx = demo.run(Console(file=output, width=160), sections)
    assert seen == {"phase": "Ready", "tokens": 21520}
    assert ctx.cluster.emulator is not None
    assert "Clean up" in output.getvalue()


def test_operator_command_takes_the_allow_list_from_its_environment(cluster, namespace, tmp_path):
    kubeconfig = cluster.write_kubeconfig(tmp_path / "config")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HF_HUB_OFFLINE": "1"}
    env["KVPILOT_ALLOWED_IMAGES"] = "registry.example.com/* ghcr.io/vllm/*"  # whitespace-separated, as click splits
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = subprocess.Popen(
        [KVPILOT, "operator", "--namespace", namespace, "--standalone", "--quiet", "--metrics-port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        kubernetes.client.CustomObjectsApi(cluster.api_client()).create_namespaced_custom_object(
            *SERVERS,
            namespace,
            "vllmservers",
            copy.deepcopy(EXPERIMENT),  # the default image vllm/vllm-openai:…
        )
        status = wait_for(
            lambda: (cluster.get("kvpilot.dev/v1alpha1/vllmservers", namespace, "qwen") or {}).get("status"),
            timeout=30,
            what="the status",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert (status["phase"], status["reason"]) == ("Invalid", "NotAllowed")
    assert "(registry.example.com/*, ghcr.io/vllm/*)" in status["message"]
    assert cluster.list("v1/pods", namespace) == []
    assert proc.returncode == 0, err


def test_operator_refuses_a_crd_without_status_kopf_in_one_line(tmp_path):
    # After `helm upgrade` from the release that kept kopf's record in annotations, the cluster's CRD
    # lacks status.kopf (Helm never upgrades crds/): the API server would prune kopf's record at
    # every write, so the operator refuses to start and says what to apply.
    older = crd_manifest()
    del older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["kopf"]
    with SandboxCluster(strict=True) as sandbox:
        kubernetes.client.ApiextensionsV1Api(sandbox.api_client()).create_custom_resource_definition(older)
        kubeconfig = sandbox.write_kubeconfig(tmp_path / "config")
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HF_HUB_OFFLINE": "1"}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        result = subprocess.run(
            [KVPILOT, "operator", "--namespace", "default", "--standalone", "--metrics-port", "0"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("kvpilot: error: the cluster's CRD vllmservers.kvpilot.dev")
    assert "status.kopf" in lines[0]
    assert "kubectl apply -f manifests/crd/vllmservers.yaml" in lines[0]
