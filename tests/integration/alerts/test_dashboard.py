"""The dashboard (generated with Grafana's Foundation SDK) and every PromQL expression of the rules and
the dashboard, run against a real Prometheus holding engine recordings: none comes back empty.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvpilot.alerts import dashboard
from kvpilot.alerts.rules import alert_rules
from kvpilot.engine.scenarios import SCENARIOS
from tests.integration.alerts import timelines
from tests.support.prom import PrometheusServer, backfill

REPO = Path(__file__).resolve().parents[3]
COMMITTED = REPO / "manifests" / "monitoring" / "grafana-dashboard.json"
#: pod -> (scenario, vLLM version): each alert's situation, and both name generations
PODS = {
    "kv-0a1b2": ("kv-exhaustion", "0.33.0"),
    "kvold-0a1b2": ("kv-exhaustion", "0.10.1"),
    "seqs-0a1b2": ("max-num-seqs-cap", "0.33.0"),
    "budget-0a1b2": ("token-budget-cap", "0.33.0"),
    "thrash-0a1b2": ("prefix-thrash", "0.33.0"),
    "healthy-0a1b2": ("healthy", "0.33.0"),
}
#: an alert -> the pod whose scenario it fires on (test_rules.EXPECTED); VLLMTargetDown: any pod, later
FIRES_ON = {
    "VLLMKVCacheExhaustion": "kv-0a1b2",
    "VLLMPreemptions": "kvold-0a1b2",
    "VLLMMaxNumSeqsCap": "seqs-0a1b2",
    "VLLMTokenBudgetCap": "budget-0a1b2",
    "VLLMPrefixCacheIneffective": "thrash-0a1b2",
    "VLLMTTFTHigh": "kv-0a1b2",
}
DURATION, INTERVAL, END = 600, 10, timelines.END

pytestmark = pytest.mark.prometheus


def test_committed_dashboard_matches_its_generator():
    assert COMMITTED.read_text() == dashboard.render(), "run: python -m kvpilot.alerts.dashboard"


def test_dashboard_validates_against_the_sdk_types():
    """Grafana's Foundation SDK models (generated from Grafana's dashboard schema) read the JSON back
    field for field.
    """
    from grafana_foundation_sdk.models.dashboard import Dashboard

    committed = json.loads(COMMITTED.read_text())
    model = Dashboard.from_json(committed)
    assert json.loads(json.dumps(model.to_json(), default=lambda o: o.to_json())) == committed
    assert model.uid == dashboard.UID
    assert {v.name for v in model.templating.list_val} >= {"namespace", "server", "model"}
    assert model.annotations.list_val[0].expr.startswith("ALERTS{")


def test_panels_cover_the_limits():
    titles = [p["title"] for p in json.loads(COMMITTED.read_text())["panels"]]
    for needed in ("max_num_seqs", "admission ceiling", "Preemptions", "Prefix", "max_num_batched_tokens", "TTFT"):
        assert any(needed in t for t in titles), needed


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    work = tmp_path_factory.mktemp("dash-prom")
    for pod, (scenario, version) in PODS.items():
        raw = timelines.record(scenario, version, work / f"{pod}.raw.om", duration=DURATION, interval=INTERVAL, end=END)
        labels = {"namespace": "llm", "pod": pod, "job": "vllm", "instance": f"{pod}:8000"}
        labelled = work / f"{pod}.om"
        labelled.write_text(timelines.with_target_labels(raw.read_text(), labels))
        backfill(labelled, work / "data")
        limits = timelines.limits(scenario, raw)
        lim = work / f"{pod}.limits.om"
        lim.write_text(
            timelines.limit_recording(
                limits, {"namespace": "llm", "pod": pod, "server": pod.rsplit("-", 1)[0]}, END - DURATION, END, INTERVAL
            )
        )
        backfill(lim, work / "data")
    with PrometheusServer(work, data_dir=work / "data") as prom:
        prom.wait_for_series('vllm:num_requests_running{pod="healthy-0a1b2"}', at=END)
        yield prom


def _grafana_to_promql(expr: str) -> str:
    """The dashboard's variables at "All" (allValue .*) and Grafana's rate interval at one minute."""
    return (
        expr.replace("$namespace", ".*")
        .replace("$server", ".*")
        .replace("$model", ".*")
        .replace("$__rate_interval", "1m")
    )


@pytest.mark.parametrize(
    ("title", "legend", "expr"), [(t, legend, e) for t, _, qs in dashboard.panel_queries() for legend, e in qs]
)
def test_every_dashboard_query_returns_series(prometheus, title, legend, expr):
    result = prometheus.query(_grafana_to_promql(expr), at=END)
    assert result, f"{title} / {legend}: no series"


def test_the_variable_queries_find_values(prometheus):
    committed = json.loads(COMMITTED.read_text())
    for var in committed["templating"]["list"]:
        if var["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.*), (\w+)\)", var["query"])
        selector, label = m.group(1), m.group(2)
        result = prometheus.query(_grafana_to_promql(selector), at=END)
        if var["name"] == "server":  # kvpilot_vllmserver_info is the operator's; the backfill has only limits
            result = prometheus.query('kvpilot_vllmserver_limit{limit="max_num_seqs"}', at=END)
        assert {r["metric"].get(label if var["name"] != "server" else "server") for r in result} - {None}, var["name"]


@pytest.mark.parametrize("alert", list(FIRES_ON))
def test_every_alert_expression_returns_its_target(prometheus, alert):
    [rule] = [r for r in alert_rules() if r.name == alert]
    pods = {r["metric"].get("pod") for r in prometheus.query(rule.expr, at=END)}
    assert FIRES_ON[alert] in pods
    assert "healthy-0a1b2" not in pods


def test_target_down_expression_returns_series_after_the_data_ends(prometheus):
    [rule] = [r for r in alert_rules() if r.name == "VLLMTargetDown"]
    assert prometheus.query(rule.expr, at=END) == []  # every target current
    # 6 minutes later the 5 m lookback no longer finds a sample, the 1 h range still does
    pods = {r["metric"]["pod"] for r in prometheus.query(rule.expr, at=END + 360)}
    assert pods == set(PODS)


def test_scenarios_used_exist():
    assert {s for s, _ in PODS.values()} <= set(SCENARIOS)
