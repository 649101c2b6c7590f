"""What a user copies from the shipped files and docs stands on its own and agrees with the hook.

- no shipped YAML has an anchor or an alias: a route pasted without the inhibit rule that defined
  ``&id001`` would hold an undefined ``*id001`` (amtool refuses it);
- the Alertmanager ``max_alerts`` the files, docs and ``alert-hook --help`` give is the hook's
  default ``--max-alerts`` (a larger group is truncated by Alertmanager, not refused with a 413);
- docs/alerting.md counts the alerts and rules the rendered rules file holds.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from click.testing import CliRunner

from kvpilot.alerts import render
from kvpilot.alerts.payload import MAX_ALERTS
from kvpilot.commands.alert_hook import command as alert_hook
from tests.support.manifests import load_docs

REPO = Path(__file__).resolve().parents[3]
MONITORING = REPO / "manifests" / "monitoring"
SHIPPED = [p for root in ("manifests", "charts/kvpilot/files") for p in sorted((REPO / root).rglob("*.y*ml"))]
DOC = (REPO / "docs" / "alerting.md").read_text()


def _anchors_and_aliases(text: str) -> list[str]:
    found = []
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            found.append(f"*{event.anchor}")
        elif getattr(event, "anchor", None):
            found.append(f"&{event.anchor}")
    return found


def test_the_check_sees_an_alias():
    # the generator's old output: group_by shared with the inhibit rule's equal
    assert _anchors_and_aliases("a: &id001 [x]\nb: *id001\n") == ["&id001", "*id001"]
    assert _anchors_and_aliases(render.dump({"a": ["x"], "b": ["y"]})) == []


def test_no_shipped_yaml_has_an_anchor_or_alias():
    assert len(SHIPPED) > 10, SHIPPED  # the monitoring files, the CRD, the chart's copies
    for path in SHIPPED:
        assert _anchors_and_aliases(path.read_text()) == [], path.relative_to(REPO)


def test_a_value_shared_by_two_keys_renders_twice():
    shared = ["alertname", "namespace", "pod"]
    text = render.dump({"route": {"group_by": shared}, "inhibit_rules": [{"equal": shared}]})
    assert text.count("- alertname") == 2
    # the route alone, as the docs tell kube-prometheus-stack users to paste it, still loads
    route = text.split("inhibit_rules:")[0]
    assert yaml.safe_load(route) == {"route": {"group_by": shared}}


def _webhooks() -> list[dict]:
    [plain] = load_docs((MONITORING / "alertmanager.yaml").read_text())
    [cr] = load_docs((MONITORING / "alertmanagerconfig.yaml").read_text())
    hook = [r for r in plain["receivers"] if r["name"] == render.HOOK_RECEIVER]
    return [c for r in hook for c in r["webhook_configs"]] + [
        c for r in cr["spec"]["receivers"] for c in r["webhookConfigs"]
    ]


def test_the_shipped_max_alerts_is_the_hooks_default():
    default = next(p.default for p in alert_hook.params if p.name == "max_alerts")
    assert default == MAX_ALERTS
    webhooks = _webhooks()
    assert len(webhooks) == 2
    for webhook in webhooks:
        assert webhook.get("max_alerts", webhook.get("maxAlerts")) == default, webhook
    # the docs' configuration block and their advice say the same number
    assert re.findall(r"^\s+max_alerts: (\d+)$", DOC, re.M) == [str(default)]
    assert f"at most `--max-alerts` ({default})" in " ".join(DOC.split())
    # and so does --help's Alertmanager example
    out = CliRunner().invoke(alert_hook, ["--help"], terminal_width=120).output
    assert f"max_alerts: {default}\n" in out
    assert f"[default: {default};" in " ".join(out.split())


WORDS = {"Seven": 7, "Eight": 8, "Nine": 9, "Ten": 10, "Eleven": 11, "Twelve": 12}


def test_the_docs_count_the_rendered_alerts_and_rules():
    rules = yaml.safe_load((MONITORING / "prometheus-rules.yaml").read_text())["groups"][0]["rules"]
    alerts = {r["alert"] for r in rules}
    [word] = re.findall(r"^(\w+) alerts, defined once", DOC, re.M)
    assert WORDS[word] == len(alerts)
    [(n_rules, n_alerts)] = re.findall(r"\((\d+) rules for (\d+) alerts\)", DOC)
    assert (int(n_rules), int(n_alerts)) == (len(rules), len(alerts))
    # the alert table lists each alert once
    table = re.findall(r"^\| \[(VLLM\w+)\]\(runbooks/", DOC, re.M)
    assert sorted(table) == sorted(alerts)
