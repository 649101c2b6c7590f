"""Validation equal to the API server's for what kvpilot copies into the Pod (each case was accepted
by render before and refused by a real API server).

Expected rules, written out from k8s.io/apimachinery (pkg/util/validation IsQualifiedName,
IsValidLabelValue, IsDNS1123Label; pkg/api/validation ValidateAnnotations, 256 KiB total) and
k8s.io/kubernetes pkg/apis/core/validation ValidateTolerations.
"""

from __future__ import annotations

import pytest

from kvpilot.api import SpecError, parse_resource, parse_spec
from kvpilot.render import render_objects

BASE = {"model": "Qwen/Qwen2.5-1.5B-Instruct"}


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ({"nodeSelector": {"bad key!": "x"}}, "spec.nodeSelector.bad key!", "name part must consist"),
        ({"nodeSelector": {"gpu": "a b"}}, "spec.nodeSelector.gpu", "a valid label value"),
        ({"nodeSelector": {"gpu": "x" * 64}}, "spec.nodeSelector.gpu", "no more than 63 characters (got 64)"),
        (
            {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]},
            "spec.tolerations[0].value",
            "must be empty",
        ),
        ({"tolerations": [{"key": "k", "tolerationSeconds": 5}]}, "spec.tolerations[0].effect", "NoExecute"),
        ({"tolerations": [{"operator": "Equal", "value": "v"}]}, "spec.tolerations[0].operator", "must be Exists"),
        (
            {"tolerations": [{"key": "k", "effect": "NoExecute", "tolerationSeconds": 2**63}]},
            "spec.tolerations[0].tolerationSeconds",
            "64-bit",
        ),
        ({"tolerations": [{"key": "k", "value": "a b"}]}, "spec.tolerations[0].value", "a valid label value"),
        ({"podAnnotations": {"a" * 64: "v"}}, "spec.podAnnotations." + "a" * 64, "name part must be no more than 63"),
        ({"podAnnotations": {"x": "v" * (256 * 1024)}}, "spec.podAnnotations", "262144 bytes in total (got 262145)"),
        ({"podLabels": {"a" * 254 + "/k": "v"}}, "spec.podLabels." + "a" * 254 + "/k", "no more than 253"),
    ],
)
def test_what_the_api_server_refuses_is_refused(extra, field, words):
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE, **extra})
    assert info.value.field == field
    assert words in info.value.message


@pytest.mark.parametrize(
    "extra",
    [
        {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "empty": ""}},
        {"tolerations": [{"operator": "Exists"}]},  # empty key + Exists: tolerate everything
        {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        {"tolerations": [{"key": "k", "effect": "NoExecute", "tolerationSeconds": 300}]},
        {"podAnnotations": {"example.com/" + "a" * 63: "v" * 1000}},
    ],
)
def test_what_the_api_server_accepts_is_accepted(extra):
    parse_spec({**BASE, **extra})


@pytest.mark.parametrize("namespace", ["Bad", "a" * 64, "has_underscore", "-x", ""])
def test_namespace_is_a_dns_label(namespace):
    with pytest.raises(SpecError) as info:
        render_objects("qwen", namespace, BASE)
    assert info.value.field == "metadata.namespace"
    obj = {
        "apiVersion": "kvpilot.dev/v1alpha1",
        "kind": "VLLMServer",
        "metadata": {"name": "q", "namespace": namespace},
    }
    with pytest.raises(SpecError) as info:
        parse_resource({**obj, "spec": BASE})
    assert info.value.field == "metadata.namespace"


@pytest.mark.parametrize("char", ["\x85", "\u2028"])
def test_line_separators_are_never_changed_or_crashing(char):
    """U+0085 in args became a space and U+2028 in an affinity key crashed the renderer's YAML read-back.

    A preferred node-affinity value may be any string (``ValidatePreferredSchedulingTerms`` allows invalid
    label values), so it must reach the pod unchanged; as an unknown affinity field or a label key it is
    refused, naming the field, with the character escaped (the path stays one line).
    """
    preferred = {
        "weight": 1,
        "preference": {"matchExpressions": [{"key": "k", "operator": "In", "values": [f"a{char}b"]}]},
    }
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [preferred]}}
    pod, _ = render_objects(
        "qwen", "default", {**BASE, "engine": {"extraArgs": [f"--seed=1{char}"]}, "affinity": affinity}
    )
    assert pod["spec"]["containers"][0]["command"][-1] == f"--seed=1{char}"
    assert pod["spec"]["affinity"] == affinity
    escaped = "\\u0085" if char == "\x85" else "\\u2028"
    with pytest.raises(SpecError) as info:
        render_objects("qwen", "default", {**BASE, "affinity": {"nodeAffinity": {f"k{char}": {}}}})
    assert info.value.field == f'spec.affinity.nodeAffinity["k{escaped}"]'
    assert "unknown field" in info.value.message
    required = {"nodeSelectorTerms": [{"matchExpressions": [{"key": f"k{char}", "operator": "Exists"}]}]}
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}})
    assert info.value.field == (
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        ".matchExpressions[0].key"
    )
    assert "name part must consist" in info.value.message
