"""The shipped Alertmanager configurations: every one passes ``amtool check-config`` and routes as documented.

- ``manifests/monitoring/alertmanager.yaml``: a complete configuration file;
- ``manifests/monitoring/alertmanagerconfig.yaml`` and the chart's rendering of it: a Prometheus Operator
  ``AlertmanagerConfig``. Its CRD is not in a package registry here (the npm and PyPI model packages ship
  generated validators, not the CRD), so it is checked structurally: every field is one the
  monitoring.coreos.com/v1alpha1 API defines (a typo fails), and the configuration the operator would
  merge from it (receiver names prefixed ``<namespace>/<name>/``, the Secret's key read in, a
  ``namespace`` matcher unless the Alertmanager's ``alertmanagerConfigMatcherStrategy`` is ``None``)
  passes ``amtool check-config`` and routes a VLLM alert to the hook;
- every Alertmanager YAML block of docs/alerting.md passes ``amtool check-config`` as written.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvpilot.alerts import render
from tests.conftest import require_tool
from tests.support.manifests import load_docs

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).resolve().parents[3]
MONITORING = REPO / "manifests" / "monitoring"
CHART = REPO / "charts" / "kvpilot"

#: the monitoring.coreos.com/v1alpha1 AlertmanagerConfig fields this check knows (the API's own names)
FIELDS = {
    "spec": {"route", "receivers", "inhibitRules", "muteTimeIntervals"},
    "route": {
        "receiver",
        "matchers",
        "groupBy",
        "groupWait",
        "groupInterval",
        "repeatInterval",
        "continue",
        "routes",
        "muteTimeIntervals",
        "activeTimeIntervals",
    },
    "matcher": {"name", "value", "matchType", "regex"},
    "receiver": {"name", "webhookConfigs"},
    "webhook": {"url", "urlSecret", "sendResolved", "maxAlerts", "httpConfig", "timeout"},
    "httpConfig": {"authorization", "basicAuth", "bearerTokenSecret", "tlsConfig", "proxyURL", "followRedirects"},
    "authorization": {"type", "credentials"},
    "secretKey": {"name", "key", "optional"},
    "inhibit": {"sourceMatch", "targetMatch", "equal"},
}
MATCH_TYPES = {"=", "!=", "=~", "!~"}


def _known(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    unknown = set(obj) - FIELDS[kind]
    assert not unknown, f"{kind}: fields the AlertmanagerConfig API does not define: {sorted(unknown)}"
    return obj


def _matcher(m: dict[str, Any]) -> str:
    _known(m, "matcher")
    op = m.get("matchType", "=")
    assert op in MATCH_TYPES
    assert m["name"]
    assert isinstance(m["value"], str)
    return f'{m["name"]}{op}"{m["value"]}"'


def operator_equivalent(cr: dict[str, Any], secrets: dict[tuple[str, str], dict[str, str]], on_namespace: bool) -> dict:
    """The Alertmanager configuration the Prometheus Operator merges from ``cr`` (under a root that receives nothing).

    ``secrets``: ``{(namespace, name): {key: value}}``, the Secrets the operator may read (only in the
    AlertmanagerConfig's namespace). ``on_namespace``: the operator's default matcher strategy.
    """
    assert cr["apiVersion"] == "monitoring.coreos.com/v1alpha1"
    assert cr["kind"] == "AlertmanagerConfig"
    ns, name = cr["metadata"]["namespace"], cr["metadata"]["name"]
    spec = _known(cr["spec"], "spec")
    scope = [f'namespace="{ns}"'] if on_namespace else []

    def prefixed(receiver: str) -> str:
        return f"{ns}/{name}/{receiver}"

    route = _known(spec["route"], "route")
    sub = {
        "receiver": prefixed(route["receiver"]),
        "matchers": [_matcher(m) for m in route.get("matchers", [])] + scope,
        "group_by": route["groupBy"],
        "group_wait": route["groupWait"],
        "group_interval": route["groupInterval"],
        "repeat_interval": route["repeatInterval"],
        "continue": route.get("continue", False),
    }
    receivers = []
    for r in spec["receivers"]:
        _known(r, "receiver")
        hooks = []
        for w in r.get("webhookConfigs", []):
            _known(w, "webhook")
            auth = _known(_known(w["httpConfig"], "httpConfig")["authorization"], "authorization")
            ref = _known(auth["credentials"], "secretKey")
            hooks.append(
                {
                    "url": w["url"],
                    "send_resolved": w["sendResolved"],
                    "max_alerts": w["maxAlerts"],
                    "http_config": {
                        "authorization": {"type": auth["type"], "credentials": secrets[(ns, ref["name"])][ref["key"]]}
                    },
                }
            )
        receivers.append({"name": prefixed(r["name"]), "webhook_configs": hooks})
    inhibit = [
        {
            "source_matchers": [_matcher(m) for m in _known(i, "inhibit")["sourceMatch"]] + scope,
            "target_matchers": [_matcher(m) for m in i["targetMatch"]] + scope,
            "equal": i["equal"],
        }
        for i in spec.get("inhibitRules", [])
    ]
    return {
        "route": {"receiver": "null", "routes": [sub]},
        "receivers": [{"name": "null"}, *receivers],
        "inhibit_rules": inhibit,
    }


def amtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([require_tool("amtool"), *args], capture_output=True, text=True, timeout=60)


def check(path: Path) -> None:
    out = amtool("check-config", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout, out.stdout + out.stderr


def route_of(path: Path, *labels: str) -> str:
    out = amtool("config", "routes", "test", f"--config.file={path}", *labels)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.strip()


VLLM_ALERT = ("alertname=VLLMMaxNumSeqsCap", "namespace=llm", "pod=qwen-7f3a2", "severity=critical")


def test_the_committed_alertmanager_files_match_the_generator():
    for name in ("alertmanager.yaml", "alertmanagerconfig.yaml"):
        assert (MONITORING / name).read_text() == render.render_all()[name], "run python -m kvpilot.alerts.render"
    assert (CHART / "files" / "alertmanagerconfig.yaml").read_bytes() == (
        MONITORING / "alertmanagerconfig.yaml"
    ).read_bytes(), "run make chart"


def test_the_plain_configuration_passes_amtool_and_routes_vllm_alerts_to_the_hook():
    path = MONITORING / "alertmanager.yaml"
    check(path)
    assert route_of(path, *VLLM_ALERT) == "kvpilot-alert-hook"
    assert route_of(path, "alertname=NodeDown", "namespace=llm") == "default"  # the root's default receiver
    config = yaml.safe_load(path.read_text())
    # one group per alert and pod: a later alert of another pod or name never waits behind a group_interval
    assert config["route"]["group_by"] == ["alertname", "namespace", "pod"]
    assert config["route"]["group_wait"] == "10s"
    assert config["route"]["group_interval"] == "1m"
    # an alert's critical variant mutes its warning variant for the same pod (kvpilot.diagnose.severity)
    assert config["inhibit_rules"] == [
        {
            "source_matchers": ['severity="critical"'],
            "target_matchers": ['severity="warning"'],
            "equal": ["alertname", "namespace", "pod"],
        }
    ]


@pytest.mark.parametrize("on_namespace", [False, True], ids=["matcher-strategy-none", "on-namespace"])
def test_the_alertmanagerconfig_merges_into_a_configuration_amtool_accepts(tmp_path, on_namespace):
    [cr] = load_docs((MONITORING / "alertmanagerconfig.yaml").read_text())
    secrets = {("kvpilot-system", "kvpilot-alert-hook-token"): {"token": "s3cret"}}
    path = tmp_path / "merged.yaml"
    path.write_text(yaml.safe_dump(operator_equivalent(cr, secrets, on_namespace)))
    check(path)
    hook = "kvpilot-system/kvpilot-alert-hook/kvpilot-alert-hook"
    # with the operator's default strategy only alerts of the AlertmanagerConfig's own namespace match it:
    # docs/alerting.md says to set the strategy to None or create one per vLLM namespace
    assert route_of(path, *VLLM_ALERT) == ("null" if on_namespace else hook)
    assert route_of(path, *VLLM_ALERT[:1], "namespace=kvpilot-system", "pod=p") == hook


def test_a_field_the_api_does_not_define_is_caught():
    [cr] = load_docs((MONITORING / "alertmanagerconfig.yaml").read_text())
    cr["spec"]["route"]["group_by"] = ["alertname"]  # the plain file's spelling, not the CRD's
    with pytest.raises(AssertionError, match="group_by"):
        operator_equivalent(cr, {}, on_namespace=False)


@pytest.mark.helm
def test_the_chart_renders_one_alertmanagerconfig_per_namespace_with_its_secret(tmp_path):
    helm = require_tool("helm")
    out = subprocess.run(
        [
            helm, "template", "kvpilot", str(CHART), "--namespace", "kvpilot-system",
            "--set", "alertHook.enabled=true", "--set", "alertHook.auth.token=s3cret",
            "--set", "alertmanager.alertmanagerConfig.enabled=true",
            "--set", "alertmanager.alertmanagerConfig.namespaces={llm,kvpilot-system}",
            "--set", "alertmanager.tokenSecretNamespaces={monitoring}",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    docs = load_docs(out.stdout)
    secrets = {
        (d["metadata"]["namespace"], d["metadata"]["name"]): d["stringData"] for d in docs if d["kind"] == "Secret"
    }
    # the hook's own Secret, a copy beside each AlertmanagerConfig outside the release namespace, and Alertmanager's
    assert set(secrets) == {(ns, "kvpilot-alert-hook-token") for ns in ("kvpilot-system", "llm", "monitoring")}
    configs = [d for d in docs if d["kind"] == "AlertmanagerConfig"]
    assert sorted(c["metadata"]["namespace"] for c in configs) == ["kvpilot-system", "llm"]
    [shipped] = load_docs((MONITORING / "alertmanagerconfig.yaml").read_text())
    for cr in configs:
        assert cr["spec"] == shipped["spec"]  # the service URL and Secret name are the release's, here the defaults
        path = tmp_path / f"{cr['metadata']['namespace']}.yaml"
        path.write_text(yaml.safe_dump(operator_equivalent(cr, secrets, on_namespace=True)))
        check(path)
        # the default strategy: each one routes its own namespace's alerts
        hook = f"{cr['metadata']['namespace']}/kvpilot-alert-hook/kvpilot-alert-hook"
        assert route_of(path, *VLLM_ALERT[:1], f"namespace={cr['metadata']['namespace']}", "pod=p") == hook


@pytest.mark.helm
def test_the_chart_refuses_to_copy_a_secret_it_did_not_create():
    out = subprocess.run(
        [
            require_tool("helm"), "template", "kvpilot", str(CHART), "--namespace", "kvpilot-system",
            "--set", "alertHook.enabled=true", "--set", "alertHook.auth.existingSecret=mine",
            "--set", "alertmanager.tokenSecretNamespaces={monitoring}",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode != 0
    assert "copy Secret mine into monitoring yourself" in out.stderr


def test_every_alertmanager_block_of_the_docs_passes_amtool(tmp_path):
    """The docs' snippets work when pasted (the one before had no default receiver: amtool refused it)."""
    text = (REPO / "docs" / "alerting.md").read_text()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if re.search(r"^route:", b, re.M)]
    assert blocks
    for i, block in enumerate(blocks):
        path = tmp_path / f"block{i}.yaml"
        path.write_text(block)
        check(path)
