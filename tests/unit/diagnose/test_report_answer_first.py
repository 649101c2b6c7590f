"""Every report leads with the answer: one line per target with its verdict, the change and its predicted
effect; the evidence after it; how figures were derived (formulas, ceilings) only with --verbose and in JSON.
"""

from __future__ import annotations

import json

from kvpilot.diagnose.model import Diagnosis, Prediction, Recommendation, Replay, Report, detail
from kvpilot.diagnose.report import headline, render

#: a replay that reproduces the window, and the prediction with the change (``P`` objects)
NOW = Prediction(requests_finished_per_s=2.78, queue_time_mean_s=65.8, ttft_mean_s=66.1, preemptions_per_s=0.0)
THEN = Prediction(requests_finished_per_s=5.01, queue_time_mean_s=0.5, ttft_mean_s=0.75, preemptions_per_s=0.0)
FORMULA = " = 1 - 2 x 0.0003 (one request's share of KV)"


def _report() -> Report:
    capped = Diagnosis(
        "max_num_seqs_cap",
        "critical",
        0.6,
        [
            "Running requests pinned at max_num_seqs: average 3.87 of 4.",
            f"KV cache has room: usage peaked at 0.1 % (admission ceiling 0.999{detail(FORMULA)}), no preemptions.",
            detail("At a pinned cap vLLM's running gauge reads the cap less the requests that finished."),
        ],
        [Recommendation("--max-num-seqs", 4, 16, "The smallest change simulated that keeps up.", THEN)],
        target={"namespace": "llm", "pod": "qwen-0"},
        replay=Replay(NOW, NOW, matches=True, notes=("Step time: roofline.",)),
    )
    calm = Diagnosis("healthy", "ok", 0.8, ["Running 3.4 of 256; nobody waiting."], target={"pod": "qwen-1"})
    return Report(source="recording x.om", window_seconds=300, targets=[capped, calm], notes=["a run note"])


def test_the_text_report_opens_with_one_answer_line_per_target():
    lines = render(_report(), "text", width=200).splitlines()
    # the title, then the two targets' answers, before any note or evidence
    assert lines[1] == (
        "llm/qwen-0: max_num_seqs_cap (critical): change --max-num-seqs 4 -> 16: "
        "predicted requests/s 2.78 -> 5.01, queue time 65.8 s -> 0.5 s, TTFT 66.1 s -> 0.75 s"
    )
    assert lines[2] == "qwen-1: healthy (ok): no change needed"
    assert lines[3] == "  note: a run note"
    evidence = next(i for i, line in enumerate(lines) if "pinned at max_num_seqs" in line)
    change = next(i for i, line in enumerate(lines) if line.strip() == "change: --max-num-seqs 4 -> 16")
    assert change < evidence


def test_derivations_are_in_json_and_verbose_only():
    text = render(_report(), "text", width=200)
    markdown = render(_report(), "markdown")
    for short in (text, markdown):
        assert "admission ceiling 0.999), no preemptions" in short
        for internal in ("1 - 2 x", "At a pinned cap", "Step time", "signals:", "| signal |"):
            assert internal not in short
    for full in (render(_report(), "text", width=200, verbose=True), render(_report(), "markdown", verbose=True)):
        assert f"admission ceiling 0.999{FORMULA}), no preemptions" in full
        assert "At a pinned cap" in full
        assert "Step time" in full
    doc = json.loads(render(_report(), "json"))
    evidence = doc["targets"][0]["evidence"]
    assert (
        evidence[1] == f"KV cache has room: usage peaked at 0.1 % (admission ceiling 0.999{FORMULA}), no preemptions."
    )
    assert "\\u001e" not in json.dumps(doc)


def test_the_markdown_report_opens_with_the_answers():
    lines = render(_report(), "markdown").splitlines()
    assert lines[4].startswith(
        "- llm/qwen-0: max\\_num\\_seqs\\_cap (critical): change --max-num-seqs 4 -\\> 16: "
    )  # ">" escaped: CommonMark
    assert lines[5] == "- qwen-1: healthy (ok): no change needed"


def test_without_a_replay_that_matches_the_effect_is_the_rules_own_estimate():
    d = _report().targets[0]
    d.replay = Replay(NOW, NOW, matches=False)
    d.recommendations[0].expected_effect = "at most 14 requests fit in 32,768 KV tokens; the rest wait. More."
    assert headline(d) == (
        "llm/qwen-0: max_num_seqs_cap (critical): change --max-num-seqs 4 -> 16: at most 14 requests fit in 32,768 "
        "KV tokens"
    )
    d.recommendations.append(Recommendation("--kv-cache-dtype", "auto", "fp8", "2.00x KV tokens per byte."))
    assert headline(d).endswith("KV tokens (+1 more below)")
    d.recommendations = []
    assert headline(d) == "llm/qwen-0: max_num_seqs_cap (critical): no flag change to recommend"
