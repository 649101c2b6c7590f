"""Kubernetes OpenAPI fragments taken from kubernetes-validate's strict JSON schemas.

``python -m tests.support.k8s_schema > operator/kvpilot/data/k8s-affinity-v1.37.json`` writes the
``io.k8s.api.core.v1.Affinity`` definition and every definition it references (descriptions dropped)
from kubernetes-validate 1.37.0's ``v1.37.0-local-strict/_definitions.json`` (generated from the
Kubernetes 1.37 OpenAPI, ``additionalProperties: false`` added everywhere). kvpilot checks
``spec.affinity``'s shape against it; ``tests/unit/api/test_affinity.py`` checks the shipped file is
still exactly this extraction.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

AFFINITY = "io.k8s.api.core.v1.Affinity"


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def definitions_fragment(root: str = AFFINITY, version: str = "1.37") -> dict[str, Any]:
    """``{"root": root, "kubernetesVersion": version, "$defs": {name: schema}}`` for ``root`` and its references."""
    path = resources.files("kubernetes_validate") / "kubernetes-json-schema" / f"v{version}.0-local-strict"
    defs = json.loads((path / "_definitions.json").read_text())["$defs"]
    out: dict[str, Any] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out[name] = _strip(defs[name])
        todo += re.findall(r"#/\$defs/([\w.\-]+)", json.dumps(defs[name]))
    return {"root": root, "kubernetesVersion": version, "$defs": dict(sorted(out.items()))}


if __name__ == "__main__":
    print(json.dumps(definitions_fragment(), indent=1, sort_keys=True))
