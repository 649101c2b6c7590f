"""One body cannot make the hook do unbounded work: alerts per body are bounded (413 past the bound, no
query sent), new diagnoses per minute are bounded (the rest get an error, 429 when none can start), and
alerts about the same target share one diagnosis. The real ``kvpilot alert-hook`` against a Prometheus
stand-in on loopback that answers one target's series and counts every query.
"""

from __future__ import annotations

import json
import time

from tests.integration.alerts.hook_support import HookProcess, StandIn, alert_body, counter

LABELS = {"namespace": "llm", "pod": "qwen-7f3a2", "instance": "10.0.0.7:8000", "job": "vllm", "engine": "0"}


def rows(query):
    return [LABELS] if 'pod="qwen-7f3a2"' in query.params.get("query", "") else []


def _queries(prom: StandIn, pod: str) -> int:
    return sum(1 for q in prom.snapshot() if f'pod="{pod}"' in q.params.get("query", ""))


def test_a_body_past_the_alert_bound_is_413_before_any_work(tmp_path):
    with StandIn("rows", rows) as prom, HookProcess(tmp_path, "--prometheus", prom.url, "--max-alerts", "100") as hook:
        # the reported case: 5,000 alerts in one 700 KB body (5,000 targets)
        many = alert_body(*({"namespace": "llm", "pod": f"qwen-{i:05d}", "job": "vllm"} for i in range(5000)))
        assert 600_000 < len(json.dumps(many)) < 2**20  # under --max-body: the alert bound refuses it
        started = time.monotonic()
        status, answer, _ = hook.post(many)
        assert status == 413, answer
        assert answer["error"].startswith("alerts: 5,000 alerts, more than the 100"), answer
        assert time.monotonic() - started < 5
        assert prom.snapshot() == []
        # at the bound: 100 alerts about one target are taken, and cost one diagnosis
        status, answer, _ = hook.post(alert_body(*[{"namespace": "llm", "pod": "qwen-7f3a2"}] * 100))
        assert status == 200
        assert len(answer["results"]) == 100
        assert {r["diagnosis"]["targets"][0]["target"]["pod"] for r in answer["results"]} == {"qwen-7f3a2"}
        once = _queries(prom, "qwen-7f3a2")
        # one more alert than the bound is refused
        status, _, _ = hook.post(alert_body(*[{"namespace": "llm", "pod": "qwen-7f3a2"}] * 101))
        assert status == 413
        metrics = hook.metrics()
    # the 100 alerts were one diagnosis: what a single alert's diagnosis sends, counted below
    assert counter(metrics, "kvpilot_alert_hook_requests_total", code="413") == 2
    assert counter(metrics, "kvpilot_alert_hook_diagnoses_total", verdict="target_down") == 1
    assert once > 0


def test_alerts_about_one_target_share_one_diagnosis(tmp_path):
    with (
        StandIn("rows", rows) as prom,
        HookProcess(tmp_path, "--prometheus", prom.url, "--cache", "1ms") as hook,
    ):
        status, single, _ = hook.post(alert_body({"namespace": "llm", "pod": "qwen-7f3a2"}))
        assert status == 200
        one_diagnosis = _queries(prom, "qwen-7f3a2")
        # three alert names about the same pod, with different fingerprints: one diagnosis, not three
        alerts = [
            {"namespace": "llm", "pod": "qwen-7f3a2", "alertname": name}
            for name in ("VLLMKVCacheExhaustion", "VLLMPreemptions", "VLLMTTFTHigh")
        ]
        status, answer, _ = hook.post(alert_body(*alerts))
        assert status == 200
        assert _queries(prom, "qwen-7f3a2") == 2 * one_diagnosis
    docs = [r["diagnosis"] for r in answer["results"]]
    assert docs[0] == docs[1] == docs[2]
    assert docs[0]["targets"][0]["target"]["pod"] == "qwen-7f3a2"
    assert docs[0]["targets"][0]["verdict"] == single["results"][0]["diagnosis"]["targets"][0]["verdict"]


def test_new_diagnoses_per_minute_are_bounded(tmp_path):
    """3 a minute: a body naming 5 targets gets 3 diagnoses and 2 errors; a further new target is 429
    (Retry-After: one token per 60 / 3 = 20 s); a target already diagnosed is answered from the cache.
    """
    with (
        StandIn("rows", rows) as prom,
        HookProcess(tmp_path, "--prometheus", prom.url, "--max-diagnoses-per-minute", "3") as hook,
    ):
        five = alert_body(*({"namespace": "llm", "pod": p} for p in ("qwen-7f3a2", "b-1", "c-1", "d-1", "e-1")))
        status, answer, _ = hook.post(five)
        assert status == 200
        errors = [r["error"] for r in answer["results"]]
        assert [r["diagnosis"] is not None for r in answer["results"]] == [True, True, True, False, False]
        assert (
            errors[3:] == ["not diagnosed: more than 3 diagnoses in the last minute (--max-diagnoses-per-minute)"] * 2
        )
        queried = len(prom.snapshot())
        status, answer, headers = hook.post(alert_body({"namespace": "llm", "pod": "f-1"}))
        assert status == 429
        assert answer["error"].startswith("more than 3 diagnoses in the last minute")
        assert 1 <= int(headers["Retry-After"]) <= 20
        assert len(prom.snapshot()) == queried  # the refused request sent no query
        status, answer, _ = hook.post(alert_body({"namespace": "llm", "pod": "qwen-7f3a2"}))
        assert status == 200
        assert answer["results"][0]["cached"] is True
        metrics = hook.metrics()
    assert counter(metrics, "kvpilot_alert_hook_errors_total", reason="rate_limit") == 3
    assert counter(metrics, "kvpilot_alert_hook_requests_total", code="429") == 1
