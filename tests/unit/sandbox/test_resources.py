"""The sandbox's own resource table, discovery documents and fault matching (pure; shapes from the API server's
legacy discovery, k8s.io/apimachinery metav1 APIVersions/APIGroupList/APIGroup/APIResourceList).
"""

from __future__ import annotations

import json

import pytest

from kvpilot.api.crd import crd_manifest
from kvpilot.sandbox import faults, resources
from kvpilot.sandbox.resources import Resource, ResourceInfo


def test_resources_are_named_as_the_api_names_them():
    assert Resource.parse("v1/pods") == Resource("", "v1", "pods")
    assert Resource.parse("kvpilot.dev/v1alpha1/vllmservers") == Resource("kvpilot.dev", "v1alpha1", "vllmservers")
    assert Resource("", "v1", "pods").api_version == "v1"
    assert Resource("apps", "v1", "deployments").api_version == "apps/v1"
    assert Resource("apps", "v1", "deployments").qualified == "deployments.apps"
    with pytest.raises(ValueError, match="version/plural"):
        Resource.parse("pods")


def test_the_builtin_table_has_what_the_operator_kopf_and_kubectl_use():
    table = resources.builtin_resources()
    pods = table[Resource("", "v1", "pods")]
    assert (pods.kind, pods.namespaced) == ("Pod", True)
    assert {"log", "status"} <= pods.subresources
    assert table[Resource("", "v1", "nodes")].namespaced is False
    for name in (
        "v1/events",
        "v1/configmaps",
        "apps/v1/deployments",
        "apiextensions.k8s.io/v1/customresourcedefinitions",
    ):
        assert Resource.parse(name) in table


def test_versions_are_preferred_ga_then_beta_then_alpha():
    ordered = sorted(["v1alpha1", "v1beta1", "v1", "v2", "v1beta2", "v2alpha1"], key=resources.version_priority)
    assert ordered[::-1] == ["v2", "v1", "v1beta2", "v1beta1", "v2alpha1", "v1alpha1"]


def test_a_crd_serves_its_versions_with_the_status_subresource_and_schema():
    served = resources.crd_resources(crd_manifest())
    [(res, (info, schema))] = served.items()
    assert res == Resource("kvpilot.dev", "v1alpha1", "vllmservers")
    assert (info.kind, info.namespaced, info.subresources) == ("VLLMServer", True, {"status"})
    assert "status" in schema["properties"]
    assert info.verbs == resources.CUSTOM_VERBS


def test_discovery_documents():
    table = {
        Resource("", "v1", "pods"): ResourceInfo("Pod", True, "pod", {"get", "list"}, subresources={"status"}),
        Resource("kopf.dev", "v1", "kopfpeerings"): ResourceInfo("KopfPeering", True, "kopfpeering", {"get"}),
        Resource("kopf.dev", "v1beta1", "kopfpeerings"): ResourceInfo("KopfPeering", True, "kopfpeering", {"get"}),
    }
    assert resources.api_versions() == {"kind": "APIVersions", "versions": ["v1"]}
    [group] = resources.api_group_list(table)["groups"]
    assert group["name"] == "kopf.dev"
    assert group["preferredVersion"] == {"groupVersion": "kopf.dev/v1", "version": "v1"}
    assert [v["version"] for v in group["versions"]] == ["v1", "v1beta1"]
    assert resources.api_group(table, "kopf.dev")["kind"] == "APIGroup"
    assert resources.api_group(table, "nope.dev") is None
    core = resources.api_resource_list(table, "", "v1")
    assert core["groupVersion"] == "v1"  # the core group's is "v1", not "/v1"
    assert [(r["name"], r["namespaced"], r["kind"]) for r in core["resources"]] == [
        ("pods", True, "Pod"),
        ("pods/status", True, "Pod"),
    ]
    assert resources.api_resource_list(table, "kopf.dev", "v1alpha1") is None
    assert "/apis/kopf.dev/v1beta1" in resources.root_paths(table)["paths"]


def test_a_fault_answers_matching_requests_until_spent():
    fault = faults.Fault(verb="create", plural="pods", code=429, times=2, retry_after=3, namespace="ns")
    assert faults.first_match([fault], "create", "services", None, "ns") is None
    assert faults.first_match([fault], "create", "pods", None, "other") is None
    assert faults.first_match([fault], "create", "pods", "status", "ns") is None
    assert faults.first_match([fault], "create", "pods", None, "ns") is fault
    code, payload, headers = fault.answer("qwen-abcde")
    assert (code, payload["reason"], payload["details"], headers) == (
        429,
        "TooManyRequests",
        {"name": "qwen-abcde"},
        {"Retry-After": "3"},
    )
    assert faults.first_match([fault], "create", "pods", None, "ns") is fault
    assert fault.hits == 2
    assert faults.first_match([fault], "create", "pods", None, "ns") is None  # spent


def test_a_cut_watch_delivers_half_a_line():
    event = {"type": "ADDED", "object": {"metadata": {"name": "x"}}}
    line = json.dumps(event).encode()
    assert faults.half_a_line(event) == line[: len(line) // 2]
    with pytest.raises(json.JSONDecodeError):
        json.loads(faults.half_a_line(event))
