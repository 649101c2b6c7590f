"""manifests/: every object validates strictly; RBAC is least privilege; the Deployment runs the operator."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.support.manifests import crd_schemas, validation_errors

#: Kubernetes 1.30 and the newest version kubernetes-validate knows (1.37 with kubernetes-validate 1.37.0).
KUBE_VERSIONS = ["1.30", kubernetes_validate.latest_version()]

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = REPO / "manifests"
K8S_FILES = sorted(
    p for d in ("crd", "operator", "ha") for p in (MANIFESTS / d).glob("*.yaml") if p.name != "operator-patch.yaml"
)


CRDS = crd_schemas((MANIFESTS / "crd").glob("*.yaml"))


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("path", K8S_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_manifest_validates_strictly(path, kube_version):
    for doc in docs(path):
        assert validation_errors(doc, kube_version, CRDS) == []


def test_a_custom_resource_with_an_unknown_field_is_an_error():
    (peering,) = docs(MANIFESTS / "ha" / "clusterkopfpeering.yaml")
    assert validation_errors({**peering, "spec": {"x": 1}}, KUBE_VERSIONS[0], CRDS) == ["spec: unknown top-level field"]
    bad_deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {"replica": 1}}
    assert validation_errors(bad_deployment, KUBE_VERSIONS[0], CRDS)


def test_the_ha_patch_turns_the_deployment_into_two_peering_replicas():
    (deployment,) = docs(MANIFESTS / "operator" / "40-deployment.yaml")
    patch = yaml.safe_load((MANIFESTS / "ha" / "operator-patch.yaml").read_text())
    # the patch replaces command[3], which must be --standalone in the base
    assert deployment["spec"]["template"]["spec"]["containers"][0]["command"][3] == "--standalone"
    assert patch == [
        {"op": "replace", "path": "/spec/replicas", "value": 2},
        {"op": "replace", "path": "/spec/template/spec/containers/0/command/3", "value": "--peering=kvpilot"},
        # kopf's default lifetime; no --priority (replicas sharing one would all pause)
        {"op": "add", "path": "/spec/template/spec/containers/0/command/4", "value": "--peering-lifetime=60"},
    ]


def test_expected_files_exist():
    names = {f"{p.parent.name}/{p.name}" for p in K8S_FILES}
    assert {
        "crd/vllmservers.yaml",
        "crd/kopfpeerings.yaml",
        "operator/00-namespace.yaml",
        "operator/10-serviceaccount.yaml",
        "operator/20-clusterrole.yaml",
        "operator/30-clusterrolebinding.yaml",
        "operator/40-deployment.yaml",
        "ha/clusterkopfpeering.yaml",
    } <= names
    assert {p.name for p in (MANIFESTS / "examples").glob("*.yaml")} == {
        "experiment.yaml",
        "fp8-long-context.yaml",
        "tensor-parallel.yaml",
    }


def rules() -> dict[tuple[str, str], set[str]]:
    (role,) = docs(MANIFESTS / "operator" / "20-clusterrole.yaml")
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "resourceNames" not in rule
        assert "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def test_rbac_is_exactly_what_the_operator_needs():
    assert rules() == {
        ("kvpilot.dev", "vllmservers"): {"get", "list", "watch", "patch"},
        ("kvpilot.dev", "vllmservers/status"): {"get", "patch"},
        ("", "pods"): {"get", "list", "watch", "create", "delete"},
        ("", "pods/log"): {"get"},
        # the controller reads the Service and creates it when missing (read_namespaced_service,
        # create_namespaced_service): no list/watch/patch
        ("", "services"): {"get", "create"},
        ("", "events"): {"create", "patch"},
        ("", "configmaps"): {"get"},
        # the pre-flight reads the scheduled pod's node by name (read_node): get only
        ("", "nodes"): {"get"},
        # kopf serves namespace globs (`--namespace 'llm-*'`, advertised by `kvpilot operator --help`)
        # by listing and watching namespaces (docs.kopf.dev, "Scopes")
        ("", "namespaces"): {"list", "watch"},
        ("apiextensions.k8s.io", "customresourcedefinitions"): {"get", "list", "watch"},
        ("kopf.dev", "clusterkopfpeerings"): {"get", "list", "watch", "patch"},
        ("kopf.dev", "kopfpeerings"): {"get", "list", "watch", "patch"},
    }


def test_rbac_has_no_wildcards_and_no_secrets():
    (role,) = docs(MANIFESTS / "operator" / "20-clusterrole.yaml")
    for rule in role["rules"]:
        assert "*" not in rule["verbs"]
        assert "*" not in rule["resources"]
        assert "*" not in rule["apiGroups"]
        assert "secrets" not in rule["resources"]
    assert not any("delete" in verbs for (g, r), verbs in rules().items() if r != "pods")


def test_binding_points_at_the_operator_account():
    (binding,) = docs(MANIFESTS / "operator" / "30-clusterrolebinding.yaml")
    (account,) = docs(MANIFESTS / "operator" / "10-serviceaccount.yaml")
    (deployment,) = docs(MANIFESTS / "operator" / "40-deployment.yaml")
    assert binding["roleRef"]["name"] == "kvpilot-operator"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": account["metadata"]["namespace"]}
    ]
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
    assert deployment["metadata"]["namespace"] == account["metadata"]["namespace"]


def test_deployment_runs_the_operator_non_root_with_kopf_liveness():
    (deployment,) = docs(MANIFESTS / "operator" / "40-deployment.yaml")
    pod = deployment["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["command"][:4] == ["kvpilot", "operator", "--all-namespaces", "--standalone"]
    assert "--liveness=http://0.0.0.0:8080/healthz" in c["command"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {"name": "health", "containerPort": 8080, "protocol": "TCP"} in c["ports"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert c["resources"]["requests"]
    assert c["resources"]["limits"]["memory"]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
