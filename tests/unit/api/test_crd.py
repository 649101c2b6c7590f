"""The CRD: generated from the models, structural, complete, committed without drift."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from kvpilot.api import VLLMServerSpec, VLLMServerStatus
from kvpilot.api.crd import crd_manifest, crd_yaml, structural

#: Kubernetes 1.30 and the newest version kubernetes-validate knows (1.37 with kubernetes-validate 1.37.0).
KUBE_VERSIONS = ["1.30", kubernetes_validate.latest_version()]

REPO = Path(__file__).resolve().parents[3]
CRD_FILE = REPO / "manifests" / "crd" / "vllmservers.yaml"
EXAMPLES = sorted((REPO / "manifests" / "examples").glob("*.yaml"))


def version() -> dict:
    return crd_manifest()["spec"]["versions"][0]


def schema() -> dict:
    return version()["schema"]["openAPIV3Schema"]


def walk(node: dict, path: str = ""):
    """Every schema node with its path."""
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def test_committed_crd_matches_the_models():
    assert CRD_FILE.read_text() == crd_yaml(), "manifests/crd/vllmservers.yaml drifted: run `make crd`"


def test_names_group_version_scope_and_subresource():
    crd = crd_manifest()
    assert crd["metadata"]["name"] == "vllmservers.kvpilot.dev"
    assert crd["spec"]["group"] == "kvpilot.dev"
    assert crd["spec"]["scope"] == "Namespaced"
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["singular"], names["shortNames"]) == (
        "VLLMServer",
        "vllmservers",
        "vllmserver",
        ["vllms"],
    )
    v = version()
    assert (v["name"], v["served"], v["storage"], v["subresources"]) == ("v1alpha1", True, True, {"status": {}})


def test_printer_columns():
    cols = {c["name"]: (c["jsonPath"], c["type"]) for c in version()["additionalPrinterColumns"]}
    assert cols == {
        "Model": (".spec.model", "string"),
        "Phase": (".status.phase", "string"),
        "KV Tokens": (".status.kvCacheTokens", "integer"),
        "Max Concurrency": (".status.maxConcurrency", "number"),
        "Expires": (".status.expiresAt", "date"),
        "Age": (".metadata.creationTimestamp", "date"),
    }


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_crd_validates_strictly(kube_version):
    kubernetes_validate.validate(yaml.safe_load(CRD_FILE.read_text()), kube_version, strict=True)


def test_schema_is_structural():
    for path, node in walk(schema()):
        assert "$ref" not in node, path
        assert "$defs" not in node, path
        assert "allOf" not in node, path
        assert "oneOf" not in node, path
        assert "title" not in node, path
        assert "nullable" not in node, path
        if "anyOf" in node:  # only quantities: int-or-string
            assert node.get("x-kubernetes-int-or-string") is True, path
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        else:
            assert "type" in node, f"{path} has no type"
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True, path
        if node.get("type") == "object" and "properties" not in node and "additionalProperties" not in node:
            assert path == ".metadata" or node.get("x-kubernetes-preserve-unknown-fields") is True, path


def test_every_spec_and_status_field_has_a_description():
    for root in ("spec", "status"):
        for path, node in walk(schema()["properties"][root], root):
            if path.endswith(("{}", "[]")) and node.get("type") != "object":
                continue  # scalar map values and list items are described by their map or list
            assert node.get("description"), f"{path} has no description"


def test_preserve_unknown_fields_only_where_needed():
    kept = {p for p, n in walk(schema()) if n.get("x-kubernetes-preserve-unknown-fields")}
    # status.kopf.progress: kopf's per-handler records (kopf's own schema-less structure)
    assert kept == {".spec.affinity", ".spec.env[].valueFrom", ".status.kopf.progress"}


def test_bounds_and_defaults_in_the_schema():
    spec = schema()["properties"]["spec"]
    engine = spec["properties"]["engine"]["properties"]
    gmu = engine["gpuMemoryUtilization"]
    assert (gmu["type"], gmu["minimum"], gmu["exclusiveMinimum"], gmu["maximum"]) == ("number", 0, True, 1)
    for name in ("maxModelLen", "maxNumSeqs", "maxNumBatchedTokens", "tensorParallelSize"):
        assert (engine[name]["type"], engine[name]["minimum"]) == ("integer", 1), name
    assert spec["properties"]["resources"]["properties"]["gpus"]["minimum"] == 1
    ttl = spec["properties"]["ttlSeconds"]
    assert (ttl["minimum"], ttl["default"]) == (60, 3600)
    assert spec["properties"]["preflight"]["enum"] == ["warn", "enforce", "off"]
    assert spec["properties"]["preflight"]["default"] == "warn"
    assert engine["kvCacheDtype"]["enum"][:5] == ["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"]
    assert spec["properties"]["kvOffload"]["properties"]["backend"]["enum"] == ["lmcache", "native"]
    assert spec["properties"]["modelConfigRef"]["properties"]["key"]["default"] == "config.json"
    assert spec["properties"]["resources"]["properties"]["gpuMemory"]["x-kubernetes-int-or-string"] is True
    assert spec["required"] == ["model"]


def test_every_status_field_is_declared():
    status = schema()["properties"]["status"]["properties"]
    for field in VLLMServerStatus.model_fields.values():
        assert field.alias in status, field.alias
    expected = {
        "phase",
        "conditions",
        "observedGeneration",
        "podName",
        "serviceName",
        "endpoint",
        "startedAt",
        "expiresAt",
        "kvCacheTokens",
        "maxConcurrency",
        "message",
        "specHash",
    }
    assert expected <= set(status)
    assert status["phase"]["enum"] == ["Pending", "Loading", "Ready", "Failed", "Expired", "Invalid"]
    cond = status["conditions"]["items"]
    assert set(cond["properties"]) == {
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
        "observedGeneration",
    }
    assert cond["required"] == ["type", "status"]
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]


def test_every_spec_field_is_declared():
    spec = schema()["properties"]["spec"]["properties"]
    assert {f.alias for f in VLLMServerSpec.model_fields.values()} == set(spec)


def _validator():
    return jsonschema.Draft4Validator(schema())


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate_against_the_crd_schema(path):
    doc = yaml.safe_load(path.read_text())
    errors = sorted(_validator().iter_errors(doc), key=str)
    assert not errors, [e.message for e in errors]


@pytest.mark.parametrize(
    "patch",
    [
        {"engine": {"gpuMemoryUtilization": 0}},
        {"engine": {"gpuMemoryUtilization": 1.2}},
        {"engine": {"maxNumSeqs": 0}},
        {"ttlSeconds": 30},
        {"engine": {"kvCacheDtype": "fp4"}},
        {"resources": {"memory": "six gigs"}},
        {"preflight": "maybe"},
    ],
)
def test_the_schema_itself_rejects_bad_values(patch):
    doc = {
        "apiVersion": "kvpilot.dev/v1alpha1",
        "kind": "VLLMServer",
        "metadata": {"name": "x"},
        "spec": {"model": "m", **patch},
    }
    assert list(_validator().iter_errors(doc))


def test_structural_conversion_rules():
    defs = {"Inner": {"type": "object", "title": "Inner", "properties": {"a": {"type": "integer", "title": "A"}}}}
    node = {"anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}], "default": None, "description": "d"}
    assert structural(node, defs) == {"description": "d", "type": "object", "properties": {"a": {"type": "integer"}}}
    assert structural({"type": "number", "exclusiveMinimum": 0}) == {
        "type": "number",
        "exclusiveMinimum": True,
        "minimum": 0,
    }
    assert structural({"type": "object", "additionalProperties": True}) == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    with pytest.raises(ValueError, match="no structural form for a union of 2 types"):
        structural({"anyOf": [{"type": "integer"}, {"type": "boolean"}]})


def test_missing_status_fields_names_what_an_older_crd_lacks():
    from kvpilot.api.crd import crd_manifest, missing_status_fields

    assert missing_status_fields(crd_manifest()) == []
    # the previous release's CRD: the same schema without status.kopf (kopf's record was in annotations)
    older = crd_manifest()
    del older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["kopf"]
    assert missing_status_fields(older) == ["status.kopf"]
    # a status that keeps unknown fields is never pruned; a CRD without v1alpha1 is kopf's to report
    older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    assert missing_status_fields(older) == []
    assert missing_status_fields({"spec": {"versions": [{"name": "v1beta1"}]}}) == []
