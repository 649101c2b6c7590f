"""The VLLMServer CustomResourceDefinition, generated from the pydantic models.

``python -m kvpilot.api.crd`` prints it; ``manifests/crd/vllmservers.yaml`` is that output
(``make crd``), and a test fails when the two drift apart.

pydantic emits JSON Schema 2020-12 (``$ref``/``$defs``, ``anyOf`` with ``null`` for optional
fields, numeric ``exclusiveMinimum``); a CRD needs a *structural* OpenAPI v3.0 schema
(Kubernetes docs, "Specifying a structural schema": every node typed, no ``$ref``, ``anyOf``
only beside ``x-kubernetes-int-or-string``, boolean ``exclusiveMinimum``). :func:`structural`
converts one into the other.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping
from typing import Any

import yaml

from kvpilot.api.constants import CRD_NAME, GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION
from kvpilot.api.models import VLLMServerSpec, VLLMServerStatus

#: JSON-Schema keywords a CRD schema keeps (others, e.g. ``title``, are dropped).
_KEEP = {
    "description",
    "type",
    "format",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "required",
    "default",
}


def structural(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:  # noqa: C901
    """Convert one pydantic JSON-Schema node into a Kubernetes structural-schema node.

    - ``$ref`` is inlined from ``defs`` (sibling keys such as ``description`` win);
    - ``anyOf: [X, {type: null}]`` (an optional field) becomes ``X``;
    - ``x-kubernetes-int-or-string`` nodes keep their ``anyOf`` of integer and string;
    - ``additionalProperties: true`` (``dict[str, Any]``) becomes
      ``x-kubernetes-preserve-unknown-fields: true``; ``additionalProperties: false`` is dropped;
    - numeric ``exclusiveMinimum: v`` becomes ``minimum: v, exclusiveMinimum: true``;
    - only scalar defaults are kept (a ``null`` default means "unset": none is emitted).
    """
    defs = defs if defs is not None else schema.get("$defs", {})
    node = dict(schema)
    if "$ref" in node:
        target = copy.deepcopy(defs[node.pop("$ref").rsplit("/", 1)[-1]])
        target.update({k: v for k, v in node.items() if k != "$defs"})
        node = target
    if "allOf" in node and len(node["allOf"]) == 1:
        inner = node.pop("allOf")[0]
        return structural({**inner, **node}, defs)
    if node.get("x-kubernetes-int-or-string"):
        either = {k: v for k, v in node.items() if k in _KEEP or k.startswith("x-kubernetes-")}
        either["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        return _ordered(either)
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"no structural form for a union of {len(options)} types: {options}")
        merged = dict(options[0])
        merged.update({k: v for k, v in node.items() if k not in {"default"} or v is not None})
        return structural(merged, defs)

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-"):
            out[key] = value
        elif key == "default":
            if isinstance(value, (str, int, float, bool)):
                out[key] = value
        elif key == "exclusiveMinimum" and not isinstance(value, bool):
            out["minimum"], out["exclusiveMinimum"] = value, True
        elif key == "exclusiveMaximum" and not isinstance(value, bool):
            out["maximum"], out["exclusiveMaximum"] = value, True
        elif key in _KEEP:
            out[key] = value
    if "properties" in node:
        out["type"] = "object"
        out["properties"] = {name: structural(sub, defs) for name, sub in node["properties"].items()}
    additional = node.get("additionalProperties")
    if additional is True or (node.get("type") == "object" and "properties" not in node and additional is None):
        out["x-kubernetes-preserve-unknown-fields"] = True
    elif isinstance(additional, dict):
        out["additionalProperties"] = structural(additional, defs)
    if "items" in node:
        out["items"] = structural(node["items"], defs)
    if out.get("type") == "object" and "default" in out:
        out.pop("default")
    return _ordered(out)


_ORDER = ("description", "type", "format", "enum", "default")


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    """Keys in a stable, readable order: description and type first, nested schemas last."""
    last = ("required", "properties", "additionalProperties", "items")
    head = [k for k in _ORDER if k in node]
    tail = [k for k in last if k in node]
    middle = sorted(k for k in node if k not in head and k not in tail)
    return {k: node[k] for k in head + middle + tail}


def spec_schema() -> dict[str, Any]:
    """The structural schema of ``spec`` (from :class:`VLLMServerSpec`)."""
    return structural(VLLMServerSpec.model_json_schema(by_alias=True, mode="validation"))


def status_schema() -> dict[str, Any]:
    """The structural schema of ``status`` (from :class:`VLLMServerStatus`); every field the operator
    writes is declared, because a real API server prunes undeclared status fields.
    """
    return structural(VLLMServerStatus.model_json_schema(by_alias=True, mode="validation"))


def missing_status_fields(installed: Mapping[str, Any]) -> list[str]:
    """``status.<field>`` paths this release's CRD declares and ``installed`` does not, in version ``VERSION``.

    ``installed`` is a CustomResourceDefinition as the API server returns it (JSON). A real API
    server prunes status fields the CRD does not declare (Kubernetes docs, "Field pruning"), so an
    operator that keeps a field there (kopf's record in ``status.kopf``) next to an older CRD loses
    it at every write. Empty when all are declared, when ``status`` keeps unknown fields
    (``x-kubernetes-preserve-unknown-fields``) or when ``installed`` has no ``VERSION`` (kopf
    reports a resource it cannot find itself).
    """
    for version in (installed.get("spec") or {}).get("versions") or []:
        if version.get("name") != VERSION:
            continue
        root = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        status = (root.get("properties") or {}).get("status") or {}
        if status.get("x-kubernetes-preserve-unknown-fields"):
            return []
        declared = status.get("properties") or {}
        return [f"status.{field}" for field in status_schema()["properties"] if field not in declared]
    return []


def crd_manifest() -> dict[str, Any]:
    """The ``apiextensions.k8s.io/v1`` CustomResourceDefinition of VLLMServer.

    Group ``kvpilot.dev``, version ``v1alpha1`` (served, storage), plural ``vllmservers``,
    short name ``vllms``, namespaced, ``/status`` subresource, printer columns model, phase,
    KV tokens, max concurrency, expires and age.
    """
    spec = spec_schema()
    status = status_schema()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {"app.kubernetes.io/name": "kvpilot", "app.kubernetes.io/part-of": "kvpilot"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["kvpilot"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {
                            "name": "Model",
                            "type": "string",
                            "jsonPath": ".spec.model",
                            "description": "Hugging Face model id or path.",
                        },
                        {
                            "name": "Phase",
                            "type": "string",
                            "jsonPath": ".status.phase",
                            "description": "Pending, Loading, Ready, Failed, Expired or Invalid.",
                        },
                        {
                            "name": "KV Tokens",
                            "type": "integer",
                            "jsonPath": ".status.kvCacheTokens",
                            "description": "KV cache capacity in tokens, from vLLM's startup log.",
                        },
                        {
                            "name": "Max Concurrency",
                            "type": "number",
                            "jsonPath": ".status.maxConcurrency",
                            "description": "Requests of maxModelLen tokens that fit at once.",
                        },
                        {
                            "name": "Expires",
                            "type": "date",
                            "jsonPath": ".status.expiresAt",
                            "description": "When the pod's activeDeadlineSeconds ends it.",
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "VLLMServer runs one vLLM OpenAI-compatible server as a bare GPU Pod plus a "
                            "Service on port 8000; the pod ends itself after spec.ttlSeconds.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string", "description": "APIVersion: kvpilot.dev/v1alpha1."},
                                "kind": {"type": "string", "description": "Kind: VLLMServer."},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def crd_yaml() -> str:
    """The CRD as the YAML text committed in ``manifests/crd/vllmservers.yaml``."""
    header = "# Generated by `python -m kvpilot.api.crd` (make crd) from kvpilot/api/models.py. Do not edit.\n"
    return header + yaml.safe_dump(crd_manifest(), sort_keys=False, width=110)


def main() -> None:
    """Print the CRD YAML to stdout."""
    sys.stdout.write(crd_yaml())


if __name__ == "__main__":
    main()
