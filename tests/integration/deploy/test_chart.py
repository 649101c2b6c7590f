"""charts/kvpilot with the real helm: lint, render every documented values combination, validate each
object strictly (custom resources against their CRDs), and check the chart renders what manifests/ holds.

The documented combinations are the chart's ci/*-values.yaml files (docs/install.md lists them).
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from tests.conftest import FIXTURES, REPO, require_tool
from tests.support.manifests import crd_schemas, load_docs, validation_errors

pytestmark = pytest.mark.helm

CHART = REPO / "charts" / "kvpilot"
MANIFESTS = REPO / "manifests"
NS = "kvpilot-system"
COMBINATIONS = [None, *sorted((CHART / "ci").glob("*-values.yaml"))]
KUBE_VERSIONS = ["1.30", kubernetes_validate.latest_version()]
CRDS = crd_schemas([*(CHART / "crds").glob("*.yaml"), *(FIXTURES / "crds" / "prometheus-operator").glob("*.yaml")])
HELM_LABELS = {
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
}


def combo_id(values: Path | None) -> str:
    return "default" if values is None else values.name.removesuffix("-values.yaml")


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([require_tool("helm"), *args], capture_output=True, text=True, timeout=120, check=False)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def render(values: Path | None = None, *sets: str) -> list[dict]:
    args = ["template", "kvpilot", str(CHART), "--namespace", NS]
    if values is not None:
        args += ["-f", str(values)]
    for item in sets:
        args += ["--set", item]
    return load_docs(helm(*args).stdout)


def find(docs: list[dict], kind: str, name: str | None = None, namespace: str | None = None) -> dict:
    (doc,) = [
        d
        for d in docs
        if d["kind"] == kind
        and (name is None or d["metadata"]["name"] == name)
        and (namespace is None or d["metadata"].get("namespace") == namespace)
    ]
    return doc


def manifest(path: str, kind: str) -> dict:
    return find(load_docs((MANIFESTS / path).read_text()), kind)


def rule_set(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def without_helm_labels(metadata: dict) -> dict:
    out = copy.deepcopy(metadata)
    out["labels"] = {k: v for k, v in out.get("labels", {}).items() if k not in HELM_LABELS}
    return out


@pytest.mark.parametrize("values", COMBINATIONS, ids=combo_id)
def test_helm_lint_strict(values):
    helm("lint", "--strict", str(CHART), *(["-f", str(values)] if values else []))


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values", COMBINATIONS, ids=combo_id)
def test_every_rendered_object_validates_strictly(values, kube_version):
    docs = render(values)
    assert docs
    for doc in docs:
        assert validation_errors(doc, kube_version, CRDS) == [], doc["metadata"]["name"]
    # the CRDs in crds/ too (helm installs them before the templates)
    for path in (CHART / "crds").glob("*.yaml"):
        for doc in load_docs(path.read_text()):
            assert validation_errors(doc, kube_version, CRDS) == []


def test_crds_are_identical_to_manifests_crd():
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    manifests = {p.name: p.read_bytes() for p in (MANIFESTS / "crd").glob("*.yaml")}
    assert chart == manifests, "charts/kvpilot/crds/ differs from manifests/crd/: run make chart"


def test_chart_files_mirror_manifests_monitoring():
    assert (CHART / "files" / "prometheus-rules.yaml").read_bytes() == (
        MANIFESTS / "monitoring" / "prometheus-rules.yaml"
    ).read_bytes(), "run make chart"
    chart = {p.name: p.read_bytes() for p in (CHART / "files" / "dashboards").glob("*.json")}
    manifests = {p.name: p.read_bytes() for p in (MANIFESTS / "monitoring").glob("*.json")}
    assert chart == manifests, "run make chart"
    assert manifests, "run make chart"


def test_default_values_render_the_plain_manifests():
    docs = render()
    for path, kind in [
        ("operator/10-serviceaccount.yaml", "ServiceAccount"),
        ("operator/30-clusterrolebinding.yaml", "ClusterRoleBinding"),
        ("operator/40-deployment.yaml", "Deployment"),
        ("operator/20-clusterrole.yaml", "ClusterRole"),
        ("monitoring/operator-metrics.yaml", "Service"),
    ]:
        want = manifest(path, kind)
        got = find(docs, kind, want["metadata"]["name"])
        # every label of the manifest, plus Helm's own
        assert without_helm_labels(got["metadata"]) == want["metadata"], path
        if kind == "ClusterRole":
            assert rule_set(got["rules"]) == rule_set(want["rules"])
        else:
            assert {k: v for k, v in got.items() if k != "metadata"} == {
                k: v for k, v in want.items() if k != "metadata"
            }, path
    assert {d["kind"] for d in docs} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service"}


def test_monitoring_values_render_manifests_monitoring():
    docs = render(CHART / "ci" / "monitoring-values.yaml")
    want = manifest("monitoring/operator-servicemonitor.yaml", "ServiceMonitor")
    got = find(docs, "ServiceMonitor")
    assert got["spec"] == want["spec"]
    assert without_helm_labels(got["metadata"]) == want["metadata"]
    want = manifest("monitoring/prometheusrule.yaml", "PrometheusRule")
    got = find(docs, "PrometheusRule")
    assert got["spec"] == want["spec"]
    assert got["metadata"]["name"] == want["metadata"]["name"]
    assert want["metadata"]["labels"].items() <= got["metadata"]["labels"].items()
    dashboards = find(docs, "ConfigMap")
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"  # the sidecar's default label
    assert json.loads(dashboards["data"]["grafana-dashboard.json"]) == json.loads(
        (MANIFESTS / "monitoring" / "grafana-dashboard.json").read_text()
    )
    pod_monitor = find(docs, "PodMonitor")
    # the labels kvpilot puts on every vLLM pod (kvpilot render manifests/examples/experiment.yaml)
    assert pod_monitor["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/managed-by": "kvpilot",
    }
    assert pod_monitor["spec"]["podMetricsEndpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]
    assert pod_monitor["spec"]["namespaceSelector"] == {"any": True}


def test_alert_hook_with_an_existing_secret_renders_manifests_monitoring_alert_hook():
    docs = render(None, "alertHook.enabled=true", "alertHook.auth.existingSecret=kvpilot-alert-hook-token")
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service"):
        want = manifest("monitoring/alert-hook.yaml", kind)
        got = find(docs, kind, "kvpilot-alert-hook")
        assert without_helm_labels(got["metadata"]) == want["metadata"], kind
        assert {k: v for k, v in got.items() if k != "metadata"} == {
            k: v for k, v in want.items() if k != "metadata"
        }, kind
    assert not [d for d in docs if d["kind"] == "Secret"]  # the user's Secret is not overwritten


def test_alert_hook_creates_its_secret_and_every_sink_flag():
    docs = render(CHART / "ci" / "alert-hook-values.yaml")
    secret = find(docs, "Secret")
    assert secret["metadata"]["name"] == "kvpilot-alert-hook-token"
    assert secret["stringData"] == {"token": "change-me", "grafana-token": "change-me-too"}
    command = find(docs, "Deployment", "kvpilot-alert-hook")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command == [
        "kvpilot",
        "alert-hook",
        "--prometheus=http://prometheus-operated.monitoring:9090",
        "--listen=0.0.0.0:8080",
        "--bearer-token-file=/etc/kvpilot/token/token",
        "--limits-from-cluster",
        "--sink=log",
        "--sink=kube-event",
        "--sink=grafana",
        "--sink=forward",
        "--grafana-url=http://grafana.monitoring:80",
        "--grafana-token-file=/etc/kvpilot/token/grafana-token",
        "--forward-url=http://collector.monitoring:8080/results",
    ]


def test_ha_values_equal_the_manifests_ha_patch():
    docs = render(CHART / "ci" / "ha-values.yaml")
    patch = yaml.safe_load((MANIFESTS / "ha" / "operator-patch.yaml").read_text())
    want = jsonpatch.apply_patch(manifest("operator/40-deployment.yaml", "Deployment"), patch)
    assert find(docs, "Deployment", "kvpilot-operator")["spec"] == want["spec"]
    peering = find(docs, "ClusterKopfPeering")
    assert (
        peering["metadata"]["name"] == manifest("ha/clusterkopfpeering.yaml", "ClusterKopfPeering")["metadata"]["name"]
    )


def test_namespaced_values_use_roles_and_a_kopf_peering_per_namespace():
    docs = render(CHART / "ci" / "namespaced-ha-values.yaml")
    cluster_role = find(docs, "ClusterRole", "kvpilot-operator")
    # only what has no namespace: nodes (pre-flight) and CRDs (kopf's discovery); no globs, no namespaces
    assert rule_set(cluster_role["rules"]) == {
        ("", "nodes", "get"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "get"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
    }
    full = rule_set(manifest("operator/20-clusterrole.yaml", "ClusterRole")["rules"])
    for ns in ("llm", "research"):
        role = find(docs, "Role", "kvpilot-operator", ns)
        # the cluster-wide rules minus what only an all-namespaces operator needs
        only_cluster_wide = {("", "namespaces", "list"), ("", "namespaces", "watch")}
        only_cluster_wide |= {("kopf.dev", "clusterkopfpeerings", v) for v in ("get", "list", "watch", "patch")}
        assert rule_set(role["rules"]) | rule_set(cluster_role["rules"]) == full - only_cluster_wide
        binding = find(docs, "RoleBinding", "kvpilot-operator", ns)
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kvpilot-operator", "namespace": NS}]
        assert find(docs, "KopfPeering", "kvpilot", ns)
    command = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[2:6] == ["--namespace=llm", "--namespace=research", "--peering=kvpilot", "--peering-lifetime=60"]
    assert not [arg for arg in command if arg.startswith("--priority")]  # one shared priority pauses every replica
    assert not [d for d in docs if d["kind"] == "ClusterKopfPeering"]


def test_a_namespace_glob_grants_the_namespaced_rules_cluster_wide():
    docs = render(CHART / "ci" / "namespace-glob-values.yaml")
    rules = rule_set(find(docs, "ClusterRole", "kvpilot-operator")["rules"])
    assert {("", "pods", "create"), ("", "namespaces", "list"), ("", "namespaces", "watch")} <= rules
    assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding")]


@pytest.mark.parametrize("values", COMBINATIONS, ids=combo_id)
def test_every_pod_is_restricted(values):
    for doc in render(values):
        if doc["kind"] != "Deployment":
            continue
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "runAsGroup": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        for container in pod["containers"]:
            assert container["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]},
            }
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert container["resources"]["requests"]
            assert container["resources"]["limits"]["memory"]


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["bogus=1"], "additional properties 'bogus' not allowed"),
        (["replicaCount=0"], "replicaCount"),
        (["watch.allNamespaces=false"], "watch.namespaces: list at least one namespace"),
        (["alertHook.enabled=true"], "alertHook.auth.token: set the bearer token"),
        (["alertHook.enabled=true", "alertHook.auth.token=t", "alertHook.sinks={grafana}"], "alertHook.grafanaUrl"),
        (["alertHook.enabled=true", "alertHook.auth.token=t", "alertHook.sinks={pager}"], "alertHook"),
        (["serviceMonitor.enabled=true", "metrics.enabled=false"], "serviceMonitor.enabled needs metrics.enabled"),
    ],
)
def test_bad_values_fail_naming_the_value(sets, message):
    args = ["template", "kvpilot", str(CHART)]
    for item in sets:
        args += ["--set", item]
    result = helm(*args, check=False)
    assert result.returncode != 0
    assert message in result.stderr


def _paths(values: dict, prefix: str = "") -> set[str]:
    out = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        out.add(path)
        if isinstance(value, dict) and value:
            out |= _paths(value, path + ".")
    return out


def _schema_paths(schema: dict, definitions: dict, prefix: str = "") -> set[str]:
    out = set()
    for key, sub in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        out.add(path)
        if "$ref" in sub:
            sub = definitions[sub["$ref"].rsplit("/", 1)[1]]
        out |= _schema_paths(sub, definitions, path + ".")
    return out


def test_values_schema_covers_every_value_and_no_more():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    schema_paths = _schema_paths(schema, schema["definitions"])
    # free-form maps (labels, annotations, requests) are typed by additionalProperties: their keys are data
    free_form = {"resources.requests", "resources.limits", "alertHook.resources.requests", "alertHook.resources.limits"}
    free_form |= {p for p in _paths(values) if p.rsplit(".", 1)[-1] in ("labels", "annotations")}
    value_paths = {p for p in _paths(values) if not any(p.startswith(f + ".") for f in free_form)}
    assert value_paths <= schema_paths, value_paths - schema_paths
    assert schema_paths <= value_paths | {p for p in schema_paths if any(p.startswith(f + ".") for f in free_form)}


def test_notes_print_the_first_commands():
    result = helm("install", "kvpilot", str(CHART), "--namespace", NS, "--dry-run=client")
    notes = result.stdout.split("NOTES:", 1)[1]
    assert f"kubectl -n {NS} rollout status deployment/kvpilot-operator" in notes
    assert "kubectl get vllmservers -A" in notes
    assert "nvidia.com/gpu.memory" in notes


def test_policy_values_become_the_operators_allow_list_flags():
    docs = render(CHART / "ci" / "no-metrics-values.yaml")
    command = find(docs, "Deployment", "kvpilot-operator")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[-4:] == [
        "--allowed-image=docker.io/vllm/vllm-openai:*",
        "--allowed-image=registry.example.com/vllm/*",
        "--allowed-service-account=vllm",
        "--verbose",
    ]
    # off by default: the default values render no allow-list flag
    default = find(render(None), "Deployment", "kvpilot-operator")["spec"]["template"]["spec"]["containers"][0]
    assert not [arg for arg in default["command"] if arg.startswith("--allowed-")]
