"""``spec.env[].valueFrom`` checked as the API server checks a Pod's env on create, both sides of each rule.

Expected results are written out from kubernetes/kubernetes ``pkg/apis/core/validation/validation.go``
(``validateEnvVarValueFrom`` and the selectors' validators, commit 000f260), ``pkg/apis/core/pods/helpers.go``
``ConvertDownwardAPIFieldLabel``, ``pkg/fieldpath`` ``SplitMaybeSubscriptedPath``, apimachinery
``IsConfigMapKey`` and ``IsDNS1123Subdomain``, apimachinery ``resource.Quantity``'s canonical form for the
divisors, and the Kubernetes 1.37 OpenAPI ``EnvVarSource`` (kubernetes-validate's strict schema) for the
shape. Every accepted source is also rendered and the pod validated strictly by kubernetes-validate.
"""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from kvpilot.api import SpecError, parse_spec
from kvpilot.api.k8s_validation import canonical_unit_quantity, openapi_fragment
from kvpilot.render import render_objects
from tests.support.k8s_schema import ENV_VAR_SOURCE, definitions_fragment

BASE = {"model": "Qwen/Qwen2.5-1.5B-Instruct"}
VF = "spec.env[0].valueFrom"


def _spec(value_from, **var):
    return {**BASE, "env": [{"name": "X", "valueFrom": value_from, **var}]}


def _error(value_from, **var) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_spec(_spec(value_from, **var))
    assert "\n" not in str(info.value)
    return info.value


def _field(path, api_version=None):
    ref = {"fieldPath": path}
    if api_version is not None:
        ref["apiVersion"] = api_version
    return {"fieldRef": ref}


def _resource(resource, divisor=None, container=None):
    ref = {"resource": resource}
    if divisor is not None:
        ref["divisor"] = divisor
    if container is not None:
        ref["containerName"] = container
    return {"resourceFieldRef": ref}


ACCEPTED = [
    *[_field(p) for p in ("metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName")],
    *[_field(p) for p in ("spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP")],
    _field("status.podIPs", api_version="v1"),
    _field("spec.host"),  # old v1 clients' spelling, converted to spec.nodeName
    _field("metadata.labels['app.kubernetes.io/name']"),
    _field("metadata.annotations['Example.COM/Key']"),  # annotation keys are checked lower-cased
    _resource("limits.cpu"),
    _resource("requests.cpu", "1m"),
    _resource("limits.cpu", "1000m"),  # canonically 1
    _resource("requests.cpu", 1),  # a JSON number
    _resource("limits.memory", "1Mi"),
    _resource("limits.memory", "1024Ki"),  # canonically 1Mi
    _resource("requests.memory", "1k"),
    _resource("requests.memory", "1000"),  # canonically 1k
    _resource("limits.ephemeral-storage", "1Gi"),
    _resource("requests.ephemeral-storage", "1E"),
    _resource("limits.hugepages-2Mi", "1Mi"),
    _resource("requests.hugepages-1Gi"),
    _resource("limits.memory", "0"),  # a zero divisor is the unset one
    _resource("limits.cpu", container="vllm"),
    {"configMapKeyRef": {"name": "model-config", "key": "config.json"}},
    {"configMapKeyRef": {"name": "a.b-c", "key": "K_1-x.y", "optional": True}},
    {"secretKeyRef": {"name": "hf-token", "key": "token"}},
    {"secretKeyRef": {"name": "s", "key": "." + "k" * 252}},  # 253 characters, not starting with ..
    {"secretKeyRef": None, "fieldRef": {"fieldPath": "metadata.name"}},  # a JSON null is unset
]


@pytest.mark.parametrize("value_from", ACCEPTED, ids=[json.dumps(v)[:60] for v in ACCEPTED])
def test_accepted_sources_reach_the_pod_unchanged_and_validate_strictly(value_from):
    pod, _ = render_objects("qwen", "default", parse_spec(_spec(value_from)))
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["X"] == {"name": "X", "valueFrom": value_from}
    kubernetes_validate.validate(pod, "1.37", strict=True)


# Five valueFrom cases: each rendered with exit 0, and the API server refused the pod.
ISSUE = [
    ({}, VF, "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"),
    (_field("bogus"), f"{VF}.fieldRef.fieldPath", "error converting fieldPath: field label not supported: bogus"),
    (
        {"secretKeyRef": {"name": "Bad Name", "key": "token"}},
        f"{VF}.secretKeyRef.name",
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'",
    ),
    (
        {"secretKeyRef": {"name": "a", "key": "k"}, "fieldRef": {"fieldPath": "metadata.name"}},
        VF,
        "may not have more than one field specified at a time (got fieldRef, secretKeyRef)",
    ),
    ({"fieldRef": "1e-9999"}, f"{VF}.fieldRef", "must be of type object (got string)"),
]

# the shape (Kubernetes 1.37 OpenAPI)
SHAPE = [
    ISSUE[4],
    ("token", VF, 'must be a mapping (got "token")'),  # the model's own type check comes first
    ({"secretRef": {"name": "a"}}, f"{VF}.secretRef", 'unknown field "secretRef"'),
    ({"secretKeyRef": {"name": "a"}}, f"{VF}.secretKeyRef.key", "required field is missing"),
    ({"fieldRef": {}}, f"{VF}.fieldRef.fieldPath", "required field is missing"),
    ({"resourceFieldRef": {"divisor": "1"}}, f"{VF}.resourceFieldRef.resource", "required field is missing"),
    (_resource("limits.cpu", True), f"{VF}.resourceFieldRef.divisor", "must be of type string or number"),
    ({"configMapKeyRef": {"name": "a", "key": 7}}, f"{VF}.configMapKeyRef.key", "must be of type string"),
    ({"secretKeyRef": {"name": "a", "key": "k", "optional": "yes"}}, f"{VF}.secretKeyRef.optional", "boolean"),
]

REFUSED = [
    *ISSUE,
    *SHAPE[1:],
    # fieldRef
    (_field(""), f"{VF}.fieldRef.fieldPath", "required value"),
    (_field("metadata.name", "v2"), f"{VF}.fieldRef.fieldPath", "unsupported pod version: v2"),
    (_field("status.phase"), f"{VF}.fieldRef.fieldPath", 'Unsupported value: "status.phase": supported values:'),
    (_field("metadata.labels"), f"{VF}.fieldRef.fieldPath", 'Unsupported value: "metadata.labels"'),
    (_field("spec.nodeName['x']"), f"{VF}.fieldRef.fieldPath", "field label does not support subscript: spec.nodeName"),
    (_field("metadata.labels['a b']"), f"{VF}.fieldRef", "name part must consist of alphanumeric characters"),
    (_field("metadata.labels['']"), f"{VF}.fieldRef", "name part must be non-empty"),
    (_field("metadata.annotations['a/b/c']"), f"{VF}.fieldRef", "a qualified name must consist of"),
    (_field("metadata.labels['x"), f"{VF}.fieldRef.fieldPath", "field label not supported"),  # no closing ']
    (_field("metadata.labels['a[b]c']"), f"{VF}.fieldRef", '"a[b]c": name part'),  # split, then not a label key
    # resourceFieldRef
    (_resource(""), f"{VF}.resourceFieldRef.resource", "required value"),
    (_resource("limits.nvidia.com/gpu"), f"{VF}.resourceFieldRef.resource", 'Unsupported value: "limits.nvidia.com'),
    (_resource("limits.cpu", "2"), f"{VF}.resourceFieldRef.divisor", "only divisor's values 1m and 1 are supported"),
    (_resource("requests.cpu", "1k"), f"{VF}.resourceFieldRef.divisor", "with the cpu resource"),
    (_resource("limits.memory", "1m"), f"{VF}.resourceFieldRef.divisor", "with the memory resource"),
    (_resource("limits.memory", "1024"), f"{VF}.resourceFieldRef.divisor", "1024"),  # canonically 1024, not 1Ki
    (_resource("limits.memory", "1e3"), f"{VF}.resourceFieldRef.divisor", "memory"),  # canonically 1e3, not 1k
    (_resource("limits.memory", "2Mi"), f"{VF}.resourceFieldRef.divisor", "memory"),
    (_resource("limits.ephemeral-storage", "1m"), f"{VF}.resourceFieldRef.divisor", "local ephemeral storage"),
    (_resource("limits.hugepages-2Mi", "3"), f"{VF}.resourceFieldRef.divisor", "with the hugepages resource"),
    (_resource("limits.memory", "-1"), f"{VF}.resourceFieldRef.divisor", "memory"),
    (_resource("limits.memory", "abc"), f"{VF}.resourceFieldRef.divisor", "is not a Kubernetes quantity"),
    # configMapKeyRef / secretKeyRef
    ({"configMapKeyRef": {"key": "k"}}, f"{VF}.configMapKeyRef.name", "a lowercase RFC 1123 subdomain"),
    ({"configMapKeyRef": {"name": "", "key": "k"}}, f"{VF}.configMapKeyRef.name", "RFC 1123"),
    ({"secretKeyRef": {"name": "a" * 254, "key": "k"}}, f"{VF}.secretKeyRef.name", "no more than 253 characters"),
    ({"secretKeyRef": {"name": "a", "key": ""}}, f"{VF}.secretKeyRef.key", "required value"),
    ({"secretKeyRef": {"name": "a", "key": "a/b"}}, f"{VF}.secretKeyRef.key", "a valid config key must consist"),
    ({"secretKeyRef": {"name": "a", "key": "."}}, f"{VF}.secretKeyRef.key", "must not be '.'"),
    ({"secretKeyRef": {"name": "a", "key": ".."}}, f"{VF}.secretKeyRef.key", "must not be '..'"),
    ({"secretKeyRef": {"name": "a", "key": "..x"}}, f"{VF}.secretKeyRef.key", "must not start with '..'"),
    ({"secretKeyRef": {"name": "a", "key": "k" * 254}}, f"{VF}.secretKeyRef.key", "no more than 253 characters"),
    # kvpilot's own: the pod could not start
    (
        _resource("limits.cpu", container="sidecar"),
        f"{VF}.resourceFieldRef.containerName",
        'the pod\'s container is "vllm"',
    ),
    (
        {"fileKeyRef": {"volumeName": "home", "path": "app.env", "key": "X"}},
        f"{VF}.fileKeyRef",
        "not supported: its env file must be written into an emptyDir volume by an init container",
    ),
]


@pytest.mark.parametrize(("value_from", "field", "words"), REFUSED, ids=[json.dumps(r[0])[:60] for r in REFUSED])
def test_refused_sources_name_their_field(value_from, field, words):
    err = _error(value_from)
    assert err.field == field
    assert words in err.message


def test_a_source_beside_a_value_is_refused_and_an_empty_value_is_kvpilots_own_refusal():
    # the API server: "may not be specified when `value` is not empty"; kvpilot refuses a value of "" too
    assert _error({"secretKeyRef": {"name": "a", "key": "k"}}, value="x").field == "spec.env[0]"
    assert _error({"secretKeyRef": {"name": "a", "key": "k"}}, value="").message == "set value or valueFrom, not both"


def test_valuefrom_null_is_no_source():
    pod, _ = render_objects(
        "qwen", "default", parse_spec({**BASE, "env": [{"name": "X", "value": "1", "valueFrom": None}]})
    )
    assert {"name": "X", "value": "1"} in pod["spec"]["containers"][0]["env"]


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("1", "1"),
        ("1000m", "1"),
        ("0.001", "1m"),
        ("1000", "1k"),
        ("1e0", "1"),
        ("1e3", None),  # DecimalExponent keeps its form: 1e3
        ("1024", None),  # decimal SI: 1024
        ("1Ki", "1Ki"),
        ("1024Ki", "1Mi"),
        ("0.5Ki", None),  # 512, written as decimal SI
        ("0.9765625Ki", "1k"),  # 1000, below 1024: decimal SI
        ("1536Mi", None),
        ("1Ei", "1Ei"),
        ("1E", "1E"),
        ("0.0000000001", "1n"),  # rounded up to a multiple of 10^-9
        ("-1", None),
    ],
)
def test_the_canonical_form_of_a_divisor(text, canonical):
    """``Quantity.String()`` as apimachinery computes it, for the values the divisor rule compares."""
    assert canonical_unit_quantity(text) == canonical


def test_the_shipped_schema_is_kubernetes_1_37s_openapi():
    """The shape check reads kvpilot/data/k8s-envvarsource-v1.37.json: exactly kubernetes-validate's definitions."""
    assert openapi_fragment("envvarsource") == json.loads(json.dumps(definitions_fragment(ENV_VAR_SOURCE))), (
        "regenerate: python -m tests.support.k8s_schema io.k8s.api.core.v1.EnvVarSource"
        " > operator/kvpilot/data/k8s-envvarsource-v1.37.json"
    )
    assert set(openapi_fragment("envvarsource")["$defs"]) >= {
        "io.k8s.api.core.v1.EnvVarSource",
        "io.k8s.api.core.v1.ObjectFieldSelector",
        "io.k8s.api.core.v1.ResourceFieldSelector",
        "io.k8s.api.core.v1.ConfigMapKeySelector",
        "io.k8s.api.core.v1.SecretKeySelector",
        "io.k8s.api.core.v1.FileKeySelector",
    }


def test_kubernetes_validate_refuses_what_the_shape_check_refuses():
    """The shape half agrees with kubernetes-validate on the pod (the rules half is the API server's code)."""
    for value_from, _, _ in SHAPE:
        container = {"name": "vllm", "image": "i", "env": [{"name": "X", "valueFrom": value_from}]}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [container]}}
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(pod, "1.37", strict=True)
