"""The chart's alert hook with the real helm: the namespaces it may diagnose (its own list, else the
operator's), its RBAC scoped to them, Prometheus credentials from a Secret (never in the URL), /metrics on
a port of its own or behind the token, the NetworkPolicy, and NOTES' warning for plain-value tokens.
Every ci/*-values.yaml, this file's included, is also validated strictly by tests/integration/deploy.
"""

from __future__ import annotations

import pytest

from tests.integration.deploy.test_chart import CHART, NS, find, helm, render

pytestmark = pytest.mark.helm

LOCKED = CHART / "ci" / "alert-hook-locked-down-values.yaml"


def _container(docs: list[dict]) -> dict:
    return find(docs, "Deployment", "kvpilot-alert-hook")["spec"]["template"]["spec"]["containers"][0]


def test_the_locked_down_values():
    docs = render(LOCKED)
    container = _container(docs)
    assert container["command"] == [
        "kvpilot",
        "alert-hook",
        "--prometheus=https://prometheus.monitoring.svc:9090",
        "--listen=0.0.0.0:8080",
        "--bearer-token-file=/etc/kvpilot/token/token",
        "--prometheus-basic-auth-file=/etc/kvpilot/prometheus/basic-auth",
        "--allowed-namespace=llm-a",
        "--metrics-listen=0.0.0.0:9091",
        "--metrics-auth",
        "--limits-from-cluster",
        "--sink=log",
        "--sink=kube-event",
    ]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http": 8080, "metrics": 9091}
    volumes = find(docs, "Deployment", "kvpilot-alert-hook")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "prometheus-credentials", "secret": {"secretName": "kvpilot-prometheus-credentials"}} in volumes
    assert not [d for d in docs if d["kind"] == "Secret"]  # both Secrets are the user's
    # RBAC: a Role in the one allowed namespace, none in llm-b although the operator watches it
    roles = [(d["kind"], d["metadata"]["namespace"]) for d in docs if d["metadata"]["name"] == "kvpilot-alert-hook"]
    assert ("Role", "llm-a") in roles
    assert ("RoleBinding", "llm-a") in roles
    assert not [r for r in roles if r[1] == "llm-b"]
    assert ("ClusterRole", None) not in roles
    policy = find(docs, "NetworkPolicy", "kvpilot-alert-hook")
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "kvpilot-alert-hook"}}
    assert [rule["ports"] for rule in policy["spec"]["ingress"]] == [
        [{"port": "http", "protocol": "TCP"}],
        [{"port": "metrics", "protocol": "TCP"}],
    ]
    assert policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == (
        "alertmanager"
    )
    service = find(docs, "Service", "kvpilot-alert-hook")
    assert [p["name"] for p in service["spec"]["ports"]] == ["http", "metrics"]


@pytest.mark.parametrize(
    ("sets", "allowed", "scopes"),
    [
        # the operator watches every namespace and the hook has no list: any namespace, a ClusterRole
        ([], [], [None]),
        # the operator's namespaces by default
        (["watch.allNamespaces=false", "watch.namespaces={llm,team}"], ["llm", "team"], ["llm", "team"]),
        # the hook's own list wins
        (["alertHook.allowedNamespaces={llm}"], ["llm"], ["llm"]),
        # a glob names no namespace a Role could live in
        (["watch.allNamespaces=false", "watch.namespaces={llm-*}"], ["llm-*"], [None]),
    ],
)
def test_the_allowed_namespaces_default_to_the_operators(sets, allowed, scopes):
    docs = render(None, "alertHook.enabled=true", "alertHook.auth.existingSecret=s", *sets)
    command = _container(docs)["command"]
    assert [a.split("=", 1)[1] for a in command if a.startswith("--allowed-namespace=")] == allowed
    names = [d for d in docs if d["metadata"]["name"] == "kvpilot-alert-hook" and d["kind"] in ("Role", "ClusterRole")]
    assert sorted((d["metadata"].get("namespace") for d in names), key=str) == sorted(scopes, key=str)


def test_a_networkpolicy_without_peers_admits_no_one():
    docs = render(
        None, "alertHook.enabled=true", "alertHook.auth.existingSecret=s", "alertHook.networkPolicy.enabled=true"
    )
    assert find(docs, "NetworkPolicy", "kvpilot-alert-hook")["spec"]["ingress"] == []


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (
            ["alertHook.prometheusUrl=http://alice:pw@prometheus:9090"],
            "alertHook.prometheusUrl: credentials in the URL",
        ),
        (["alertHook.metrics.port=8080"], "alertHook.metrics.port: must differ from alertHook.port"),
        (["alertHook.prometheusAuth.type=digest"], "/alertHook/prometheusAuth/type"),  # the values schema
        (["alertHook.allowedNamespaces={Kube System}"], "/alertHook/allowedNamespaces/0"),
    ],
)
def test_bad_hook_values_fail_naming_the_value(sets, message):
    args = ["template", "kvpilot", str(CHART), "--set", "alertHook.enabled=true", "--set", "alertHook.auth.token=t"]
    for item in sets:
        args += ["--set", item]
    result = helm(*args, check=False)
    assert result.returncode != 0, result.stderr
    assert message in result.stderr, result.stderr
    assert "alice:pw" not in result.stderr


def _notes(*sets: str) -> str:
    args = ["install", "kvpilot", str(CHART), "--namespace", NS, "--dry-run=client", "--set", "alertHook.enabled=true"]
    for item in sets:
        args += ["--set", item]
    return helm(*args).stdout.split("NOTES:", 1)[1]


def test_notes_warn_about_plain_value_tokens_and_an_unrestricted_hook():
    quick = _notes("alertHook.auth.token=t")
    assert "WARNING: the hook's token came as plain values" in quick
    assert "alertHook.auth.existingSecret" in quick
    assert "The hook diagnoses alerts naming any namespace (kube-system included)" in quick
    documented = _notes("alertHook.auth.existingSecret=s", "alertHook.allowedNamespaces={llm}")
    assert "WARNING" not in documented
    assert "any namespace" not in documented
    assert "key `token` of Secret s, mounted at /etc/kvpilot/token" in documented
