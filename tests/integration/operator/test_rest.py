"""kvpilot.controller.rest: the operator's model-free JSON requests do what the generated client methods do.

Each request is compared with the same request through the ``kubernetes`` client's generated method
(the reference) on the sandbox API: the object served, and the exception class and status of an error.
"""

from __future__ import annotations

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException, ConflictException, NotFoundException

from kvpilot.controller.rest import JsonApi, core_path, custom_status_path
from tests.integration.operator.conftest import SERVERS
from tests.integration.operator.test_operator import EXPERIMENT


def _pod(name: str) -> dict:
    return {
        "metadata": {"name": name, "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.33.0"}]},
    }


def test_create_returns_the_object_as_served_and_409_like_the_client(api, namespace):
    core = kubernetes.client.CoreV1Api(api)
    created = JsonApi(api).create(core_path(namespace, "pods"), _pod("a"))
    read = api.sanitize_for_serialization(core.read_namespaced_pod("a", namespace))
    assert created["metadata"]["uid"] == read["metadata"]["uid"]
    assert created["metadata"]["resourceVersion"] == read["metadata"]["resourceVersion"]
    assert created["spec"]["containers"][0]["image"] == "vllm/vllm-openai:v0.33.0"
    with pytest.raises(ApiException) as reference:
        core.create_namespaced_pod(namespace, _pod("a"), _preload_content=False)
    with pytest.raises(ConflictException) as ours:
        JsonApi(api).create(core_path(namespace, "pods"), _pod("a"))
    assert type(ours.value) is type(reference.value)
    assert ours.value.status == 409
    assert "already exists" in ours.value.body


def test_merge_patch_of_status_is_the_clients_merge_patch(api, namespace):
    custom = kubernetes.client.CustomObjectsApi(api)
    group, version = SERVERS
    body = {
        "apiVersion": f"{group}/{version}",
        "kind": "VLLMServer",
        "metadata": {"name": "m"},
        "spec": EXPERIMENT["spec"],
    }
    custom.create_namespaced_custom_object(group, version, namespace, "vllmservers", body)
    path = custom_status_path(group, version, namespace, "vllmservers", "m")
    ours = JsonApi(api).merge_patch(path, {"status": {"phase": "Pending", "message": "a"}})
    assert ours["status"] == {"phase": "Pending", "message": "a"}
    reference = custom.patch_namespaced_custom_object_status(
        group, version, namespace, "vllmservers", "m", {"status": {"message": None, "reason": "R"}}
    )
    again = JsonApi(api).merge_patch(path, {"status": {"reason": None}})  # null deletes (RFC 7386)
    assert reference["status"] == {"phase": "Pending", "reason": "R"}
    assert again["status"] == {"phase": "Pending"}
    assert int(again["metadata"]["resourceVersion"]) > int(reference["metadata"]["resourceVersion"])


def test_missing_object_raises_the_clients_404(api, namespace):
    group, version = SERVERS
    with pytest.raises(NotFoundException) as exc:
        JsonApi(api).merge_patch(custom_status_path(group, version, namespace, "vllmservers", "nope"), {"status": {}})
    assert exc.value.status == 404


def test_paths_encode_each_segment():
    assert core_path("ns", "pods") == "/api/v1/namespaces/ns/pods"
    assert (
        custom_status_path("g.io", "v1", "a/b", "things", "x y") == "/apis/g.io/v1/namespaces/a%2Fb/things/x%20y/status"
    )
