"""Every sink carries the answer: the change the diagnosis recommends and its predicted effect."""

from __future__ import annotations

import asyncio
import io
import json

from kvpilot.alerts.payload import Alert, Target
from kvpilot.alerts.result import AlertResult, Diagnosed
from kvpilot.alerts.sinks import LogSink, summary
from kvpilot.diagnose.model import Diagnosis, Prediction, Recommendation, Replay, Report

NOW = Prediction(requests_finished_per_s=2.78, queue_time_mean_s=65.8, ttft_mean_s=66.1)
THEN = Prediction(requests_finished_per_s=5.01, queue_time_mean_s=0.5, ttft_mean_s=0.75)
ALERT = Alert("firing", {"alertname": "VLLMMaxNumSeqsCap", "namespace": "llm", "pod": "qwen-0"}, {}, "f1")


def _result(replay_matches: bool = True, recommendations: bool = True) -> AlertResult:
    rec = Recommendation("--max-num-seqs", 4, 16, "Keeps up. More.", THEN)
    target = Diagnosis(
        "max_num_seqs_cap",
        "critical",
        0.6,
        ["Running requests pinned at max_num_seqs."],
        [rec] if recommendations else [],
        replay=Replay(NOW, NOW, matches=replay_matches),
    )
    report = Report("prometheus", 300, [target])
    diagnosed = Diagnosed(report, report.to_json())
    return AlertResult("f1", "VLLMMaxNumSeqsCap", "firing", Target(namespace="llm", pod="qwen-0"), diagnosis=diagnosed)


def test_the_log_line_carries_the_change_and_its_predicted_effect():
    stream = io.StringIO()
    asyncio.run(LogSink(stream).emit(ALERT, Target(namespace="llm", pod="qwen-0"), _result()))
    line = json.loads(stream.getvalue())
    assert line["verdict"] == "max_num_seqs_cap"
    assert line["change"] == "--max-num-seqs 4 -> 16"
    assert (
        line["predicted_effect"]
        == "predicted requests/s 2.78 -> 5.01, queue time 65.8 s -> 0.5 s, TTFT 66.1 s -> 0.75 s"
    )


def test_the_summary_grafana_and_events_use_says_the_change_first():
    text = summary(ALERT, _result())
    assert text.startswith(
        "VLLMMaxNumSeqsCap on llm/qwen-0: max_num_seqs_cap (critical, confidence 0.6): change --max-num-seqs 4 -> 16: "
        "predicted requests/s 2.78"
    )
    assert text.endswith("Running requests pinned at max_num_seqs.")


def test_without_a_matching_replay_the_effect_is_the_rules_estimate_and_none_without_a_change():
    assert _result(replay_matches=False).answer() == ("--max-num-seqs 4 -> 16", "Keeps up")
    assert _result(recommendations=False).answer() == (None, None)
    assert ": change " not in summary(ALERT, _result(recommendations=False))


def test_the_http_answer_carries_the_change_and_its_predicted_effect_too():
    doc = json.loads(json.dumps(_result().to_json()))
    assert doc["change"] == "--max-num-seqs 4 -> 16"
    assert doc["predicted_effect"].startswith("predicted requests/s 2.78 -> 5.01")
    assert doc["diagnosis"]["targets"][0]["verdict"] == "max_num_seqs_cap"
    bare = _result(recommendations=False).to_json()
    assert (bare["change"], bare["predicted_effect"]) == (None, None)
