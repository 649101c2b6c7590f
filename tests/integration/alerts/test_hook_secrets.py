"""No secret leaves through the hook or diagnose, and no label goes out raw.

A Prometheus stand-in on loopback, reached through ``http://alice:PASSWORD@…``, answers series whose
labels carry a Hugging Face token, an ``--api-key``, a terminal escape and a bidi override, and fails
its range queries with an error quoting a token. The real ``kvpilot alert-hook`` posts every result to
all four sinks (log, forward, a Grafana stand-in, a Kubernetes API stand-in for the Event); every byte
of every output is searched: the answer, stdout, stderr, each forwarded body, each annotation, each
Event. ``kvpilot diagnose`` is searched the same way.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys

from tests.integration.alerts.hook_support import HookProcess, StandIn, alert_body
from tests.integration.diagnose.fakes import LoopbackServer, kubeconfig

PASSWORD = "pa55-w0rd-secret"
HF = "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmN"
API_KEY = "sk-live-" + "k" * 24
HOSTILE = {
    "namespace": "llm",
    "pod": "qwen-7f3a2",
    "model_name": f"HF_TOKEN={HF}",
    "instance": f"10.0.0.7:8000 --api-key {API_KEY}",
    "job": "\x1b[31mvllm\x1b[0m\u202e",
    "engine": "0",
}
#: what must appear in no output, in any encoding JSON may give it
FORBIDDEN = [PASSWORD, HF, API_KEY, "\x1b", "\\u001b", "\u202e", "\\u202e", "\x07", "\\u0007"]


def _rows(query):
    return [HOSTILE] if 'pod="qwen-7f3a2"' in query.params.get("query", "") else []


def _fail(query):
    # the range queries fail with an error quoting a token: the note naming the failure carries the URL
    return (422, f"query rejected near model_name=HF_TOKEN={HF}") if query.path.endswith("query_range") else None


def _clean(text: str, where: str) -> None:
    for secret in FORBIDDEN:
        assert secret not in text, f"{secret!r} in {where}: {text[:2000]}"


def test_no_secret_or_raw_label_leaves_through_any_output_of_the_hook(tmp_path):
    events, annotations, forwarded = [], [], []

    def kube(method, _path, _query, body):
        if method == "GET":  # the VLLMServer the Event is about
            return 200, {"apiVersion": "kvpilot.dev/v1alpha1", "kind": "VLLMServer", "metadata": {"uid": "u-1"}}
        events.append(body.decode())
        return 201, json.loads(body)

    def grafana(_method, _path, _query, body):
        annotations.append(body.decode())
        return 200, {"id": 1}

    def forward(_method, _path, _query, body):
        forwarded.append(body.decode())
        return 200, {}

    alert = {
        "namespace": "llm",
        "pod": "qwen-7f3a2",
        "alertname": "VLLMMaxNumSeqsCap\x1b]0;pwned\x07",
        "note": f"HF_TOKEN={HF}",
    }
    body = alert_body(alert, fingerprint=API_KEY)
    with (
        StandIn("rows", _rows, _fail) as prom,
        LoopbackServer(forward) as collector,
        LoopbackServer(kube) as api,
        LoopbackServer(grafana) as grafana_api,
    ):
        (tmp_path / "grafana-token").write_text("glsa_grafana_token\n")
        with HookProcess(
            tmp_path,
            "--prometheus",
            prom.url.replace("http://", f"http://alice:{PASSWORD}@"),
            "--sink",
            "log",
            "--sink",
            "forward",
            "--forward-url",
            collector.url + "/results",
            "--sink",
            "grafana",
            "--grafana-url",
            grafana_api.url,
            "--grafana-token-file",
            str(tmp_path / "grafana-token"),
            "--sink",
            "kube-event",
            "--kubeconfig",
            kubeconfig(tmp_path / "kubeconfig", api.url),
        ) as hook:
            status, answer, _ = hook.post(body)
            stdout, stderr = hook.stdout(), hook.stderr()
        sent = {q.headers.get("Authorization") for q in prom.snapshot()}
    assert status == 200
    [result] = answer["results"]
    [target] = result["diagnosis"]["targets"]
    # the labels as diagnose -o json prints them: redacted, one line, no control characters
    assert target["target"]["model_name"] == "HF_TOKEN=[REDACTED]"
    assert target["target"]["instance"] == "10.0.0.7:8000 --api-key [REDACTED]"
    assert target["target"]["job"] == "vllm"
    assert result["diagnosis"]["source"] == f"prometheus {prom.url}"
    assert any(prom.url in note and "HTTP 422" in note for note in result["diagnosis"]["notes"])
    assert result["alertname"] == "VLLMMaxNumSeqsCap"
    assert result["fingerprint"] == "[REDACTED]"
    # Prometheus got the credentials as basic auth
    assert sent == {"Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()}
    assert forwarded
    assert annotations
    assert events
    assert stdout.strip()
    for where, text in [("the answer", json.dumps(answer)), ("stdout", stdout), ("stderr", stderr)]:
        _clean(text, where)
    for i, text in enumerate(forwarded):
        _clean(text, f"forwarded body {i}")
        assert json.loads(text)["alert"]["labels"]["note"] == "HF_TOKEN=[REDACTED]"
    for i, text in enumerate(annotations):
        _clean(text, f"annotation {i}")
    for i, text in enumerate(events):
        _clean(text, f"event {i}")
        assert "VLLMMaxNumSeqsCap on llm/qwen-7f3a2" in json.loads(text)["message"]


def _diagnose(*args: str) -> subprocess.CompletedProcess:
    """``kvpilot diagnose --no-kube -n llm ARGS`` in a child process (JSON unless ARGS say otherwise)."""
    argv = [sys.executable, "-m", "kvpilot.cli", "diagnose", "--no-kube", "-n", "llm", "-o", "json", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_prometheus_credentials_from_a_file(tmp_path):
    (tmp_path / "prom-token").write_text("prom-bearer-token\n")
    (tmp_path / "prom-basic").write_text(f"alice:{PASSWORD}\n")
    with StandIn("rows", _rows) as prom:
        with HookProcess(
            tmp_path, "--prometheus", prom.url, "--prometheus-bearer-token-file", str(tmp_path / "prom-token")
        ) as hook:
            status, answer, _ = hook.post(alert_body({"namespace": "llm", "pod": "qwen-7f3a2"}))
        assert status == 200
        assert answer["results"][0]["diagnosis"] is not None
        assert {q.headers.get("Authorization") for q in prom.snapshot()} == {"Bearer prom-bearer-token"}
        before = len(prom.snapshot())
        cli = _diagnose("--prometheus", prom.url, "--prometheus-basic-auth-file", str(tmp_path / "prom-basic"))
        assert cli.returncode in (0, 1, 2, 3), cli.stderr
        assert "Traceback" not in cli.stderr, cli.stderr
        headers = {q.headers.get("Authorization") for q in prom.snapshot()[before:]}
    assert headers == {"Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()}
    assert PASSWORD not in cli.stdout + cli.stderr


def test_diagnose_prints_no_password_and_no_raw_label():
    with StandIn("rows", _rows, _fail) as prom:
        url = prom.url.replace("http://", f"http://alice:{PASSWORD}@")
        outputs = []
        for fmt in ("json", "text", "markdown"):
            cli = _diagnose("--prometheus", url, "-o", fmt)
            assert cli.returncode in (0, 1, 2, 3), cli.stderr
            assert "Traceback" not in cli.stderr, cli.stderr
            outputs.append((fmt, cli.stdout + cli.stderr))
    doc = json.loads(outputs[0][1])
    assert doc["source"] == f"prometheus {prom.url}"
    for fmt, text in outputs:
        _clean(text, f"diagnose -o {fmt}")
        assert prom.url in text
        assert "alice" not in text
