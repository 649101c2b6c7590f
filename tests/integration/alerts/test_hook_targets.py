"""The hook answers for the target an alert names and no other: its cache is keyed on what a diagnosis
depends on (never one namespace's answer for another), and with ``--allowed-namespace`` an alert about
another namespace is refused with a note before any Prometheus or Kubernetes read. The real
``kvpilot alert-hook`` against a Prometheus stand-in and a Kubernetes API stand-in on loopback.
"""

from __future__ import annotations

from tests.integration.alerts.hook_support import HookProcess, StandIn, alert_body
from tests.integration.diagnose.fakes import LoopbackServer, kubeconfig


def _rows_for(namespace: str, pod: str):
    labels = {"namespace": namespace, "pod": pod, "instance": "10.0.0.7:8000", "job": "vllm", "engine": "0"}

    def rows(query):
        text = query.params.get("query", "")
        return [labels] if f'namespace="{namespace}"' in text and f'pod="{pod}"' in text else []

    return rows


def test_the_same_fingerprint_for_another_target_gets_its_own_diagnosis(tmp_path):
    """Alertmanager's fingerprint hashes the alert's labels, but a sender may reuse one (Grafana, a
    hand-written body): the first answer must not be served for another namespace or pod.
    """
    with (
        StandIn("rows", _rows_for("team-a", "qwen-7f3a2")) as prom,
        HookProcess(tmp_path, "--prometheus", prom.url, "--cache", "5m") as hook,
    ):
        answers = {}
        for namespace, pod in (("team-a", "qwen-7f3a2"), ("team-b", "qwen-7f3a2"), ("team-a", "other-7f3a2")):
            body = alert_body({"namespace": namespace, "pod": pod}, fingerprint="434a6f72418719df")
            status, answer, _ = hook.post(body)
            assert status == 200
            answers[namespace, pod] = answer["results"][0]
        status, again, _ = hook.post(alert_body({"namespace": "team-a", "pod": "qwen-7f3a2"}, fingerprint="x"))
    first = answers["team-a", "qwen-7f3a2"]["diagnosis"]["targets"][0]
    assert first["target"]["namespace"] == "team-a"
    assert first["verdict"] != "no_data"
    for key in (("team-b", "qwen-7f3a2"), ("team-a", "other-7f3a2")):
        result = answers[key]
        assert result["cached"] is False
        [target] = result["diagnosis"]["targets"]
        # only team-a/qwen-7f3a2 has series: another target has no data, whatever the fingerprint
        assert target["verdict"] == "no_data"
        assert (target["target"]["namespace"], target["target"]["pod"]) == key
    # the same target under another fingerprint is the cached diagnosis
    assert again["results"][0]["cached"] is True
    assert again["results"][0]["diagnosis"]["targets"][0] == first


def test_alerts_outside_the_allowed_namespaces_are_refused_before_any_read(tmp_path):
    kube_requests = []

    def kube(method, path, _query, _body):
        kube_requests.append((method, path))
        return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}

    with (
        StandIn("rows", _rows_for("llm-serving", "qwen-7f3a2")) as prom,
        LoopbackServer(kube) as api,
    ):
        config = kubeconfig(tmp_path / "kubeconfig", api.url)
        with HookProcess(
            tmp_path,
            "--prometheus",
            prom.url,
            "--limits-from-cluster",
            "--kubeconfig",
            config,
            "--allowed-namespace",
            "llm-*",
            "--allowed-namespace",
            "team-a",
        ) as hook:
            body = alert_body(
                {"namespace": "kube-system", "pod": "qwen-7f3a2"},
                {"pod": "qwen-7f3a2"},  # no namespace: the hook cannot tell, so it does not read
                {"namespace": "llm-serving", "pod": "qwen-7f3a2"},
            )
            status, answer, _ = hook.post(body)
    assert status == 200
    refused, unnamed, allowed = answer["results"]
    assert refused["diagnosis"] is None
    assert refused["error"] == (
        "namespace kube-system: not among the namespaces this hook diagnoses (--allowed-namespace)"
    )
    assert unnamed["diagnosis"] is None
    assert unnamed["error"].startswith("label namespace: required")
    assert allowed["error"] is None
    assert allowed["diagnosis"]["targets"][0]["target"]["namespace"] == "llm-serving"
    queried = [q.params["query"] for q in prom.snapshot()]
    assert queried
    assert all('namespace="llm-serving"' in q for q in queried)
    # the cluster was read for llm-serving only (the VLLMServer and the pod of the allowed alert)
    assert kube_requests, kube_requests
    assert all("/namespaces/llm-serving/" in path for _, path in kube_requests), kube_requests
