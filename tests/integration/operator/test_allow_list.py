"""The operator's allow-list on the sandbox: a VLLMServer outside it is Invalid (reason NotAllowed)
with a condition and an Event naming the field, and gets no pod; one inside it runs.
"""

from __future__ import annotations

import copy

import kubernetes.client
import pytest

from kvpilot.controller.policy import SpecPolicy
from tests.integration.operator.conftest import SERVERS, wait_for
from tests.integration.operator.test_faults import SERVER

POLICY = SpecPolicy.from_options(["docker.io/vllm/vllm-openai:*"], ["vllm"])


def _create(api, namespace: str, name: str, **spec) -> None:
    body = copy.deepcopy(SERVER)
    body["metadata"]["name"] = name
    body["spec"].update(spec)
    kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(*SERVERS, namespace, "vllmservers", body)


def _status(cluster, namespace: str, name: str) -> dict:
    return (cluster.get("kvpilot.dev/v1alpha1/vllmservers", namespace, name) or {}).get("status") or {}


@pytest.mark.parametrize(
    ("spec", "field", "value"),
    [
        ({"image": "ghcr.io/someone/vllm:latest"}, "spec.image", "ghcr.io/someone/vllm:latest"),
        (
            {"image": "docker.io/vllm/vllm-openai:v0.29.0", "serviceAccountName": "deployer"},
            "spec.serviceAccountName",
            "deployer",
        ),
    ],
)
def test_a_server_outside_the_allow_list_is_invalid_and_gets_no_pod(
    cluster, api, namespace, operator, spec, field, value
):
    with operator(spec_policy=POLICY):
        _create(api, namespace, "ok", image="docker.io/vllm/vllm-openai:v0.29.0", serviceAccountName="vllm")
        _create(api, namespace, "refused", **spec)
        status = wait_for(lambda: (s := _status(cluster, namespace, "refused")).get("phase") and s, what="a phase")
        event = wait_for(
            lambda: [e for e in cluster.list("v1/events", namespace) if e["involvedObject"]["name"] == "refused"],
            what="the Event",
        )
        wait_for(lambda: _status(cluster, namespace, "ok").get("phase") == "Pending", what="the allowed server")
    assert (status["phase"], status["reason"]) == ("Invalid", "NotAllowed")
    assert status["message"].startswith(f"{field}: {value!r} is not among the")
    valid = next(c for c in status["conditions"] if c["type"] == "Valid")
    assert (valid["status"], valid["reason"]) == ("False", "NotAllowed")
    assert valid["message"].startswith(field)
    assert len(event) == 1
    assert event[0]["type"] == "Warning"
    assert field in event[0]["message"]
    pods = [p["metadata"]["labels"]["kvpilot.dev/server"] for p in cluster.list("v1/pods", namespace)]
    assert pods == ["ok"]
    assert [s["metadata"]["name"] for s in cluster.list("v1/services", namespace)] == ["ok"]
