"""manifests/monitoring: the Kubernetes objects validate strictly; the hook's RBAC is what its sinks use."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest

from tests.support.manifests import load_docs, validation_errors

MONITORING = Path(__file__).resolve().parents[3] / "manifests" / "monitoring"
#: Prometheus Operator kinds: their CRDs are not part of kvpilot (checked by shape in test_rules.py)
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}


@pytest.mark.parametrize("name", ["alert-hook.yaml", "operator-metrics.yaml"])
def test_core_objects_validate_strictly(name):
    docs = [d for d in load_docs((MONITORING / name).read_text()) if d["kind"] not in OPERATOR_KINDS]
    assert docs
    for doc in docs:
        assert validation_errors(doc, kubernetes_validate.latest_version(), {}) == [], doc["kind"]


def test_hook_rbac_is_what_its_sinks_and_lookups_need():
    [role] = [d for d in load_docs((MONITORING / "alert-hook.yaml").read_text()) if d["kind"] == "ClusterRole"]
    granted = {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }
    # kvpilot.alerts.sinks.KubeEventSink: get the VLLMServer (its uid), create the Event;
    # kvpilot.diagnose.sources.kube.lookup_server: get the VLLMServer, its pod and the pod's startup log
    assert granted == {
        ("kvpilot.dev", "vllmservers", "get"),
        ("", "pods", "get"),
        ("", "pods/log", "get"),
        ("", "events", "create"),
    }


def test_the_operator_scrape_keeps_the_vllm_pod_labels():
    [monitor] = [
        d for d in load_docs((MONITORING / "operator-servicemonitor.yaml").read_text()) if d["kind"] == "ServiceMonitor"
    ]
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True


def test_the_metrics_service_applies_without_the_prometheus_operator():
    # operator-metrics.yaml holds core objects only (kubectl apply on a cluster without monitoring.coreos.com
    # succeeds); the ServiceMonitor, which needs that CRD, is a file of its own selecting that Service's labels
    service = load_docs((MONITORING / "operator-metrics.yaml").read_text())
    assert [d["kind"] for d in service] == ["Service"]
    assert all(d["apiVersion"] == "v1" for d in service)
    monitor = load_docs((MONITORING / "operator-servicemonitor.yaml").read_text())
    assert [(d["apiVersion"], d["kind"]) for d in monitor] == [("monitoring.coreos.com/v1", "ServiceMonitor")]
    assert monitor[0]["spec"]["selector"]["matchLabels"].items() <= service[0]["metadata"]["labels"].items()
