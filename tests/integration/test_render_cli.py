"""`kvpilot render FILE`: the examples, both output formats, and bad input (exit 2, one line, no traceback).

Runs the real console entry point in a subprocess, as a user would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

#: Kubernetes 1.30 and the newest version kubernetes-validate knows (1.37 with kubernetes-validate 1.37.0).
KUBE_VERSIONS = ["1.30", kubernetes_validate.latest_version()]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "manifests" / "examples"


def kvpilot(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvpilot.cli", "render", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def pod_of(result: subprocess.CompletedProcess, fmt: str = "yaml") -> dict:
    doc = yaml.safe_load(result.stdout) if fmt == "yaml" else json.loads(result.stdout)
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "List")
    kinds = [item["kind"] for item in doc["items"]]
    assert kinds == ["Pod", "Service"]
    return doc["items"][0]


def test_experiment_shows_exactly_the_managed_flags_and_the_deadline():
    result = kvpilot(str(EXAMPLES / "experiment.yaml"))
    assert result.returncode == 0, result.stderr
    pod = pod_of(result)
    assert pod["spec"]["containers"][0]["command"] == [
        "vllm",
        "serve",
        "Qwen/Qwen2.5-1.5B-Instruct",
        "--gpu-memory-utilization",
        "0.6",
        "--max-model-len",
        "8192",
        "--max-num-seqs",
        "4",
        "--enable-prefix-caching",
        "--port",
        "8000",
    ]
    assert "activeDeadlineSeconds: 3600" in result.stdout
    assert pod["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "1", "memory": "6Gi"},
        "requests": {"memory": "6Gi"},
    }


def test_fp8_long_context_as_json():
    result = kvpilot(str(EXAMPLES / "fp8-long-context.yaml"), "-o", "json")
    assert result.returncode == 0, result.stderr
    command = pod_of(result, "json")["spec"]["containers"][0]["command"]
    assert command[3:] == [
        "--gpu-memory-utilization",
        "0.93",
        "--max-model-len",
        "16384",
        "--max-num-seqs",
        "4",
        "--max-num-batched-tokens",
        "2048",
        "--kv-cache-dtype",
        "fp8",
        "--port",
        "8000",
    ]


def test_tensor_parallel_asks_for_two_gpus():
    result = kvpilot(str(EXAMPLES / "tensor-parallel.yaml"))
    assert result.returncode == 0, result.stderr
    c = pod_of(result)["spec"]["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert c["command"][c["command"].index("--tensor-parallel-size") + 1] == "2"


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_renders_objects_that_validate(example):
    result = kvpilot(str(example))
    assert result.returncode == 0, result.stderr
    for item in yaml.safe_load(result.stdout)["items"]:
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(item, version, strict=True)


def test_namespace_from_option_metadata_or_default(tmp_path):
    text = (EXAMPLES / "experiment.yaml").read_text()
    assert pod_of(kvpilot(str(EXAMPLES / "experiment.yaml")))["metadata"]["namespace"] == "default"
    assert pod_of(kvpilot(str(EXAMPLES / "experiment.yaml"), "--namespace", "llm"))["metadata"]["namespace"] == "llm"
    f = tmp_path / "ns.yaml"
    f.write_text(text.replace("name: qwen-experiment", "name: qwen-experiment\n  namespace: gpu-lab"))
    assert pod_of(kvpilot(str(f)))["metadata"]["namespace"] == "gpu-lab"


def test_stdin_and_multi_document():
    text = (EXAMPLES / "experiment.yaml").read_text()
    second = text.replace("name: qwen-experiment", "name: second")
    result = kvpilot("-", stdin=text + "\n---\n" + second)
    assert result.returncode == 0, result.stderr
    items = yaml.safe_load(result.stdout)["items"]
    # Same spec, same hash (2c965c62...: sha256 of the example's set fields as sorted compact JSON,
    # worked out with sha256sum), so both pods end in -2c965 as the operator names them.
    assert [(i["kind"], i["metadata"]["name"]) for i in items] == [
        ("Pod", "qwen-experiment-2c965"),
        ("Service", "qwen-experiment"),
        ("Pod", "second-2c965"),
        ("Service", "second"),
    ]


def test_help_has_examples():
    result = kvpilot("--help")
    assert result.returncode == 0
    assert "kvpilot render manifests/examples/experiment.yaml" in result.stdout
    assert "-o, --output [yaml|json]" in result.stdout
    text = " ".join(result.stdout.split())
    assert "preview" in text
    assert "bypasses the operator" in text


BAD = {
    "missing.yaml": (None, "cannot read"),
    "not-yaml.yaml": ("kind: VLLMServer\n  spec: [unclosed\n", "not valid YAML"),
    "empty.yaml": ("", "empty"),
    "wrong-kind.yaml": ("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {}\n", "kind"),
    "wrong-version.yaml": (
        "apiVersion: kvpilot.dev/v1\nkind: VLLMServer\nmetadata: {name: x}\nspec: {model: m}\n",
        "apiVersion",
    ),
    "scalar.yaml": ("just a string\n", "mapping"),
    "bad-name.yaml": (
        "apiVersion: kvpilot.dev/v1alpha1\nkind: VLLMServer\nmetadata: {name: Qwen}\nspec: {model: m}\n",
        "metadata.name",
    ),
    "no-model.yaml": (
        "apiVersion: kvpilot.dev/v1alpha1\nkind: VLLMServer\nmetadata: {name: x}\nspec: {}\n",
        "spec.model",
    ),
    "bad-seqs.yaml": (
        "apiVersion: kvpilot.dev/v1alpha1\nkind: VLLMServer\nmetadata: {name: x}\n"
        "spec: {model: m, engine: {maxNumSeqs: -4}}\n",
        "spec.engine.maxNumSeqs",
    ),
    "bad-gmu.yaml": (
        "apiVersion: kvpilot.dev/v1alpha1\nkind: VLLMServer\nmetadata: {name: x}\n"
        "spec: {model: m, engine: {gpuMemoryUtilization: 1.5}}\n",
        "spec.engine.gpuMemoryUtilization",
    ),
    "managed-flag.yaml": (
        "apiVersion: kvpilot.dev/v1alpha1\nkind: VLLMServer\nmetadata: {name: x}\n"
        "spec: {model: m, engine: {extraArgs: ['--max_num_seqs=8']}}\n",
        "spec.engine.extraArgs[0]",
    ),
    "cross-field.yaml": (
        "apiVersion: kvpilot.dev/v1alpha1\nkind: VLLMServer\nmetadata: {name: x}\n"
        "spec: {model: m, engine: {maxNumSeqs: 8, maxNumBatchedTokens: 4}}\n",
        "spec.engine.maxNumBatchedTokens",
    ),
    "binary.yaml": (b"\xff\xfe\x00bad", "cannot read"),
    "date-model.yaml": (
        "apiVersion: kvpilot.dev/v1alpha1\nkind: VLLMServer\nmetadata: {name: x}\nspec: {model: 2024-01-01}\n",
        "spec.model",
    ),
    "bad-affinity.yaml": (
        "apiVersion: kvpilot.dev/v1alpha1\nkind: VLLMServer\nmetadata: {name: x}\n"
        "spec: {model: m, affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
        "[{topologyKey: '', labelSelector: {}}]}}}\n",
        "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: can not be empty",
    ),
    "unknown-affinity-field.yaml": (
        "apiVersion: kvpilot.dev/v1alpha1\nkind: VLLMServer\nmetadata: {name: x}\n"
        "spec: {model: m, affinity: {nodeAffinity: {requiredDuringSchedulingRequiredDuringExecution: {}}}}\n",
        "spec.affinity.nodeAffinity.requiredDuringSchedulingRequiredDuringExecution: unknown field",
    ),
    "list-engine.yaml": (
        "apiVersion: kvpilot.dev/v1alpha1\nkind: VLLMServer\nmetadata: {name: x}\nspec: {model: m, engine: [1]}\n",
        "spec.engine",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_exits_2_with_one_line_naming_the_problem(tmp_path, name):
    content, expected = BAD[name]
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    result = kvpilot(str(path))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kvpilot: error: ")
    assert expected in lines[0]
    assert name in lines[0]


def test_the_failing_document_of_several_is_named(tmp_path):
    good = (EXAMPLES / "experiment.yaml").read_text()
    bad = good.replace("maxNumSeqs: 4", "maxNumSeqs: 0")
    path = tmp_path / "two.yaml"
    path.write_text(good + "\n---\n" + bad)
    result = kvpilot(str(path))
    assert result.returncode == 2
    assert "(document 2): spec.engine.maxNumSeqs" in result.stderr


def test_unknown_output_format_is_a_usage_error():
    result = kvpilot(str(EXAMPLES / "experiment.yaml"), "-o", "toml")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
