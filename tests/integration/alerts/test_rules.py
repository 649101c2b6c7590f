"""The alert rules: one source, three committed renderings, checked by promtool against engine timelines.

Each engine scenario is recorded (``kvpilot simulate --record``, 900 s every 15 s) under three vLLM
metric-name generations and with the colons escaped, then fed to ``promtool test rules`` with and
without the operator's ``kvpilot_vllmserver_limit``; at the end of the timeline exactly the alerts of
:data:`EXPECTED` fire. The rules under test are the committed ones with every ``for:`` set to 2m (the
timeline is 15 minutes; the committed durations are checked separately).
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from kvpilot.alerts import render
from kvpilot.alerts.rules import alert_rules
from tests.conftest import require_tool
from tests.integration.alerts import timelines

REPO = Path(__file__).resolve().parents[3]
MONITORING = REPO / "manifests" / "monitoring"

#: scenario -> (alerts firing with the limits metric, alerts firing without it); the scenario's
#: signature (kvpilot.engine.scenarios) names its bottleneck; VLLMTTFTHigh (p99 > 5 s) is the symptom
#: of every growing queue. Without the limits metric the cap is inferred from a flat running count
#: (limit_source="heuristic"), and the token budget is unknown, so VLLMTokenBudgetCap stays silent
#: exactly as `kvpilot diagnose` then says compute_bound.
LIMIT, HEUR = "kvpilot_vllmserver_limit", "heuristic"
EXPECTED: dict[str, tuple[set, set]] = {
    "kv-exhaustion": (
        {("VLLMKVCacheExhaustion", ""), ("VLLMPreemptions", ""), ("VLLMTTFTHigh", "")},
        {("VLLMKVCacheExhaustion", ""), ("VLLMPreemptions", ""), ("VLLMTTFTHigh", "")},
    ),
    "max-num-seqs-cap": (
        {("VLLMMaxNumSeqsCap", LIMIT), ("VLLMTTFTHigh", "")},
        {("VLLMMaxNumSeqsCap", HEUR), ("VLLMTTFTHigh", "")},
    ),
    "token-budget-cap": ({("VLLMTokenBudgetCap", LIMIT), ("VLLMTTFTHigh", "")}, {("VLLMTTFTHigh", "")}),
    "compute-bound": ({("VLLMTTFTHigh", "")}, {("VLLMTTFTHigh", "")}),
    "prefix-thrash": ({("VLLMPrefixCacheIneffective", LIMIT)}, {("VLLMPrefixCacheIneffective", HEUR)}),
    "healthy": (set(), set()),
    "idle": (set(), set()),
}
#: the diagnoser's verdict for each scenario (with the limits) -> the alert named after it
VERDICT_ALERT = {
    "kv_cache_exhaustion": "VLLMKVCacheExhaustion",
    "max_num_seqs_cap": "VLLMMaxNumSeqsCap",
    "token_budget_cap": "VLLMTokenBudgetCap",
    "prefix_cache_ineffective": "VLLMPrefixCacheIneffective",
}


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> dict[tuple[str, str], Path]:
    """``{(scenario, vLLM version): recording}`` for every scenario and name generation."""
    out = tmp_path_factory.mktemp("recordings")
    jobs = [(sc, v) for sc in EXPECTED for v in sorted(set(timelines.VERSIONS.values()))]
    with ThreadPoolExecutor(2) as pool:
        paths = list(pool.map(lambda job: timelines.record(job[0], job[1], out / f"{job[0]}-{job[1]}.om"), jobs))
    return dict(zip(jobs, paths, strict=True))


def _promtool(workdir: Path, test: dict) -> subprocess.CompletedProcess:
    (workdir / "rules.yaml").write_text(render.render_all(for_override="2m")["prometheus-rules.yaml"])
    (workdir / "test.yaml").write_text(yaml.safe_dump(test, width=1 << 16))
    return subprocess.run(
        [require_tool("promtool"), "test", "rules", "test.yaml"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _firing(expected: set) -> list[dict]:
    def labels(name: str, source: str) -> str:
        return f'{{alertname="{name}"' + (f', limit_source="{source}"' if source else "") + "}"

    return [{"labels": labels(*alert), "value": 1} for alert in sorted(expected)]


def test_committed_renderings_match_the_generator():
    for name, text in render.render_all().items():
        committed = (MONITORING / name).read_text()
        assert committed == text, f"manifests/monitoring/{name} is stale: run python -m kvpilot.alerts.render"


def test_promtool_checks_the_rules_file_and_the_prometheusrule(tmp_path):
    promtool = require_tool("promtool")
    spec = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())["spec"]
    (tmp_path / "from-prometheusrule.yaml").write_text(yaml.safe_dump(spec))
    for path in (MONITORING / "prometheus-rules.yaml", tmp_path / "from-prometheusrule.yaml"):
        out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "SUCCESS: 7 rules found" in out.stdout


def test_the_three_renderings_carry_the_same_rules():
    prom = yaml.safe_load((MONITORING / "prometheus-rules.yaml").read_text())["groups"][0]["rules"]
    operator = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())["spec"]["groups"][0]["rules"]
    grafana = yaml.safe_load((MONITORING / "grafana-alerting.yaml").read_text())["groups"][0]["rules"]
    assert prom == operator
    assert [r["alert"] for r in prom] == [r["title"] for r in grafana]
    for p, g in zip(prom, grafana, strict=True):
        assert g["data"][0]["model"]["expr"] == p["expr"] and g["for"] == p["for"] and g["labels"] == p["labels"]
        assert g["annotations"]["runbook_url"] == p["annotations"]["runbook_url"]


def test_names_labels_and_annotations_follow_the_contract():
    names = [r.name for r in alert_rules()]
    assert names == [
        "VLLMKVCacheExhaustion",
        "VLLMPreemptions",
        "VLLMMaxNumSeqsCap",
        "VLLMTokenBudgetCap",
        "VLLMPrefixCacheIneffective",
        "VLLMTargetDown",
        "VLLMTTFTHigh",
    ]
    for rule in yaml.safe_load((MONITORING / "prometheus-rules.yaml").read_text())["groups"][0]["rules"]:
        assert set(rule["labels"]) == {"severity", "bottleneck"}
        assert {"summary", "description", "runbook_url", "diagnose_command"} <= set(rule["annotations"])
        assert rule["annotations"]["runbook_url"] == f"docs/runbooks/{rule['alert']}.md"
        assert (REPO / rule["annotations"]["runbook_url"]).is_file()
        assert rule["annotations"]["diagnose_command"].startswith("kvpilot diagnose --prometheus ")
        # every vLLM series in both spellings; no counter without _total
        assert "vllm:" not in rule["expr"]
        assert "num_preemptions[" not in rule["expr"] and "num_preemptions}" not in rule["expr"]


@pytest.mark.prometheus
@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_each_alert_fires_on_its_scenario_only(scenario, recordings, tmp_path):
    tests = []
    for variant, version in sorted(timelines.VERSIONS.items()):
        rec = recordings[(scenario, version)]
        base = timelines.input_series(rec, underscore=variant == "underscore")
        for with_limits, expected in zip((True, False), EXPECTED[scenario], strict=True):
            series = base + (timelines.limit_series(timelines.limits(scenario, rec)) if with_limits else [])
            tests.append(
                {
                    "name": f"{scenario} {variant} names, {'with' if with_limits else 'without'} the limits metric",
                    "interval": f"{timelines.INTERVAL}s",
                    "input_series": series,
                    "promql_expr_test": [
                        {
                            "expr": 'count by (alertname, limit_source) (ALERTS{alertstate="firing"})',
                            "eval_time": f"{timelines.DURATION}s",
                            "exp_samples": _firing(expected),
                        }
                    ],
                }
            )
    out = _promtool(tmp_path, {"rule_files": ["rules.yaml"], "evaluation_interval": "15s", "tests": tests})
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_the_diagnoser_names_the_same_bottleneck(scenario, recordings):
    """With the same limits the alert rules get, the CLI's verdict is the alert that fires (or none)."""
    rec = recordings[(scenario, timelines.VERSIONS["new"])]
    lim = timelines.limits(scenario, rec)
    cmd = [
        "kvpilot",
        "diagnose",
        "--no-what-if",
        "--recording",
        str(rec),
        "--window",
        "5m",
        "--end",
        "1764600000",
        "-o",
        "json",
        "--kv-cache-tokens",
        str(int(lim["kv_cache_tokens"])),
    ]
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        if key in lim:
            cmd += [f"--{key.replace('_', '-')}", str(int(lim[key]))]
    out = subprocess.run([sys.executable, "-m", "kvpilot.cli", *cmd[1:]], capture_output=True, text=True, timeout=120)
    verdict = json.loads(out.stdout)["targets"][0]["verdict"]
    fired = {name for name, _ in EXPECTED[scenario][0]} - {"VLLMTTFTHigh", "VLLMPreemptions"}
    assert fired == ({VERDICT_ALERT[verdict]} if verdict in VERDICT_ALERT else set())


@pytest.mark.prometheus
def test_target_down_fires_when_the_series_stops_and_carries_its_annotations(tmp_path):
    # running reported for 10 minutes, then the scrape failed (staleness marker: "stale"); at 12 m
    # the series has been gone for 2 m, longer than the 2 m for: -> firing.
    labels = '{namespace="llm",pod="qwen-7f3a2",instance="10.0.0.7:8000",job="vllm",model_name="qwen",engine="0"}'
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "external_url": "http://prometheus.example:9090",
                "input_series": [{"series": f"vllm:num_requests_running{labels}", "values": "2x40 stale"}],
                "alert_rule_test": [
                    {"eval_time": "9m", "alertname": "VLLMTargetDown", "exp_alerts": []},
                    {
                        "eval_time": "13m",
                        "alertname": "VLLMTargetDown",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "critical",
                                    "bottleneck": "target",
                                    "namespace": "llm",
                                    "pod": "qwen-7f3a2",
                                    "instance": "10.0.0.7:8000",
                                    "job": "vllm",
                                    "model_name": "qwen",
                                    "engine": "0",
                                },
                                "exp_annotations": {
                                    "summary": "vLLM llm/qwen-7f3a2: metrics stopped",
                                    "description": "vllm:num_requests_running reported within the last 1h but has "
                                    "no current sample (the scrape fails or the pod is gone).",
                                    "runbook_url": "docs/runbooks/VLLMTargetDown.md",
                                    "diagnose_command": "kvpilot diagnose --prometheus http://prometheus.example:9090 "
                                    "--namespace llm --pod qwen-7f3a2 --window 5m",
                                    "verdict": "target_down",
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    out = _promtool(tmp_path, test)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]


@pytest.mark.prometheus
def test_a_preemption_counter_without_total_is_not_read(tmp_path):
    """The public rules' mistake: ``vllm:num_preemptions`` (no ``_total``) is not a series Prometheus stores."""
    labels = '{namespace="llm",pod="p",instance="i",job="vllm",model_name="m",engine="0"}'
    other = labels.replace('pod="p"', 'pod="q"')
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": [
                    {"series": f"vllm:num_preemptions{labels}", "values": "0+5x40"},
                    {"series": f"vllm:num_preemptions_total{other}", "values": "0+5x40"},
                ],
                "promql_expr_test": [
                    {
                        "expr": 'count by (alertname, pod) (ALERTS{alertstate="firing"})',
                        "eval_time": "10m",
                        "exp_samples": [  # any preemption is also a KV shortage
                            {"labels": '{alertname="VLLMKVCacheExhaustion", pod="q"}', "value": 1},
                            {"labels": '{alertname="VLLMPreemptions", pod="q"}', "value": 1},
                        ],
                    }
                ],
            }
        ],
    }
    out = _promtool(tmp_path, test)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
