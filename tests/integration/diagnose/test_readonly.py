"""A full diagnose run is read-only: GET-only Kubernetes requests (VLLMServer, pod, pods/log), only query
endpoints to Prometheus.

Kubernetes: a loopback API server recording every method and path serves the VLLMServer and its
pod. Prometheus: the real server (backfilled recording) behind a recording proxy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from tests.integration.diagnose.fakes import LoopbackServer, kubeconfig, proxy_to
from tests.support.prom import PrometheusServer, backfill

pytestmark = pytest.mark.prometheus

RECORDINGS = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
END = 1_764_600_000.0
SERVER = {
    "apiVersion": "kvpilot.dev/v1alpha1",
    "kind": "VLLMServer",
    "metadata": {"name": "qwen", "namespace": "llm", "uid": "u1"},
    "spec": {
        "model": "Qwen/Qwen2.5-1.5B-Instruct",
        "engine": {"maxNumSeqs": 4, "maxNumBatchedTokens": 2048, "maxModelLen": 8192},
    },
    "status": {"phase": "Ready", "podName": "qwen-0"},
}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "qwen-0", "namespace": "llm", "labels": {"kvpilot.dev/server": "qwen"}},
    "spec": {
        "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.29.0", "args": ["m", "--max-num-seqs", "4"]}]
    },
}
#: what the pod printed at startup (vLLM's non-default args line)
POD_LOG = "INFO 12-01 11:00:00 [utils.py:278] non-default args: {'model_tag': 'm', 'max_num_seqs': 4}\n"
#: Prometheus HTTP API endpoints that only read (https://prometheus.io/docs/prometheus/latest/querying/api/)
READ_ENDPOINTS = {
    "/api/v1/query",
    "/api/v1/query_range",
    "/api/v1/series",
    "/api/v1/labels",
    "/api/v1/metadata",
    "/api/v1/targets",
    "/api/v1/status/buildinfo",
}


def kube_api(method, path, _query, _body):
    if method != "GET":
        return 405, {"kind": "Status", "status": "Failure", "code": 405}
    if path == "/apis/kvpilot.dev/v1alpha1/namespaces/llm/vllmservers/qwen":
        return 200, SERVER
    if path == "/api/v1/namespaces/llm/pods/qwen-0":
        return 200, POD
    if path == "/api/v1/namespaces/llm/pods/qwen-0/log":
        return 200, POD_LOG
    return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}


def labelled_recording(tmp_path: Path) -> Path:
    """The max-num-seqs-cap recording as Prometheus would hold it for pod llm/qwen-0."""
    lines = []
    for ln in (RECORDINGS / "scenario_max-num-seqs-cap.om").read_text().splitlines():
        lines.append(ln if ln.startswith("#") else ln.replace("{", '{namespace="llm",pod="qwen-0",', 1))
    path = tmp_path / "labelled.om"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("selector", [["--server", "qwen"], ["--pod", "qwen-0"]])
def test_full_run_sends_only_reads(tmp_path, selector):
    backfill(labelled_recording(tmp_path), tmp_path / "data")
    with (
        PrometheusServer(tmp_path, data_dir=tmp_path / "data") as prom,
        LoopbackServer(proxy_to(prom.url)) as proxy,
        LoopbackServer(kube_api) as kube,
    ):
        config = kubeconfig(tmp_path / "kubeconfig", kube.url)
        result = CliRunner().invoke(
            cli,
            [
                "diagnose",
                "--no-what-if",
                "--prometheus",
                proxy.url,
                "-n",
                "llm",
                *selector,
                "--kubeconfig",
                config,
                "--end",
                str(END),
                "--window",
                "300s",
                "-o",
                "json",
            ],
        )
    doc = json.loads(result.output)
    target = doc["targets"][0]
    # the run did its job: limits from the spec, the right verdict for pod llm/qwen-0
    assert target["verdict"] == "max_num_seqs_cap"
    assert target["target"]["pod"] == "qwen-0"
    assert "max_num_seqs 4 (spec)" in " ".join(target["evidence"])
    # Kubernetes: GETs only, and it was asked
    assert kube.requests
    assert {m for m, _ in kube.requests} == {"GET"}
    assert ("GET", "/apis/kvpilot.dev/v1alpha1/namespaces/llm/vllmservers/qwen") in kube.requests
    # the pod and its log were read for limits too (the pod named by the series' pod/namespace labels)
    assert ("GET", "/api/v1/namespaces/llm/pods/qwen-0") in kube.requests
    assert any(m == "GET" and p.startswith("/api/v1/namespaces/llm/pods/qwen-0/log") for m, p in kube.requests)
    assert any("Limits read from pod llm/qwen-0" in n for n in doc["notes"])
    # Prometheus: only read endpoints, GET/POST
    assert proxy.requests
    assert {m for m, _ in proxy.requests} <= {"GET", "POST"}
    assert {p for _, p in proxy.requests} <= READ_ENDPOINTS


def test_unreachable_cluster_falls_back_and_says_so(tmp_path):
    from tests.support.prom import free_port

    config = kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{free_port()}")
    result = CliRunner().invoke(
        cli,
        [
            "diagnose",
            "--no-what-if",
            "--recording",
            str(RECORDINGS / "scenario_idle.om"),
            "-n",
            "llm",
            "--server",
            "qwen",
            "--kubeconfig",
            config,
            "--timeout",
            "2s",
            "-o",
            "json",
        ],
    )
    doc = json.loads(result.output)
    assert any("VLLMServer llm/qwen not read" in n for n in doc["notes"])
