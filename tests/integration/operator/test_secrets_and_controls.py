"""Planted secrets and terminal escapes: never echoed by the operator, render or diagnose.

A token is planted where a person could paste it by mistake (``hfTokenSecretRef.name``,
``extraArgs``, an env value, the vLLM log lines of a failed start, a metric label) and every
output kvpilot writes is grepped for it: status (message, command, conditions), Events, the
operator's log lines, ``kvpilot render``'s error line, and diagnose's text/markdown/JSON.
"""

from __future__ import annotations

import copy
import json
import logging
import subprocess
import sys
from pathlib import Path

import kubernetes.client
import pytest

from tests.integration.operator.conftest import SERVERS, wait_for

#: Token-shaped strings (Hugging Face and OpenAI formats) that must never be printed back.
HF = "hf_" + "PLANTEDplantedPLANTED1234567890"
SK = "sk-" + "PLANTEDplanted1234567890abcdef"
ESC = "\x1b]0;owned\x07\x1b[2J"  # an OSC title change and "clear screen"
BASE = {"model": "Qwen/Qwen2.5-1.5B-Instruct", "resources": {"gpus": 1, "memory": "6Gi"}}


def _create(api, namespace: str, name: str, spec: dict) -> dict:
    body = {"apiVersion": "kvpilot.dev/v1alpha1", "kind": "VLLMServer", "metadata": {"name": name}, "spec": spec}
    return kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
        *SERVERS, namespace, "vllmservers", copy.deepcopy(body)
    )


def _status(cluster, namespace: str, name: str) -> dict:
    return (cluster.get("kvpilot.dev/v1alpha1/vllmservers", namespace, name) or {}).get("status") or {}


def _clean(text: str) -> None:
    assert HF not in text, text
    assert SK not in text, text
    assert "\x1b" not in text, repr(text)
    assert "\x07" not in text, repr(text)


@pytest.mark.parametrize(
    ("name", "spec", "field"),
    [
        ("token-as-secret-name", {**BASE, "hfTokenSecretRef": {"name": HF}}, "spec.hfTokenSecretRef.name"),
        ("api-key-arg", {**BASE, "engine": {"extraArgs": ["--api-key", SK]}}, "spec.engine.extraArgs[0]"),
        ("api-key-eq", {**BASE, "engine": {"extraArgs": [f"--api-key={SK}"]}}, "spec.engine.extraArgs[0]"),
        ("token-arg", {**BASE, "engine": {"extraArgs": ["--lora-modules", f"x={HF}"]}}, "spec.engine.extraArgs[1]"),
        ("env-literal", {**BASE, "env": [{"name": "OPENAI_API_KEY", "value": SK}]}, "spec.env[0].value"),
        ("env-token-value", {**BASE, "env": [{"name": "EXTRA", "value": HF}]}, "spec.env[0].value"),
    ],
)
def test_planted_secret_in_the_spec_is_never_echoed(cluster, api, namespace, operator, caplog, name, spec, field):
    caplog.set_level(logging.DEBUG)
    with operator():
        _create(api, namespace, name, spec)
        status = wait_for(
            lambda: _status(cluster, namespace, name).get("phase") == "Invalid" and _status(cluster, namespace, name),
            what="phase Invalid",
        )
        events = wait_for(lambda: [e for e in cluster.list("v1/events", namespace) if e["type"] == "Warning"])
    assert status["message"].startswith(field), status["message"]
    _clean(json.dumps(status))
    _clean(json.dumps(events))
    _clean(caplog.text)
    assert cluster.list("v1/pods", namespace) == []


def test_failed_start_log_lines_are_cleaned_in_status_and_events(cluster, api, namespace, operator, kubelet, caplog):
    caplog.set_level(logging.DEBUG)
    with operator():
        _create(api, namespace, "qwen", BASE)
        pod = wait_for(lambda: (cluster.list("v1/pods", namespace) or [None])[0], what="the pod")
        name = pod["metadata"]["name"]
        kubelet.schedule(namespace, name)
        kubelet.fail(namespace, name, message=f"ERROR hub login with {HF} failed{ESC}\nValueError: bad token {SK}")
        status = wait_for(
            lambda: (
                _status(cluster, namespace, "qwen").get("phase") == "Failed" and _status(cluster, namespace, "qwen")
            ),
            what="phase Failed",
        )
        events = wait_for(lambda: [e for e in cluster.list("v1/events", namespace) if e["reason"] == "Failed"])
    assert "ERROR hub login with [REDACTED] failed" in status["message"]
    _clean(json.dumps(status))
    _clean(json.dumps(events))
    _clean(caplog.text)


def test_render_error_line_never_echoes_a_token(tmp_path):
    path = tmp_path / "server.yaml"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "kvpilot.dev/v1alpha1",
                "kind": "VLLMServer",
                "metadata": {"name": "x"},
                "spec": {**BASE, "hfTokenSecretRef": {"name": HF + ESC}},
            }
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "kvpilot.cli", "render", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "spec.hfTokenSecretRef.name: '[REDACTED]" in result.stderr
    _clean(result.stdout + result.stderr)


def test_diagnose_output_of_a_hostile_recording_is_clean(tmp_path):
    source = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "case_C11.om"
    hostile = f"{HF}{ESC}\\n# owned | [x](http://e)"  # \\n: an escaped newline inside the label value
    path = tmp_path / "hostile.om"
    path.write_text(source.read_text().replace("Qwen/Qwen2.5-7B-Instruct", hostile))
    outputs = {}
    for fmt in ("text", "markdown", "json"):
        result = subprocess.run(
            [sys.executable, "-m", "kvpilot.cli", "diagnose", "--recording", str(path), "--no-kube", "-o", fmt],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode in (0, 1, 2), result.stderr
        outputs[fmt] = result.stdout + result.stderr
        _clean(outputs[fmt])
    headings = [line for line in outputs["markdown"].splitlines() if line.startswith("#")]
    assert not [h for h in headings if "owned" in h and not h.startswith("## ")], headings  # no injected heading
    assert "\\[x\\](http://e)" in outputs["markdown"]  # the link is escaped text
    assert "[REDACTED]" in outputs["json"]
