"""The operator in a namespace that enforces Pod Security (the sandbox's admission emulation,
:mod:`kvpilot.sandbox.podsecurity`): the default pod is admitted under ``restricted``; the
``runAsRoot`` opt-out is refused with the API server's message, reported once, never retried.
"""

from __future__ import annotations

import copy

import kubernetes.client
import pytest

from kvpilot.api import parse_spec, spec_hash
from tests.integration.operator.conftest import SERVERS, wait_for
from tests.integration.operator.test_faults import FAST, SERVER


def _label(api, namespace: str, level: str) -> None:
    kubernetes.client.CoreV1Api(api).patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": level}}}
    )


def _create(api, namespace: str, **spec) -> str:
    body = copy.deepcopy(SERVER)
    body["spec"].update(spec)
    kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(*SERVERS, namespace, "vllmservers", body)
    return f"qwen-{spec_hash(parse_spec(body['spec']))[:5]}"  # the renderer's pod name


def _status(cluster, namespace: str) -> dict:
    return (cluster.get("kvpilot.dev/v1alpha1/vllmservers", namespace, "qwen") or {}).get("status") or {}


def _pod_creates(cluster, namespace: str) -> int:
    return sum(1 for m, p, _ in cluster.requests() if m == "POST" and p == f"/api/v1/namespaces/{namespace}/pods")


@pytest.mark.parametrize("level", ["restricted", "baseline"])
def test_the_default_pod_is_admitted(cluster, api, namespace, operator, level):
    _label(api, namespace, level)
    with operator(retry_policy=FAST):
        pod_name = _create(api, namespace)
        wait_for(lambda: _status(cluster, namespace).get("phase") == "Pending", what="phase Pending")
    assert [p["metadata"]["name"] for p in cluster.list("v1/pods", namespace)] == [pod_name]


def test_run_as_root_is_refused_in_a_restricted_namespace_once_with_the_admission_message(
    cluster, api, namespace, operator
):
    _label(api, namespace, "restricted")
    with operator(retry_policy=FAST):
        pod_name = _create(api, namespace, runAsRoot=True)
        status = wait_for(
            lambda: (s := _status(cluster, namespace)).get("phase") == "Failed" and s, what="phase Failed"
        )
        event = wait_for(
            lambda: [e for e in cluster.list("v1/events", namespace) if e["reason"] == "Forbidden"],
            what="the Forbidden event",
        )
        # Permanent: FAST would have retried within 0.1 + 0.2 + 0.4 + 0.5 s; the server's own
        # transition Event comes after the failure, and still one pod create was attempted.
        wait_for(lambda: [e for e in cluster.list("v1/events", namespace) if e["reason"] == "Failed"], what="Failed")
        creates = _pod_creates(cluster, namespace)
    admission = (
        f'pods "{pod_name}" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true '
        '(pod or container "vllm" must set securityContext.runAsNonRoot=true)'
    )
    assert status["reason"] == "Forbidden"
    assert status["message"] == (
        f"creating pod {pod_name}: HTTP 403 Forbidden: {admission} (the namespace's policy or RBAC refused it)"
    )
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Forbidden")
    assert len(event) == 1
    assert event[0]["type"] == "Warning"
    assert admission in event[0]["message"]
    assert creates == 1
    assert cluster.list("v1/pods", namespace) == []
