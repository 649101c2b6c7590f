"""Pure API-server semantics of the sandbox (URL parsing, selectors, validation, patch, pruning)."""

from __future__ import annotations

import pytest

from kvpilot.sandbox.semantics import (
    ApiPath,
    match_fields,
    match_labels,
    merge_patch,
    parse_api_path,
    parse_field_selector,
    parse_label_selector,
    prune,
    validate_metadata,
)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/api/v1/namespaces", ApiPath("", "v1", "namespaces")),
        ("/api/v1/namespaces/default", ApiPath("", "v1", "namespaces", None, "default")),
        ("/api/v1/namespaces/ns/pods/p/log", ApiPath("", "v1", "pods", "ns", "p", "log")),
        (
            "/apis/kvpilot.dev/v1alpha1/namespaces/ns/vllmservers/x/status",
            ApiPath("kvpilot.dev", "v1alpha1", "vllmservers", "ns", "x", "status"),
        ),
        (
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            ApiPath("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
        ),
        ("/apis/kvpilot.dev/v1alpha1", ApiPath("kvpilot.dev", "v1alpha1")),
        ("/version", ApiPath()),
    ],
)
def test_parse_api_path(path, expected):
    assert parse_api_path(path) == expected


def test_label_selectors():
    labels = {"app": "vllm", "tier": "gpu"}
    assert match_labels(labels, parse_label_selector("app=vllm,tier in (gpu, cpu)"))
    assert not match_labels(labels, parse_label_selector("app==vllm,tier notin (gpu)"))
    assert match_labels(labels, parse_label_selector("app,!zone"))
    assert not match_labels(labels, parse_label_selector("tier!=gpu"))
    assert match_labels(labels, parse_label_selector(""))
    with pytest.raises(ValueError, match="unable to parse requirement: 'app in vllm'"):
        parse_label_selector("app in vllm")


def test_field_selectors():
    obj = {"metadata": {"name": "p"}, "status": {"phase": "Running"}}
    assert match_fields(obj, parse_field_selector("metadata.name=p,status.phase!=Failed"))
    assert not match_fields(obj, parse_field_selector("metadata.name==q"))


def test_label_and_name_validation():
    good = {"metadata": {"name": "qwen-experiment", "labels": {"kvpilot.dev/server": "qwen-experiment"}}}
    assert validate_metadata(good) == []
    bad_value = {"metadata": {"name": "x", "labels": {"model": "Qwen/Qwen2.5-1.5B-Instruct"}}}
    assert len(validate_metadata(bad_value)) == 1
    assert validate_metadata({"metadata": {"name": "1abc"}}, dns1035_name=True)  # services start with a letter
    assert validate_metadata({"metadata": {"name": "1abc"}}) == []  # a subdomain may start with a digit
    no_uid = {"metadata": {"name": "x", "ownerReferences": [{"apiVersion": "v1", "kind": "K", "name": "o"}]}}
    assert "uid" in validate_metadata(no_uid)[0]


def test_merge_patch_rfc7386():
    # RFC 7386 §3 example (abridged): null deletes, objects merge, arrays replace
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
    assert merge_patch(target, {"a": "z", "c": {"f": None}, "l": [3]}) == {"a": "z", "c": {"d": "e"}, "l": [3]}
    assert target["c"] == {"d": "e", "f": "g"}  # input untouched


def test_prune_to_structural_schema():
    schema = {
        "type": "object",
        "properties": {
            "phase": {"type": "string"},
            "conditions": {"type": "array", "items": {"type": "object", "properties": {"type": {"type": "string"}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }
    value = {
        "phase": "Ready",
        "kopf": {"progress": {}},
        "conditions": [{"type": "Ready", "extra": 1}],
        "labels": {"a": "b"},
        "free": {"anything": {"goes": 1}},
    }
    assert prune(value, schema) == {
        "phase": "Ready",
        "conditions": [{"type": "Ready"}],
        "labels": {"a": "b"},
        "free": {"anything": {"goes": 1}},
    }


def test_clone_is_a_deep_copy_of_json_shaped_data():
    import copy

    from kvpilot.sandbox.semantics import clone

    obj = {"a": [1, 2.5, {"b": None, "c": True}], "d": {"e": "x"}, "f": (1, 2)}
    copied = clone(obj)
    assert copied == copy.deepcopy(obj)
    copied["a"][2]["b"] = "changed"
    copied["d"]["e"] = "y"
    assert obj == {"a": [1, 2.5, {"b": None, "c": True}], "d": {"e": "x"}, "f": (1, 2)}  # the original is untouched
    assert copied["f"] == (1, 2)  # not JSON-shaped: deep-copied as copy.deepcopy does
