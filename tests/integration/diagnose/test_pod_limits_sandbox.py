"""Limits from the pod on the kmock sandbox: no limit flags, the pod's command line or log names them.

Each scenario recording is labelled with the pod it came from (as Prometheus stores it); the pod in
the sandbox runs ``vllm serve`` with the scenario's flags, or prints them in its startup log. The
args and log lines have the shape of real vLLM output (tests/fixtures/vllm-startup/PROVENANCE.md:
a vllm/vllm-openai container's args, vLLM's ``non-default args`` line) with the scenario's values.
"""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes.client
import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.sandbox import Kubelet, SandboxCluster
from tests.integration.diagnose.scenario_flags import EXPECTED, scenario_cli_args

RECORDINGS = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
STARTUP = Path(__file__).resolve().parents[2] / "fixtures" / "vllm-startup"
NAMESPACE = "llm"


@pytest.fixture(scope="module")
def cluster():
    with SandboxCluster(strict=True) as sandbox:
        kubernetes.client.CoreV1Api(sandbox.api_client()).create_namespace({"metadata": {"name": NAMESPACE}})
        yield sandbox


def labelled(tmp_path: Path, scenario: str, pod: str) -> Path:
    lines = []
    for ln in (RECORDINGS / f"scenario_{scenario}.om").read_text().splitlines():
        lines.append(ln if ln.startswith("#") else ln.replace("{", f'{{namespace="{NAMESPACE}",pod="{pod}",', 1))
    path = tmp_path / f"{scenario}.om"
    path.write_text("\n".join(lines) + "\n")
    return path


def limit_flags(scenario: str) -> list[str]:
    """The scenario's --max-num-seqs / --max-num-batched-tokens / --max-model-len flags (what the pod runs)."""
    return scenario_cli_args(scenario)[:6]


def make_pod(cluster: SandboxCluster, name: str, container: dict, log: str) -> None:
    core = kubernetes.client.CoreV1Api(cluster.api_client())
    core.create_namespaced_pod(NAMESPACE, {"metadata": {"name": name}, "spec": {"containers": [container]}})
    Kubelet(cluster).start(NAMESPACE, name, log=log)


def diagnose(cluster: SandboxCluster, tmp_path: Path, scenario: str, pod: str) -> dict:
    config = cluster.write_kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE)
    args = [
        "diagnose",
        "--no-what-if",
        "--recording",
        str(labelled(tmp_path, scenario, pod)),
        "--kubeconfig",
        str(config),
        "-o",
        "json",
    ]
    result = CliRunner().invoke(cli, args)
    return json.loads(result.output)


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_limits_from_the_pod_command_line(cluster, tmp_path, scenario):
    pod = f"args-{scenario}"
    # a vllm/vllm-openai container: args only, the image's entrypoint is `vllm serve`
    container = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.29.0",
        "args": ["Qwen/Qwen2.5-7B-Instruct", *limit_flags(scenario)],
    }
    make_pod(cluster, pod, container, log="INFO vLLM API server version 0.29.0\n")
    doc = diagnose(cluster, tmp_path, scenario, pod)
    target = doc["targets"][0]
    assert target["verdict"] == EXPECTED[scenario], target["evidence"]
    text = " ".join(target["evidence"])
    n_seqs = limit_flags(scenario)[1]
    assert f"max_num_seqs {int(n_seqs):,} (pod args)" in text
    assert any(f"Limits read from pod {NAMESPACE}/{pod}: container vllm command line" in n for n in doc["notes"])
    assert "inferred" not in text


@pytest.mark.parametrize("scenario", ["max-num-seqs-cap", "token-budget-cap"])
def test_limits_from_the_pod_startup_log(cluster, tmp_path, scenario):
    pod = f"log-{scenario}"
    flags = dict(zip(limit_flags(scenario)[::2], limit_flags(scenario)[1::2], strict=True))
    # a hand-written `vllm serve MODEL` command without limit flags; the limits are in the log's
    # non-default args line (vLLM's format: logger.info("non-default args: %s", {...}))
    non_default = {
        "model_tag": "Qwen/Qwen2.5-7B-Instruct",
        "max_num_seqs": int(flags["--max-num-seqs"]),
        "max_num_batched_tokens": int(flags["--max-num-batched-tokens"]),
    }
    log = (
        "(APIServer pid=1) INFO 12-01 11:00:00 [api_server.py:1882] vLLM API server version 0.29.0\n"
        f"(APIServer pid=1) INFO 12-01 11:00:00 [utils.py:278] non-default args: {non_default!r}\n"
    )
    container = {"name": "engine", "image": "example/llm:1", "command": ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]}
    make_pod(cluster, pod, container, log)
    doc = diagnose(cluster, tmp_path, scenario, pod)
    target = doc["targets"][0]
    assert target["verdict"] == EXPECTED[scenario], target["evidence"]
    assert f"max_num_seqs {int(flags['--max-num-seqs']):,} (pod log)" in " ".join(target["evidence"])


def test_real_startup_log_limits_reach_the_report(cluster, tmp_path):
    # the club-3090 log (max_num_seqs 2, budget 8,192, KV 620,944 tokens) on the idle scenario's pod
    pod = "club-3090"
    container = {"name": "vllm", "image": "vllm/vllm-openai:v0.29.0", "args": ["~/.cache/huggingface/qwen3.6-27b"]}
    make_pod(cluster, pod, container, (STARTUP / "club-3090-issue-295.log").read_text())
    target = diagnose(cluster, tmp_path, "idle", pod)["targets"][0]
    text = " ".join(target["evidence"])
    assert "max_num_seqs 2 (pod log)" in text
    assert "max_num_batched_tokens 8,192 (pod log)" in text
    assert "kv_cache_tokens 620,944 (pod log)" in text


def test_cli_flags_override_the_pod(cluster, tmp_path):
    pod = "override"
    container = {"name": "vllm", "image": "vllm/vllm-openai:v0.29.0", "args": ["m", "--max-num-seqs", "64"]}
    make_pod(cluster, pod, container, log="")
    config = cluster.write_kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE)
    path = labelled(tmp_path, "max-num-seqs-cap", pod)
    args = [
        "diagnose",
        "--no-what-if",
        "--recording",
        str(path),
        "--kubeconfig",
        str(config),
        "--max-num-seqs",
        "4",
        "-o",
        "json",
    ]
    target = json.loads(CliRunner().invoke(cli, args).output)["targets"][0]
    assert target["verdict"] == "max_num_seqs_cap"
    assert "max_num_seqs 4 (cli)" in " ".join(target["evidence"])
