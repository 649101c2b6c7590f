"""The sandbox API behaves like a real API server where the operator's tests depend on it.

One test per behaviour of a real API server the operator relies on (kvpilot.sandbox.emulator's
docstring lists them), through the kubernetes client (as the operator talks).
"""

from __future__ import annotations

import copy

import kubernetes.client
import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from kvpilot.sandbox import SandboxCluster
from kvpilot.sandbox.emulator import UnknownResourceError
from tests.integration.operator.conftest import SERVERS
from tests.integration.operator.test_operator import EXPERIMENT


def _pod(name: str, labels: dict | None = None) -> dict:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.33.0"}]},
    }


def test_create_fills_server_side_metadata(api, namespace):
    core = kubernetes.client.CoreV1Api(api)
    pod = api.sanitize_for_serialization(core.create_namespaced_pod(namespace, _pod("a")))
    meta = pod["metadata"]
    assert (pod["apiVersion"], pod["kind"], meta["namespace"]) == ("v1", "Pod", namespace)
    assert len(meta["uid"]) == 36
    assert meta["generation"] == 1
    assert int(meta["resourceVersion"]) > 0
    assert meta["creationTimestamp"]
    assert pod["status"]["phase"] == "Pending"
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod(namespace, _pod("a"))
    assert exc.value.status == 409


def test_invalid_label_value_is_refused(api, namespace):
    core = kubernetes.client.CoreV1Api(api)
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod(namespace, _pod("b", {"model": "Qwen/Qwen2.5-1.5B-Instruct"}))
    assert exc.value.status == 422
    assert "Qwen/Qwen2.5-1.5B-Instruct" in exc.value.body


def test_failed_json_patch_test_is_422_and_changes_nothing(api, namespace, cluster):
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, _pod("c"))
    before = cluster.get("v1/pods", namespace, "c")
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod(
            "c",
            namespace,
            [
                {"op": "test", "path": "/metadata/resourceVersion", "value": "0"},
                {"op": "add", "path": "/metadata/labels/x", "value": "y"},
            ],
        )
    assert exc.value.status == 422
    assert cluster.get("v1/pods", namespace, "c") == before


def test_generation_bumps_on_spec_changes_only_and_noop_writes_keep_the_version(api, namespace):
    custom = kubernetes.client.CustomObjectsApi(api)
    created = custom.create_namespaced_custom_object(*SERVERS, namespace, "vllmservers", copy.deepcopy(EXPERIMENT))
    labelled = custom.patch_namespaced_custom_object(
        *SERVERS, namespace, "vllmservers", "qwen", {"metadata": {"labels": {"team": "ml"}}}
    )
    assert labelled["metadata"]["generation"] == 1
    assert int(labelled["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    same = custom.patch_namespaced_custom_object(
        *SERVERS, namespace, "vllmservers", "qwen", {"metadata": {"labels": {"team": "ml"}}}
    )
    assert same["metadata"]["resourceVersion"] == labelled["metadata"]["resourceVersion"]
    changed = custom.patch_namespaced_custom_object(
        *SERVERS, namespace, "vllmservers", "qwen", {"spec": {"ttlSeconds": 600}}
    )
    assert changed["metadata"]["generation"] == 2


def test_status_only_through_the_subresource_and_pruned_to_the_schema(api, namespace):
    custom = kubernetes.client.CustomObjectsApi(api)
    body = copy.deepcopy(EXPERIMENT)
    body["status"] = {"phase": "Ready"}
    created = custom.create_namespaced_custom_object(*SERVERS, namespace, "vllmservers", body)
    assert "status" not in created  # status is ignored on create
    main = custom.patch_namespaced_custom_object(
        *SERVERS, namespace, "vllmservers", "qwen", {"status": {"phase": "Ready"}}
    )
    assert "status" not in main  # ...and through the main endpoint
    patched = custom.patch_namespaced_custom_object_status(
        *SERVERS,
        namespace,
        "vllmservers",
        "qwen",
        {
            "status": {"phase": "Ready", "kopf": {"progress": {}, "other": 1}, "somethingElse": 1},
            "spec": {"ttlSeconds": 60},
        },
    )
    assert patched["status"] == {"phase": "Ready", "kopf": {"progress": {}}}  # undeclared fields pruned
    assert patched["spec"]["ttlSeconds"] == 3600
    assert patched["metadata"]["generation"] == 1


def test_watch_resumes_after_resource_version_without_replaying(api, namespace):
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, _pod("w"))
    seen = core.patch_namespaced_pod(
        "w", namespace, {"metadata": {"labels": {"v": "1"}}}, _content_type="application/merge-patch+json"
    )
    newer = core.patch_namespaced_pod(
        "w", namespace, {"metadata": {"labels": {"v": "2"}}}, _content_type="application/merge-patch+json"
    )
    core.create_namespaced_pod(namespace, _pod("z"))
    stream = watch.Watch()
    events = []
    for event in stream.stream(
        core.list_namespaced_pod, namespace, resource_version=seen.metadata.resource_version, _request_timeout=10
    ):
        events.append((event["type"], event["object"].metadata.name, event["object"].metadata.resource_version))
        if len(events) == 2:
            stream.stop()
    assert events[0] == ("MODIFIED", "w", newer.metadata.resource_version)
    assert events[1][:2] == ("ADDED", "z")


def test_selectors_and_namespace_listing(api, namespace):
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, _pod("s1", {"tier": "gpu", "app": "vllm"}))
    core.create_namespaced_pod(namespace, _pod("s2", {"tier": "cpu", "app": "vllm"}))
    core.create_namespaced_pod(namespace, _pod("s3", {"app": "other"}))

    def names(**kwargs):
        return sorted(p.metadata.name for p in core.list_namespaced_pod(namespace, **kwargs).items)

    assert names(label_selector="app=vllm,tier!=cpu") == ["s1"]
    assert names(label_selector="tier in (gpu,cpu)") == ["s1", "s2"]
    assert names(label_selector="!tier") == ["s3"]
    assert names(field_selector="metadata.name=s2") == ["s2"]
    assert namespace in [n.metadata.name for n in core.list_namespace().items]
    assert core.read_namespace(namespace).metadata.name == namespace


def test_pod_log_is_text_and_400_before_the_container_runs(api, namespace, kubelet):
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, _pod("l"))
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod_log("l", namespace)
    assert exc.value.status == 400
    assert "waiting to start" in exc.value.body
    kubelet.start(namespace, "l", log="line 1\nline 2\n")
    raw = core.read_namespaced_pod_log("l", namespace, _preload_content=False)
    assert raw.headers["Content-Type"] == "text/plain"
    assert raw.data.decode() == "line 1\nline 2\n"
    assert core.read_namespaced_pod_log("l", namespace, tail_lines=1) == "line 2\n"


def test_pod_spec_is_immutable(api, namespace):
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, _pod("i"))
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod(
            "i", namespace, {"spec": {"restartPolicy": "Always"}}, _content_type="application/merge-patch+json"
        )
    assert exc.value.status == 422
    assert "Forbidden" in exc.value.body


def test_deleting_an_owner_deletes_dependents_and_finalizers_hold_deletion(api, namespace, cluster):
    core = kubernetes.client.CoreV1Api(api)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner", "finalizers": ["x/y"]}})
    dependent = _pod("d")
    dependent["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    ]
    core.create_namespaced_pod(namespace, dependent)
    core.delete_namespaced_config_map("owner", namespace)
    held = cluster.get("v1/configmaps", namespace, "owner")
    assert held["metadata"]["deletionTimestamp"]  # the finalizer holds it
    assert cluster.get("v1/pods", namespace, "d") is not None
    core.patch_namespaced_config_map(
        "owner", namespace, {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
    )
    assert cluster.get("v1/configmaps", namespace, "owner") is None
    assert cluster.get("v1/pods", namespace, "d") is None


def test_crd_is_discoverable_with_its_status_subresource(api):
    resources = kubernetes.client.CustomObjectsApi(api).get_api_resources(*SERVERS)
    names = {r.name: r for r in resources.resources}
    assert names["vllmservers"].kind == "VLLMServer"
    assert names["vllmservers"].namespaced
    assert "vllmservers/status" in names


def _status_listing_an_unknown_resource(sandbox: SandboxCluster) -> int:
    """The HTTP status the client gets listing a resource the sandbox does not serve."""
    with pytest.raises(ApiException) as answer:
        kubernetes.client.CustomObjectsApi(sandbox.api_client()).list_namespaced_custom_object(
            "nope.dev", "v1", "default", "things"
        )
    return answer.value.status


def test_strict_mode_reports_requests_to_unknown_resources():
    statuses = []
    with pytest.raises(UnknownResourceError), SandboxCluster(strict=True) as sandbox:  # re-raised on exit
        statuses.append(_status_listing_an_unknown_resource(sandbox))
    assert statuses == [404]  # the client got a 404


def test_custom_resources_are_validated_against_the_crd_schema(api, namespace):
    body = copy.deepcopy(EXPERIMENT)
    body["spec"]["engine"]["gpuMemoryUtilization"] = 1.5  # the CRD bounds it: 0 < x <= 1
    with pytest.raises(ApiException) as exc:
        kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
            *SERVERS, namespace, "vllmservers", body
        )
    assert exc.value.status == 422
    assert "spec.engine.gpuMemoryUtilization" in exc.value.body


def test_orphan_propagation_keeps_dependents(api, namespace, cluster):
    core = kubernetes.client.CoreV1Api(api)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner2"}})
    dependent = _pod("o")
    dependent["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner2", "uid": owner.metadata.uid}
    ]
    core.create_namespaced_pod(namespace, dependent)
    core.delete_namespaced_config_map("owner2", namespace, propagation_policy="Orphan")
    assert cluster.get("v1/configmaps", namespace, "owner2") is None
    assert cluster.get("v1/pods", namespace, "o") is not None
