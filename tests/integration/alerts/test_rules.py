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


def _promtool(workdir: Path, test: dict, for_override: str = "2m") -> subprocess.CompletedProcess:
    (workdir / "rules.yaml").write_text(render.render_all(for_override=for_override)["prometheus-rules.yaml"])
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
    """Both sides of the fallback's threshold without the finished/step counters (dip 0, noise 0: running, the
    larger of its mean and median, within PINNED_SLACK, 0.5, of running_max) and of growth.

    Every 20 samples (5 m at 15 s) hold 11 at 4 and 9 dips to 3: any 5 m window averages 71 / 20 = 3.55
    (3.52-3.57 over 21 samples) and its median is 4, >= 4 - 0.5: pinned, though min (3) != max (4), which reset an
    earlier rule. With 9 at 4 and 11 dips: 69 / 20 = 3.45 (at most 73 / 21 = 3.48), median 3: not pinned. A queue
    growing by one request every 15 s (20 per 5 m >= 1) is critical as well; a queue of a steady 10 is a warning
    only.
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


# ---------------------------------------------------------------- the dip of vLLM's gauges below a pinned cap
#: vLLM 0.29.0's own scheduler, KV cache manager and stat logger with per-window ground truth
#: (tests/reference/verdict_scenarios.py; PROVENANCE.md there)
VERDICTS = REPO / "tests" / "fixtures" / "recordings" / "vllm" / "verdicts"
KV = "VLLMKVCacheExhaustion"
CAP_OR_KV = f'count by (alertname, severity, limit_source) (ALERTS{{alertstate="firing", alertname=~"{PIN}|{KV}"}})'
TARGET_LIMIT = '{namespace="llm",pod="qwen-7f3a2",server="qwen",limit="max_num_seqs"}'


def _dip_test(name: str, running: str, kv: str, counters: bool, expected: set[tuple[str, str, str]]) -> dict:
    """A promtool test of a server with ``max_num_seqs`` 1,024 (the limits metric), a steady queue of 10, KV usage
    ``kv`` and, with ``counters``, 2,500 requests finished per 100 engine steps every 15 s (25 a step): which
    ``(alert, severity, limit_source)`` fire at 10 m (every ``for:`` 0s: the state of the evaluation at 10 m).
    """
    series = [
        {"series": f"vllm:num_requests_running{LABELS}", "values": running},
        {"series": f"vllm:num_requests_waiting{LABELS}", "values": "10x40"},
        {"series": f"vllm:kv_cache_usage_perc{LABELS}", "values": kv},
        {"series": f"kvpilot_vllmserver_limit{TARGET_LIMIT}", "values": "1024x40"},
    ]
    if counters:
        finished = LABELS.replace("{", '{finished_reason="length",', 1)
        series += [
            {"series": f"vllm:request_success_total{finished}", "values": "100000+2500x40"},
            {"series": f"vllm:iteration_tokens_total_count{LABELS}", "values": "1000+100x40"},
        ]

    def labels(alert: str, sev: str, source: str) -> str:
        return f'{{alertname="{alert}", severity="{sev}"' + (f', limit_source="{source}"' if source else "") + "}"

    return {
        "name": name,
        "interval": "15s",
        "input_series": series,
        "promql_expr_test": [
            {
                "expr": CAP_OR_KV,
                "eval_time": "10m",
                "exp_samples": [{"labels": labels(*alert), "value": 1} for alert in sorted(expected)],
            }
        ],
    }


@pytest.mark.prometheus
def test_the_cap_and_the_kv_ceiling_allow_the_requests_a_step_finishes(tmp_path):
    """Both sides of the pinned test and of the KV ceiling where 25 requests finish per step (a cap of 1,024 whose
    requests each decode about 40 tokens: vLLM's own scheduler read 997 of 1,024 with 26.6 finishing per step,
    docs/diagnosis.md "Derived conditions"); an absolute 0.5 called that cap free.

    Hand arithmetic at 10 m (the 5 m window holds 21 samples, 300-600 s, and the counters' increases are exact:
    20 x 2,500 finished over 20 x 100 steps): dip 25, noise 3 x sqrt(25 / 21) = 3.273, slack 0.5 + 25 + 3.273 =
    28.773, so pinned from 1,024 - 28.773 = 995.23: running at 996 fires, at 995 does not (nor before the
    counters are read: slack 0.5). The level is the larger of the mean and the median: 990 and 1,010 in turn (11
    of 990 in the window) average 999.5 with a median of 990, pinned by the mean; 1,000 and 980 (11 of 1,000)
    average 990.5 with a median of 1,000, pinned by the median; 990 and 1,000 (11 of 990) average 994.8 with a
    median of 990: not pinned. KV: the ceiling as the gauge reads it is 1 - (2 + 25 + 3.273) x kv / 600 with
    600 running: at a steady 0.96, 1 - 30.273 x 0.96 / 600 = 0.9516 <= 0.96 (at the ceiling: the queue is KV's);
    at 0.95, 0.9521 > 0.95 (room, and 600 running is far from the cap: nothing fires). Without the counters the
    ceiling is the two requests' worth alone: 1 - 2 x 0.997 / 600 = 0.99668 <= 0.997, and 1 - 2 x 0.996 / 600 =
    0.99668 > 0.996.
    """
    pin, kv = (PIN, "warning", "kvpilot_vllmserver_limit"), (KV, "warning", "")
    tests = [
        _dip_test("996 of 1,024 with 25 finishing per step", "996x40", "0.5x40", True, {pin}),
        _dip_test("995 of 1,024 with 25 finishing per step", "995x40", "0.5x40", True, set()),
        _dip_test("996 of 1,024, no finished or step counters", "996x40", "0.5x40", False, set()),
        _dip_test("mean 999.5, median 990", " ".join(["990 1010"] * 20 + ["990"]), "0.5x40", True, {pin}),
        _dip_test("mean 990.5, median 1,000", " ".join(["1000 980"] * 20 + ["1000"]), "0.5x40", True, {pin}),
        _dip_test("mean 994.8, median 990", " ".join(["990 1000"] * 20 + ["990"]), "0.5x40", True, set()),
        _dip_test("KV at 0.96 with 25 finishing per step", "600x40", "0.96x40", True, {kv}),
        _dip_test("KV at 0.95 with 25 finishing per step", "600x40", "0.95x40", True, set()),
        _dip_test("KV at 0.997, no counters", "600x40", "0.997x40", False, {kv}),
        _dip_test("KV at 0.996, no counters", "600x40", "0.996x40", False, set()),
    ]
    out = _promtool(
        tmp_path, {"rule_files": ["rules.yaml"], "evaluation_interval": "15s", "tests": tests}, for_override="0s"
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]


def _verdict_windows() -> list[tuple[str, dict]]:
    """``(recording, evaluation)`` of each window vLLM's scheduler refused for max_num_seqs or for KV."""
    out = []
    for name in ("default-cap-1024", "default-cap-1024-control", "cap-with-kv-full", "cap-with-kv-full-control"):
        truth = json.loads((VERDICTS / f"{name}.truth.json").read_text())
        out += [(name, e) for e in truth["evaluations"] if e["binding"]["limit"] in ("max_num_seqs", "kv_cache")]
    return out


@pytest.mark.prometheus
@pytest.mark.parametrize(
    ("recording", "evaluation"), _verdict_windows(), ids=lambda v: v if isinstance(v, str) else f"{v['end']:g}s"
)
def test_the_cap_and_the_kv_ceiling_on_vllms_own_scheduler(recording, evaluation, tmp_path):
    """Each window of vLLM's own runs, with the server's limits as the operator exports them and without them:
    VLLMMaxNumSeqsCap fires where vLLM's scheduler refused the queue's head for max_num_seqs (the .truth.json's
    binding limit), VLLMKVCacheExhaustion where it refused it for KV, and never the other.

    vLLM sets its gauges after a step's finished requests left (the running gauge) and freed their blocks (the KV
    gauge), so a full cap reads below itself: default-cap-1024's gauge reads 1,018-1,021 of 1,024, never the cap,
    with 5 requests finishing per step; cap-with-kv-full's averages 45 of 48 over windows that start cold (0, 21,
    38 running before the cap fills), which its median, 48, holds (an absolute 0.5 under the mean called both
    free). The control of default-cap-1024 (--max-num-seqs 2,048) at 45 s peaks at 99.55 % KV with no preemption
    yet, under the admission ceiling of 1 - 2 x 0.913 / 1,383 = 99.87 % but above the reading of it once about
    10 requests a step have freed theirs.

    Without the limits metric the fallback infers the cap at the window's maximum: cap-with-kv-full fires it
    (48 plus 0.22 finishing per step is 48; its 1,531-token prompts took 2.0 step times, fewer than the 4.6
    steps a budget of the 379-token mean step needs, so that budget refused none) and its control does not (52
    plus 0.24 is 1.8 short of its maximum, 54). default-cap-1024 is left out there: its batch, 1,020 plus 5, is
    above its maximum reading, 1,021, by more than the noise allows, and `kvpilot diagnose` names its cap only
    through vLLM's default for the GPU tier, which a rule cannot read.
    """
    truth = json.loads((VERDICTS / f"{recording}.truth.json").read_text())
    rec, flags = VERDICTS / f"{recording}.om", truth["flags"]
    duration, interval = int(truth["duration"]), int(truth["interval"])
    running = [s.value for s in timelines.read_recording(rec) if s.name == "vllm:num_requests_running"]
    preempted = [s.value for s in timelines.read_recording(rec) if s.name == "vllm:num_preemptions_total"]
    end = evaluation["end"]
    seen = running[: int(end // interval) + 1]
    capped = evaluation["binding"]["limit"] == "max_num_seqs"
    if capped:  # pinned in vLLM's schedule, though the gauge averaged more than 0.5 below the cap
        assert sum(seen) / len(seen) < flags["max_num_seqs"] - 0.5
        if recording == "default-cap-1024":  # and never read the cap itself
            assert max(running) < flags["max_num_seqs"]
    if recording == "default-cap-1024-control" and end == 45:  # KV alone, without a preemption to show it
        assert max(preempted[: int(end // interval) + 1]) == 0
    limits = {k: float(flags[k]) for k in ("max_num_seqs", "max_num_batched_tokens", "max_model_len")}
    limits["kv_cache_tokens"] = float(flags["num_gpu_blocks"] * flags["block_size"])
    series = timelines.input_series(rec, duration=duration, interval=interval)
    query = (
        "count by (alertname, limit_source) "
        f'(ALERTS{{alertstate="firing", severity!="critical", alertname=~"{PIN}|{KV}"}})'
    )
    tests = []
    for source in (LIMIT, HEUR):
        if source == HEUR and recording == "default-cap-1024":
            continue
        expected = {(PIN, source)} if capped else {(KV, "")}
        with_limits = series + timelines.limit_series(limits, samples=duration // interval + 1)
        tests.append(
            {
                "name": f"{recording} at {end:g} s, limit_source {source}",
                "interval": f"{interval}s",
                "input_series": with_limits if source == LIMIT else series,
                "promql_expr_test": [{"expr": query, "eval_time": f"{end:g}s", "exp_samples": _firing(expected)}],
            }
        )
    # the recordings are a minute or five long: the alert's for: is not what is under test here
    out = _promtool(
        tmp_path, {"rule_files": ["rules.yaml"], "evaluation_interval": "15s", "tests": tests}, for_override="0s"
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]


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
