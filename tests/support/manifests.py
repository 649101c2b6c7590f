"""Strict validation of rendered Kubernetes objects: built-in kinds and custom resources.

Built-in kinds go through kubernetes-validate with ``strict=True`` (unknown fields are errors).
Custom resources have no schema there: they are checked against their CRD's ``openAPIV3Schema``
the way the API server treats them (kvpilot.sandbox.semantics: jsonschema validation of spec and
status, and structural pruning — a field pruning would drop is reported as unknown).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from kvpilot.sandbox.semantics import prune, schema_errors


def load_docs(text: str) -> list[dict[str, Any]]:
    """The non-empty YAML documents of ``text``."""
    return [d for d in yaml.safe_load_all(text) if d]


def crd_schemas(paths: Iterable[Path]) -> dict[tuple[str, str], dict[str, Any]]:
    """``{(apiVersion, kind): openAPIV3Schema}`` for every served version of the CRDs in ``paths``."""
    out = {}
    for path in paths:
        for crd in load_docs(path.read_text()):
            if crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                out[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = version["schema"][
                    "openAPIV3Schema"
                ]
    return out


def validation_errors(doc: dict[str, Any], kube_version: str, crds: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """Errors of one object: [] when it is valid (strict). A custom resource without a CRD is an error."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in crds:
        schema = crds[key]
        errors = schema_errors(doc, schema)
        for part in ("spec", "status"):
            sub = (schema.get("properties") or {}).get(part)
            if part in doc and sub is not None and prune(doc[part], sub) != doc[part]:
                errors.append(f"{part}: unknown fields (pruned by the API server)")
        extra = set(doc) - {"apiVersion", "kind", "metadata", *(schema.get("properties") or {})}
        errors += [f"{field}: unknown top-level field" for field in sorted(extra)]
        return errors
    try:
        kubernetes_validate.validate(doc, kube_version, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return [f"{key}: neither a built-in kind nor a custom resource with a known CRD"]
    except kubernetes_validate.ValidationError as exc:
        return [f"{key} {doc.get('metadata', {}).get('name')}: {exc.message}"]
    return []
