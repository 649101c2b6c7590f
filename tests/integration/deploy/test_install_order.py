"""The plain manifests install on an empty cluster with one real `kubectl apply` (sandbox API, strict).

kubectl applies `-f DIR` arguments in the order given and each directory's files in lexical name order
(kubectl's `resource.Builder` walks the directory with Go's `filepath.Walk`, which sorts names), and
`-k DIR` in kustomize's resource order. Namespaced objects created before their namespace fail with
`namespaces "..." not found`, which the sandbox answers like the API server (the negative control below
shows it does).
"""

from __future__ import annotations

import subprocess

import pytest

from kvpilot.sandbox import SandboxCluster
from tests.conftest import REPO, require_tool

NS = "kvpilot-system"
INSTALL = ["-f", "manifests/crd/", "-f", "manifests/operator/"]
CRDS = {"vllmservers.kvpilot.dev", "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"}


@pytest.fixture
def cluster(tmp_path):
    with SandboxCluster(strict=True) as sandbox:
        # kubectl asks for the OpenAPI documents to compute a patch of an existing object and falls back
        # without them; the sandbox publishes none and answers 404 for them (not a strict-mode surprise).
        sandbox.kubeconfig = sandbox.write_kubeconfig(tmp_path / "kubeconfig")
        yield sandbox


def kubectl(cluster, *args: str) -> subprocess.CompletedProcess:
    # --validate=false: the sandbox serves no OpenAPI schema; tests/unit/api/test_manifests.py validates
    # every object strictly with kubernetes-validate instead.
    return subprocess.run(
        [require_tool("kubectl"), "--kubeconfig", str(cluster.kubeconfig), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def apply(cluster, *args: str) -> subprocess.CompletedProcess:
    return kubectl(cluster, "apply", "--validate=false", *args)


def assert_installed(cluster) -> None:
    assert cluster.get("v1/namespaces", None, NS) is not None
    assert cluster.get("v1/serviceaccounts", NS, "kvpilot-operator") is not None
    assert cluster.get("rbac.authorization.k8s.io/v1/clusterroles", None, "kvpilot-operator") is not None
    assert cluster.get("rbac.authorization.k8s.io/v1/clusterrolebindings", None, "kvpilot-operator") is not None
    assert cluster.get("apps/v1/deployments", NS, "kvpilot-operator") is not None
    crds = {c["metadata"]["name"] for c in cluster.list("apiextensions.k8s.io/v1/customresourcedefinitions")}
    assert crds == CRDS


def test_one_kubectl_apply_f_installs_on_an_empty_cluster(cluster):
    result = apply(cluster, *INSTALL)
    assert result.returncode == 0, result.stderr
    # 3 CRDs + namespace, service account, cluster role, binding, deployment: each created once
    assert result.stdout.count(" created") == 8, result.stdout
    assert_installed(cluster)


def test_one_kubectl_apply_k_installs_on_an_empty_cluster(cluster):
    result = apply(cluster, "-k", "manifests/")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(" created") == 8, result.stdout
    assert_installed(cluster)


def test_a_namespaced_object_before_its_namespace_fails(cluster):
    # negative control: the ordering the old layout had (ServiceAccount before the Namespace)
    result = apply(cluster, "-f", "manifests/operator/10-serviceaccount.yaml", "-f", "manifests/operator/")
    assert result.returncode != 0
    assert f'namespaces "{NS}" not found' in result.stderr


def test_reapplying_changes_nothing(cluster):
    assert apply(cluster, *INSTALL).returncode == 0
    result = apply(cluster, *INSTALL)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(" unchanged") == 8, result.stdout


def test_ha_adds_the_peering_object_and_two_peering_replicas(cluster):
    assert apply(cluster, *INSTALL).returncode == 0
    result = apply(cluster, "-f", "manifests/ha/clusterkopfpeering.yaml")
    assert result.returncode == 0, result.stderr
    result = kubectl(
        cluster, "-n", NS, "patch", "deployment", "kvpilot-operator", "--type", "json",
        "--patch-file", "manifests/ha/operator-patch.yaml",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert cluster.get("kopf.dev/v1/clusterkopfpeerings", None, "kvpilot") is not None
    deployment = cluster.get("apps/v1/deployments", NS, "kvpilot-operator")
    assert deployment["spec"]["replicas"] == 2
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--peering=kvpilot" in command
    assert "--standalone" not in command
