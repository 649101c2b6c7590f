"""``spec.affinity`` checked as the API server checks a Pod's affinity on create, both sides of each rule.

Expected results are written out from kubernetes/kubernetes ``pkg/apis/core/validation/validation.go``
(``validateAffinity`` and the functions it calls, commit 000f260, a Kubernetes 1.33+ tree), apimachinery
``pkg/apis/meta/v1/validation`` ``ValidateLabelSelector``, ``pkg/registry/core/pod/strategy.go``
``mutatePodAffinity`` (matchLabelKeys merged into the selector before validation), and the Kubernetes 1.37
OpenAPI (kubernetes-validate's strict schema) for the shape. Every accepted affinity is also rendered
and the pod validated strictly by kubernetes-validate.
"""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from kvpilot.api import SpecError, parse_spec
from kvpilot.api.k8s_validation import affinity_schema
from kvpilot.render import render_objects
from tests.support.k8s_schema import definitions_fragment

BASE = {"model": "Qwen/Qwen2.5-1.5B-Instruct"}
REQ = "requiredDuringSchedulingIgnoredDuringExecution"
PREF = "preferredDuringSchedulingIgnoredDuringExecution"
NA = f"spec.affinity.nodeAffinity.{REQ}.nodeSelectorTerms[0]"


def _node(*exprs, fields=()):
    term = {"matchExpressions": list(exprs)} if exprs else {}
    if fields:
        term["matchFields"] = list(fields)
    return {"nodeAffinity": {REQ: {"nodeSelectorTerms": [term]}}}


def _node_pref(weight, *exprs):
    return {"nodeAffinity": {PREF: [{"weight": weight, "preference": {"matchExpressions": list(exprs)}}]}}


def _pod(term, kind="podAffinity"):
    return {kind: {REQ: [term]}}


def _pod_pref(weight, term, kind="podAntiAffinity"):
    return {kind: {PREF: [{"weight": weight, "podAffinityTerm": term}]}}


def _expr(key="gpu", op="In", values=("a100",)):
    out = {"key": key, "operator": op}
    if values is not None:
        out["values"] = list(values)
    return out


ZONE = "topology.kubernetes.io/zone"
SEL = {"matchLabels": {"team": "ml"}}

ACCEPTED = [
    _node(_expr()),
    _node(_expr(op="NotIn", values=["a", "b"])),
    _node(_expr(op="Exists", values=None)),
    _node(_expr(op="DoesNotExist", values=[])),  # an empty list is "no values"
    _node(_expr(op="Gt", values=["7"])),
    _node(_expr(op="Lt", values=["12"])),
    _node_pref(3, _expr(op="Lt", values=["+12"])),  # strconv.ParseInt takes a sign; no label value, fine when preferred
    _node(_expr(key="nvidia.com/gpu.product")),
    _node(fields=[{"key": "metadata.name", "operator": "In", "values": ["node-1.example"]}]),
    _node_pref(1, _expr()),
    _node_pref(100, _expr(values=["not a label value!"])),  # preferred terms may hold invalid values
    _node_pref(50, _expr(op="Gt", values=["-3"])),  # "-3" is no label value: fine in a preferred term
    _pod({"topologyKey": ZONE, "labelSelector": SEL}),
    _pod(
        {
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchExpressions": [_expr("team", "Exists", None)]},
        }
    ),
    _pod({"topologyKey": ZONE, "namespaces": ["ml", "default"], "namespaceSelector": {}}),
    _pod({"topologyKey": ZONE, "labelSelector": SEL, "matchLabelKeys": ["app.kubernetes.io/instance"]}),
    # mismatchLabelKeys may repeat a selector key (NotIn narrows it further)
    _pod(
        {
            "topologyKey": ZONE,
            "labelSelector": {"matchLabels": {"kvpilot.dev/server": "x"}},
            "mismatchLabelKeys": ["kvpilot.dev/server"],
        }
    ),
    # matchLabelKeys repeating a selector key the pod does not carry: nothing is merged, nothing clashes
    _pod({"topologyKey": ZONE, "labelSelector": SEL, "matchLabelKeys": ["team"]}),
    _pod_pref(1, {"topologyKey": ZONE, "labelSelector": SEL}),
    _pod_pref(100, {"topologyKey": ZONE}, kind="podAffinity"),
    {"nodeAffinity": None, "podAffinity": {}, "podAntiAffinity": {REQ: []}},  # null and empty parts
    {},
]


@pytest.mark.parametrize("affinity", ACCEPTED, ids=range(len(ACCEPTED)))
def test_what_the_api_server_accepts_is_accepted_and_renders_valid(affinity):
    pod, _ = render_objects("qwen", "default", {**BASE, "affinity": affinity})
    assert pod["spec"].get("affinity", {}) == affinity  # copied as is (an empty one is left out)
    kubernetes_validate.validate(pod, "1.37", strict=True)


P0 = f"spec.affinity.podAffinity.{REQ}[0]"
A0 = f"spec.affinity.podAntiAffinity.{PREF}[0]"

REFUSED = [
    # -- shape (Kubernetes 1.37 OpenAPI)
    ({"nodeAfinity": {}}, "spec.affinity.nodeAfinity", 'unknown field "nodeAfinity"'),
    (
        {"nodeAffinity": {REQ: {"nodeSelectorTerms": [{"matchExpression": []}]}}},
        f"{NA}.matchExpression",
        "unknown field",
    ),
    ({"nodeAffinity": {REQ: {}}}, f"spec.affinity.nodeAffinity.{REQ}.nodeSelectorTerms", "required field is missing"),
    ({"nodeAffinity": {REQ: []}}, f"spec.affinity.nodeAffinity.{REQ}", "must be of type object (got array)"),
    (_node({"key": "gpu", "operator": "In", "values": "a100"}), f"{NA}.matchExpressions[0].values", "of type array"),
    (_node({"key": "gpu", "operator": "In", "values": [1]}), f"{NA}.matchExpressions[0].values[0]", "of type string"),
    (_node({"operator": "Exists"}), f"{NA}.matchExpressions[0].key", "required field is missing"),
    (_node_pref("5", _expr()), f"spec.affinity.nodeAffinity.{PREF}[0].weight", "of type integer (got string)"),
    (_node_pref(True, _expr()), f"spec.affinity.nodeAffinity.{PREF}[0].weight", "of type integer (got boolean)"),
    (_node_pref(2**31, _expr()), f"spec.affinity.nodeAffinity.{PREF}[0].weight", "32-bit"),
    (_pod({"labelSelector": SEL}), f"{P0}.topologyKey", "required field is missing"),
    (
        _pod({"topologyKey": ZONE, "labelSelector": {"matchLabels": {"a": 1}}}),
        f"{P0}.labelSelector.matchLabels.a",
        "of type string",
    ),
    ({"podAffinity": {REQ: [{"topologyKey": ZONE, "x\u2028": 1}]}}, f'{P0}["x\\u2028"]', "unknown field"),
    # -- ValidateNodeSelector / ValidateNodeSelectorRequirement
    (
        {"nodeAffinity": {REQ: {"nodeSelectorTerms": []}}},
        f"spec.affinity.nodeAffinity.{REQ}.nodeSelectorTerms",
        "at least one",
    ),
    (
        _node(_expr(values=[])),
        f"{NA}.matchExpressions[0].values",
        "must be specified when `operator` is 'In' or 'NotIn'",
    ),
    (_node(_expr(op="NotIn", values=None)), f"{NA}.matchExpressions[0].values", "'In' or 'NotIn'"),
    (_node(_expr(op="Exists")), f"{NA}.matchExpressions[0].values", "may not be specified"),
    (_node(_expr(op="DoesNotExist", values=["x"])), f"{NA}.matchExpressions[0].values", "may not be specified"),
    (_node(_expr(op="Gt", values=["1", "2"])), f"{NA}.matchExpressions[0].values", "single value"),
    (_node(_expr(op="Lt", values=[])), f"{NA}.matchExpressions[0].values", "single value"),
    (_node(_expr(op="Gt", values=["1.5"])), f"{NA}.matchExpressions[0].values[0]", "must be an integer"),
    (_node(_expr(op="Lt", values=[str(2**63)])), f"{NA}.matchExpressions[0].values[0]", "must be an integer"),
    (_node(_expr(op="in")), f"{NA}.matchExpressions[0].operator", "not a valid selector operator"),
    (_node(_expr(key="bad key")), f"{NA}.matchExpressions[0].key", "name part must consist"),
    (_node(_expr(key="")), f"{NA}.matchExpressions[0].key", "name part must be non-empty"),
    (_node(_expr(key="x" * 64)), f"{NA}.matchExpressions[0].key", "no more than 63"),
    (_node(_expr(values=["a b"])), f"{NA}.matchExpressions[0].values[0]", "a valid label value"),
    (_node(_expr(values=["ok", "x" * 64])), f"{NA}.matchExpressions[0].values[1]", "no more than 63"),
    # -- ValidateNodeFieldSelectorRequirement
    (_node(fields=[{"key": "metadata.name", "operator": "Exists"}]), f"{NA}.matchFields[0].operator", "not a valid"),
    (
        _node(fields=[{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]),
        f"{NA}.matchFields[0].values",
        "only one",
    ),
    (
        _node(fields=[{"key": "spec.nodeName", "operator": "In", "values": ["a"]}]),
        f"{NA}.matchFields[0].key",
        "field selector key",
    ),
    (
        _node(fields=[{"key": "metadata.name", "operator": "In", "values": ["Node_1"]}]),
        f"{NA}.matchFields[0].values[0]",
        "RFC 1123 subdomain",
    ),
    # -- ValidatePreferredSchedulingTerms (weight 1..100); its key is still a qualified name
    (_node_pref(0, _expr()), f"spec.affinity.nodeAffinity.{PREF}[0].weight", "1-100"),
    (_node_pref(101, _expr()), f"spec.affinity.nodeAffinity.{PREF}[0].weight", "1-100"),
    (
        _node_pref(5, _expr(key="a/b/c")),
        f"spec.affinity.nodeAffinity.{PREF}[0].preference.matchExpressions[0].key",
        "qualified name",
    ),
    # -- validatePodAffinityTerm
    (_pod({"topologyKey": ""}), f"{P0}.topologyKey", "can not be empty"),
    (_pod({"topologyKey": "Bad Key"}), f"{P0}.topologyKey", "name part must consist"),
    (_pod({"topologyKey": ZONE, "namespaces": ["Default"]}), f"{P0}.namespaces[0]", "RFC 1123 label"),
    (
        _pod({"topologyKey": ZONE, "labelSelector": {"matchLabels": {"team": "a b"}}}),
        f"{P0}.labelSelector.matchLabels.team",
        "valid label value",
    ),
    (
        _pod({"topologyKey": ZONE, "labelSelector": {"matchLabels": {"-x": "a"}}}),
        f"{P0}.labelSelector.matchLabels.-x",
        "name part",
    ),
    (
        _pod({"topologyKey": ZONE, "labelSelector": {"matchExpressions": [_expr("team", "Gt", ["1"])]}}),
        f"{P0}.labelSelector.matchExpressions[0].operator",
        "not a valid",
    ),
    (
        _pod({"topologyKey": ZONE, "labelSelector": {"matchExpressions": [_expr("team", "In", [])]}}),
        f"{P0}.labelSelector.matchExpressions[0].values",
        "must be specified",
    ),
    (
        _pod({"topologyKey": ZONE, "labelSelector": {"matchExpressions": [_expr("team", "Exists", ["x"])]}}),
        f"{P0}.labelSelector.matchExpressions[0].values",
        "may not be",
    ),
    (
        _pod({"topologyKey": ZONE, "labelSelector": {"matchExpressions": [_expr("team", "In", ["a b"])]}}),
        f"{P0}.labelSelector.matchExpressions[0].values[0]",
        "label value",
    ),
    (
        _pod({"topologyKey": ZONE, "namespaceSelector": {"matchExpressions": [_expr("bad key", "Exists", None)]}}),
        f"{P0}.namespaceSelector.matchExpressions[0].key",
        "name part",
    ),
    # -- validateMatchLabelKeysAndMismatchLabelKeys (after the API server merges the pod's labels)
    (_pod({"topologyKey": ZONE, "matchLabelKeys": ["team"]}), f"{P0}.matchLabelKeys", "labelSelector is not set"),
    (_pod({"topologyKey": ZONE, "mismatchLabelKeys": ["team"]}), f"{P0}.mismatchLabelKeys", "labelSelector is not set"),
    (
        _pod({"topologyKey": ZONE, "labelSelector": SEL, "matchLabelKeys": ["bad key"]}),
        f"{P0}.matchLabelKeys[0]",
        "name part",
    ),
    (
        _pod({"topologyKey": ZONE, "labelSelector": SEL, "mismatchLabelKeys": ["a/b/c"]}),
        f"{P0}.mismatchLabelKeys[0]",
        "qualified name",
    ),
    (
        _pod({"topologyKey": ZONE, "labelSelector": SEL, "matchLabelKeys": ["x", "y"], "mismatchLabelKeys": ["y"]}),
        f"{P0}.matchLabelKeys[1]",
        "both matchLabelKeys and mismatchLabelKeys",
    ),
    (  # the pod carries kvpilot.dev/server: merged as `In (qwen)` next to the selector's own key
        _pod(
            {
                "topologyKey": ZONE,
                "labelSelector": {"matchLabels": {"kvpilot.dev/server": "x"}},
                "matchLabelKeys": ["kvpilot.dev/server"],
            }
        ),
        f"{P0}.matchLabelKeys[0]",
        "both matchLabelKeys and labelSelector",
    ),
    (
        _pod_pref(
            5,
            {
                "topologyKey": ZONE,
                "labelSelector": {"matchExpressions": [_expr("app.kubernetes.io/name", "Exists", None)]},
                "matchLabelKeys": ["app.kubernetes.io/name"],
            },
        ),
        f"{A0}.podAffinityTerm.matchLabelKeys[0]",
        "both matchLabelKeys and labelSelector",
    ),
    # -- validateWeightedPodAffinityTerms
    (_pod_pref(0, {"topologyKey": ZONE}), f"{A0}.weight", "1-100"),
    (_pod_pref(101, {"topologyKey": ZONE}), f"{A0}.weight", "1-100"),
    (_pod_pref(1, {"topologyKey": "a/b/c"}), f"{A0}.podAffinityTerm.topologyKey", "qualified name"),
]


@pytest.mark.parametrize(("affinity", "field", "words"), REFUSED, ids=range(len(REFUSED)))
def test_what_the_api_server_refuses_is_refused_naming_the_field(affinity, field, words):
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE, "affinity": affinity})
    assert info.value.field == field
    assert words in info.value.message


def test_a_pod_label_from_pod_labels_takes_part_in_the_match_label_keys_merge():
    term = {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"team": "ml"}}, "matchLabelKeys": ["team"]}
    parse_spec({**BASE, "affinity": _pod(term)})  # the pod has no `team` label: nothing merged
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE, "podLabels": {"team": "ml"}, "affinity": _pod(term)})
    assert info.value.field == f"{P0}.matchLabelKeys[0]"


def test_the_shipped_schema_is_kubernetes_1_37s_openapi():
    """The shape check reads kvpilot/data/k8s-affinity-v1.37.json: exactly kubernetes-validate's definitions."""
    assert affinity_schema() == json.loads(json.dumps(definitions_fragment())), (
        "regenerate: python -m tests.support.k8s_schema > operator/kvpilot/data/k8s-affinity-v1.37.json"
    )
    assert set(affinity_schema()["$defs"]) >= {
        "io.k8s.api.core.v1.Affinity",
        "io.k8s.api.core.v1.PodAffinityTerm",
        "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector",
    }
