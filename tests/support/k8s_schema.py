"""Kubernetes OpenAPI fragments taken from kubernetes-validate's strict JSON schemas.

``python -m tests.support.k8s_schema > operator/kvpilot/data/k8s-affinity-v1.37.json`` writes the
``io.k8s.api.core.v1.Affinity`` definition and every definition it references (descriptions dropped)
from kubernetes-validate 1.37.0's ``v1.37.0-local-strict/_definitions.json`` (generated from the
Kubernetes 1.37 OpenAPI, ``additionalProperties: false`` added everywhere); with the argument
``io.k8s.api.core.v1.EnvVarSource`` it writes ``operator/kvpilot/data/k8s-envvarsource-v1.37.json``.
kvpilot checks ``spec.affinity``'s and ``spec.env[].valueFrom``'s shapes
against them; ``tests/unit/api/test_affinity.py`` and ``tests/unit/api/test_value_from.py`` check the
shipped files are still exactly these extractions.
"""

from __future__ import annotations

import json
import re
import sys
from importlib import resources
from typing import Any

AFFINITY = "io.k8s.api.core.v1.Affinity"
ENV_VAR_SOURCE = "io.k8s.api.core.v1.EnvVarSource"


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
    print(json.dumps(definitions_fragment(*sys.argv[1:2]), indent=1, sort_keys=True))
