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
FIRING_WARNING = 'ALERTS{alertstate="firing", severity!="critical"}'
FIRING_CRITICAL = 'ALERTS{alertstate="firing", severity="critical"}'
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
#: scenario -> alerts whose critical variant fires too (kvpilot.diagnose.severity): every growing queue
#: makes the queue alerts and the latency symptom critical, preemptions while requests queue the KV ones
CRITICAL: dict[str, set[str]] = {
    "kv-exhaustion": {"VLLMKVCacheExhaustion", "VLLMPreemptions", "VLLMTTFTHigh"},
    "max-num-seqs-cap": {"VLLMMaxNumSeqsCap", "VLLMTTFTHigh"},
    "token-budget-cap": {"VLLMTokenBudgetCap", "VLLMTTFTHigh"},
    "compute-bound": {"VLLMTTFTHigh"},
    "prefix-thrash": set(),
    "healthy": set(),
    "idle": set(),
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


def prometheus_rule_list() -> list[dict]:
    """The committed rules file's rules (every variant)."""
    return yaml.safe_load((MONITORING / "prometheus-rules.yaml").read_text())["groups"][0]["rules"]


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
        # 8 alerts; 6 of them also as a critical variant (all but VLLMPrefixCacheIneffective and VLLMTargetDown)
        assert "SUCCESS: 14 rules found" in out.stdout


def test_the_three_renderings_carry_the_same_rules():
    prom = yaml.safe_load((MONITORING / "prometheus-rules.yaml").read_text())["groups"][0]["rules"]
    operator = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())["spec"]["groups"][0]["rules"]
    grafana = yaml.safe_load((MONITORING / "grafana-alerting.yaml").read_text())["groups"][0]["rules"]
    assert prom == operator
    # Grafana wants unique titles in a folder: the critical variant is "<alert> critical"
    assert [
        r["alert"] + (" critical" if r["labels"]["severity"] == "critical" and r["alert"] != "VLLMTargetDown" else "")
        for r in prom
    ] == [r["title"] for r in grafana]
    for p, g in zip(prom, grafana, strict=True):
        assert g["data"][0]["model"]["expr"] == p["expr"]
        assert g["for"] == p["for"]
        assert g["labels"] == p["labels"]
        assert g["annotations"]["runbook_url"] == p["annotations"]["runbook_url"]


def test_names_labels_and_annotations_follow_the_contract():
    names = [r.name for r in alert_rules()]
    assert (
        names
        == list(dict.fromkeys(r["alert"] for r in prometheus_rule_list()))
        == [
            "VLLMKVCacheExhaustion",
            "VLLMPreemptions",
            "VLLMMaxNumSeqsCap",
            "VLLMTokenBudgetCap",
            "VLLMLoRASlotCap",
            "VLLMPrefixCacheIneffective",
            "VLLMTargetDown",
            "VLLMTTFTHigh",
        ]
    )
    for rule in yaml.safe_load((MONITORING / "prometheus-rules.yaml").read_text())["groups"][0]["rules"]:
        assert set(rule["labels"]) == {"severity", "bottleneck"}
        assert {"summary", "description", "runbook_url", "diagnose_command"} <= set(rule["annotations"])
        # a link Alertmanager and Grafana can open: the runbook as the project's repository renders it
        base = "https://github.com/kvpilot/kvpilot/blob/main/"
        assert rule["annotations"]["runbook_url"] == f"{base}docs/runbooks/{rule['alert']}.md"
        assert (REPO / rule["annotations"]["runbook_url"].removeprefix(base)).is_file()
        assert rule["annotations"]["diagnose_command"].startswith("kvpilot diagnose --prometheus ")
        # every vLLM series in both spellings; no counter without _total
        assert "vllm:" not in rule["expr"]
        assert "num_preemptions[" not in rule["expr"]
        assert "num_preemptions}" not in rule["expr"]


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
                            "expr": f"count by (alertname, limit_source) ({FIRING_WARNING})",
                            "eval_time": f"{timelines.DURATION}s",
                            "exp_samples": _firing(expected),
                        },
                        {
                            "expr": f"count by (alertname, limit_source) ({FIRING_CRITICAL})",
                            "eval_time": f"{timelines.DURATION}s",
                            "exp_samples": _firing({a for a in expected if a[0] in CRITICAL[scenario]}),
                        },
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
                                    "runbook_url": "https://github.com/kvpilot/kvpilot/blob/main/docs/runbooks/"
                                    "VLLMTargetDown.md",
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


# ---------------------------------------------------------------- VLLMMaxNumSeqsCap without the limits metric
#: vLLM 0.29.0's own scheduler at max_num_seqs 4 (tests/reference/alert_recordings.py; PROVENANCE.md there)
VLLM_ALERTS = REPO / "tests" / "fixtures" / "recordings" / "vllm-alerts"
PIN = "VLLMMaxNumSeqsCap"
LABELS = '{namespace="llm",pod="qwen-7f3a2",instance="10.0.0.7:8000",job="vllm",model_name="qwen",engine="0"}'
PIN_FIRING = f'count by (alertname, severity, limit_source) (ALERTS{{alertstate="firing", alertname="{PIN}"}})'


def _cap_test(name: str, running: str, waiting: str, expected: set[tuple[str, str]]) -> dict:
    """A promtool test of the running/waiting gauges alone (15 s samples) at 10 m: which severities of PIN fire."""
    return {
        "name": name,
        "interval": "15s",
        "input_series": [
            {"series": f"vllm:num_requests_running{LABELS}", "values": running},
            {"series": f"vllm:num_requests_waiting{LABELS}", "values": waiting},
        ],
        "promql_expr_test": [
            {
                "expr": PIN_FIRING,
                "eval_time": "10m",
                "exp_samples": [
                    {"labels": f'{{alertname="{PIN}", severity="{sev}", limit_source="heuristic"}}', "value": 1}
                    for _, sev in sorted(expected)
                ],
            }
        ],
    }


@pytest.mark.prometheus
def test_the_fallback_tolerates_dips_up_to_half_a_request_on_average(tmp_path):
    """Both sides of the fallback's threshold (running_avg >= running_max - PINNED_SLACK, 0.5) and of growth.

    Every 20 samples (5 m at 15 s) hold 11 at 4 and 9 dips to 3: any 5 m window averages 71 / 20 = 3.55
    (3.52-3.57 over 21 samples), >= 4 - 0.5: pinned, though min (3) != max (4), which reset the former rule. With
    9 at 4 and 11 dips: 69 / 20 = 3.45 (at most 73 / 21 = 3.48): not pinned. A queue growing by one request
    every 15 s (20 per 5 m >= 1) is critical as well; a queue of a steady 10 is a warning only.
    """
    above = " ".join(["4 3 4 3 4 3 4 3 4 3 4 3 4 3 4 3 4 3 4 4"] * 3)
    below = " ".join(["3 4 3 4 3 4 3 4 3 4 3 4 3 4 3 4 3 4 3 3"] * 3)
    growing, steady = "10+1x59", "10x59"
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "15s",
        "tests": [
            _cap_test("above, growing", above, growing, {(PIN, "warning"), (PIN, "critical")}),
            _cap_test("above, steady", above, steady, {(PIN, "warning")}),
            _cap_test("below, growing", below, growing, set()),
        ],
    }
    out = _promtool(tmp_path, test)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]


@pytest.mark.prometheus
@pytest.mark.parametrize(
    ("recording", "fires"),
    [("pinned-dips", True), ("bursts", False)],
)
def test_the_fallback_on_vllms_own_scheduler(recording, fires, tmp_path):
    """VLLM's scheduler pinned at 4 (every step's schedule ran 4 with others waiting, the .truth.json) while the
    gauge read 3 in a quarter of the samples: the fallback fires, warning and critical (the queue grows). The
    same server in bursts (a queue in each burst, drained after it) is not a pinned cap: nothing fires.
    """
    rec = VLLM_ALERTS / f"{recording}.om"
    truth = json.loads((VLLM_ALERTS / f"{recording}.truth.json").read_text())["samples"]
    pinned_share = [s["pinned_share"] for s in truth[-20:]]  # the last 5 m
    running = [s.value for s in timelines.read_recording(rec) if s.name == "vllm:num_requests_running"][-20:]
    if fires:  # the ground truth and the dips the former min == max rule reset on
        assert min(pinned_share) > 0.95
        assert min(running) == 3
        assert max(running) == 4
    else:
        assert min(pinned_share) == 0.0
    series = timelines.input_series(rec, duration=600)
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": PIN_FIRING,
                        "eval_time": "600s",
                        "exp_samples": [
                            {"labels": f'{{alertname="{PIN}", severity="{sev}", limit_source="heuristic"}}', "value": 1}
                            for sev in (("critical", "warning") if fires else ())
                        ],
                    }
                ],
            }
        ],
    }
    out = _promtool(tmp_path, test)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    # the diagnoser, given no limit either, says the same
    cmd = ["diagnose", "--recording", str(rec), "--window", "5m", "--no-kube", "-o", "json"]
    doc = json.loads(subprocess.run([sys.executable, "-m", "kvpilot.cli", *cmd], capture_output=True, text=True).stdout)
    target = doc["targets"][0]
    assert (target["verdict"] == "max_num_seqs_cap" and target["confidence"] >= 0.6) == fires
    if fires:
        assert target["signals"]["inferred_max_num_seqs"] == 4
        assert target["severity"] == "critical"


def test_the_runbook_base_is_an_option_of_the_renderer(tmp_path):
    base = "https://runbooks.example.com/kvpilot/"
    cmd = [sys.executable, "-m", "kvpilot.alerts.render", str(tmp_path), "--runbook-base", base]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for name in ("prometheus-rules.yaml", "prometheusrule.yaml"):
        doc = yaml.safe_load((tmp_path / name).read_text())
        rules = (doc.get("spec") or doc)["groups"][0]["rules"]
        assert {r["annotations"]["runbook_url"] for r in rules} == {f"{base}{r['alert']}.md" for r in rules}
    grafana = yaml.safe_load((tmp_path / "grafana-alerting.yaml").read_text())["groups"][0]["rules"]
    assert all(r["annotations"]["runbook_url"].startswith(base) for r in grafana)
    bad = subprocess.run([*cmd[:-1], base.rstrip("/")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert "--runbook-base: end the URL with /" in bad.stderr


@pytest.mark.helm
def test_the_chart_points_runbook_urls_at_its_value():
    out = subprocess.run(
        [
            require_tool("helm"), "template", "kvpilot", str(REPO / "charts" / "kvpilot"),
            "--set", "prometheusRule.enabled=true",
            "--set", "prometheusRule.runbookBaseUrl=https://wiki.example/runbooks/",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    [rule] = [d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "PrometheusRule"]
    urls = {r["alert"]: r["annotations"]["runbook_url"] for r in rule["spec"]["groups"][0]["rules"]}
    assert urls["VLLMTargetDown"] == "https://wiki.example/runbooks/VLLMTargetDown.md"
    assert all(u == f"https://wiki.example/runbooks/{a}.md" for a, u in urls.items())
