"""The fixture cases as recordings (tests/fixtures/recordings/case_*.om): verdict and numbers.

Expected values come from each case's ``expected`` block (tests/fixtures/cases/*.json) or are
worked out by hand from its ``metrics_timeline`` (arithmetic written next to each assertion).
Each case is evaluated over its timeline's span (see tests/fixtures/recordings/PROVENANCE.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.rules import diagnose_target, escaped_names_note
from kvpilot.diagnose.signals import compute_signals
from kvpilot.diagnose.sources.recording import read_window
from kvpilot.kv.spec import ModelConfig
from kvpilot.metrics.catalog import match_name
from kvpilot.metrics.exposition import Sample

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
GIB = 2**30


def case(prefix: str) -> dict:
    return json.loads(next((FIXTURES / "cases").glob(f"{prefix}_*.json")).read_text())


def diagnose_case(name: str, window: float, cli: dict, gpu_memory=None, gpu_name=None, model_config=None):
    signals = compute_signals(read_window(FIXTURES / "recordings" / f"case_{name}.om", window).samples, window)
    assert len(signals) == 1
    sig = next(iter(signals.values()))
    limits = resolve_limits(None, cli, sig.cache_config, gpu_memory, gpu_name)
    return diagnose_target(sig, limits, model_config=None if model_config is None else ModelConfig.read(model_config))


def rec(diag, flag):
    found = [r for r in diag.recommendations if r.flag == flag]
    return found[0] if found else None


def test_c11_kv_exhaustion_with_preemptions():
    c = case("C11")
    exp = c["expected"]
    # timeline 30..195 s -> window 165 s; flags: max_num_seqs 256, max_model_len 8192, GB200 (>= 70 GiB)
    d = diagnose_case(
        "C11",
        165.0,
        {"max_num_seqs": c["flags"]["max_num_seqs"], "max_model_len": c["flags"]["max_model_len"]},
        gpu_memory=186 * GIB,
        gpu_name="GB200",
        model_config=json.loads((FIXTURES / "hf-configs" / "Qwen__Qwen2.5-7B-Instruct.json").read_text()),
    )
    assert d.verdict == "kv_cache_exhaustion"
    assert d.severity == "critical"
    assert d.confidence >= exp["confidence"] - 0.05
    # preemptions counter reached 1,065 (expected.preemptions_total); increase 1065 - 60 = 1005 over the window
    assert d.signals["preemptions_last"] == exp["preemptions_total"]
    assert d.signals["preemptions_increase"] == pytest.approx(1005.0)
    assert d.signals["kv_usage_max"] == 1.0
    text = " ".join(d.evidence)
    assert "1,065" in text
    assert "preemption" in text
    # fp8 KV doubles the 299,584 tokens of the log line -> 599,168 (expected.remedies)
    fp8 = rec(d, "--kv-cache-dtype")
    assert fp8 is not None
    assert fp8.suggested == "fp8"
    assert "599,168" in fp8.expected_effect
    # cap concurrency near 49: floor(299,584 / 6,000 tokens per request) = 49
    # (expected.max_safe_concurrency_at_6000_tokens)
    cap = rec(d, "--max-num-seqs")
    assert cap is not None
    assert cap.current == 256
    assert cap.suggested == exp["max_safe_concurrency_at_6000_tokens"]
    # peak demand 128 running x 6,000 = 768,000 tokens = 2.56x the capacity (expected, tolerance 0.1 %)
    assert "768,000" in cap.expected_effect
    assert "2.56x" in cap.expected_effect
    # never "raise --max-num-seqs" on a KV shortage
    assert all(not (r.flag == "--max-num-seqs" and r.suggested > r.current) for r in d.recommendations)


def test_c12_compute_bound_offered_vs_served():
    c = case("C12")
    exp = c["expected"]
    tol = exp["tolerance_pct"] / 100
    d = diagnose_case(
        "C12",
        180.0,
        {"max_num_batched_tokens": c["flags"]["max_num_batched_tokens"]},
        gpu_memory=80 * GIB,
        gpu_name="H100",
    )
    assert d.verdict == "compute_bound"
    assert d.confidence >= exp["confidence"] - 0.05
    # served: 7,020,000 prompt tokens over 180 s = 39,000 tok/s
    assert d.signals["prompt_tokens_per_s"] == pytest.approx(exp["served_prompt_tok_s"], rel=tol)
    # waiting 5 -> 275 over 180 s: slope 1.5 req/s
    assert d.signals["waiting_trend_per_s"] == pytest.approx(exp["waiting_growth_req_s"], rel=tol)
    # offered = 39,000 + 1.5 req/s x 6,000 tokens = 48,000 tok/s
    assert d.signals["offered_prompt_tokens_per_s"] == pytest.approx(exp["offered_prompt_tok_s"], rel=tol)
    assert d.signals["kv_usage_avg"] == pytest.approx(exp["kv_cache_usage_perc"], rel=tol)
    assert d.signals["running_avg"] == pytest.approx(exp["running"], rel=tol)
    assert d.signals["preemptions_increase"] == 0
    text = " ".join(d.evidence)
    assert "39,000" in text
    assert "48,000" in text
    # no flag that would not help: no budget or slot increase
    assert all(r.flag not in ("--max-num-batched-tokens", "--max-num-seqs") for r in d.recommendations)


def test_c14_max_num_seqs_cap_with_kv_headroom():
    c = case("C14")
    exp = c["expected"]
    d = diagnose_case("C14", 120.0, {"max_num_seqs": c["flags"]["max_num_seqs"], "max_model_len": 32768})
    assert d.verdict == "max_num_seqs_cap"
    assert d.signals["running_avg"] == c["flags"]["max_num_seqs"]
    assert d.signals["kv_usage_max"] <= exp["kv_cache_usage_perc_max"]
    assert d.signals["preemptions_increase"] == exp["preemptions"]
    # KV headroom: floor(1,430,000 / 32,768) = 43 requests at 32k (expected.kv_headroom_requests_at_32k)
    assert f"holds {exp['kv_headroom_requests_at_32k']} requests of max_model_len 32,768" in " ".join(d.evidence)
    # 4 running + 12 waiting = 16; KV at 16 x 0.575 % ~ 9.2 % leaves room -> suggest 16
    r = rec(d, "--max-num-seqs")
    assert (r.current, r.suggested) == (4, 16)


def test_c17_prefix_cache_ineffective_block_granularity():
    c = case("C17")
    exp = c["expected"]
    d = diagnose_case("C17", 4.0, {})
    assert d.verdict == "prefix_cache_ineffective"
    assert d.signals["prefix_hit_rate"] == exp["hit_rate"]
    # 1,131 tokens queried by 2 requests = 565.5 per request < one 784-token block
    text = " ".join(d.evidence)
    assert "784-token block" in text
    assert "566 tokens" in text
    assert "not proof of no sharing" in text


C19 = case("C19")


@pytest.mark.parametrize(("old", "new"), [(o, n.split(" ")[0]) for o, n in C19["expected"]["rename_map"].items()])
def test_c19_rename_map_old_names_map_to_the_new_family(old, new):
    # vllm:time_per_output_token_seconds -> kvpilot reads it as inter-token latency (the map's alternative)
    target = "vllm:inter_token_latency_seconds" if old == "vllm:time_per_output_token_seconds" else new
    for exposed in (old, old.replace("vllm:", "vllm_")):
        m = match_name(exposed)
        assert m is not None
        assert m.canonical == target
        assert m.legacy


def _v011_samples(kv_name: str, kv: float, waiting: list[float]) -> list[Sample]:
    labels = {"model_name": "m", "engine": "0"}
    out = []
    for i, w in enumerate(waiting):
        t = 1_000_000.0 + 10 * i
        out += [
            Sample(kv_name, labels, kv, t),
            Sample("vllm:num_requests_running", labels, 8, t),
            Sample("vllm:num_requests_waiting", labels, w, t),
            Sample("vllm:num_preemptions_total", labels, 3 * i, t),
        ]
    return out


def test_c19_new_names_only_never_read_as_zero_kv():
    """0.11 exposes only vllm:kv_cache_usage_perc: KV is read (0.99), never 'zero' or healthy."""
    present = C19["scrape_sample_v0_11"]["present"]
    assert "vllm:kv_cache_usage_perc" in present
    assert "vllm:gpu_cache_usage_perc" not in present
    samples = _v011_samples("vllm:kv_cache_usage_perc", 0.99, [2, 4, 6, 8])
    sig = next(iter(compute_signals(samples, 30.0).values()))
    d = diagnose_target(sig, resolve_limits(cli={"max_num_seqs": 256}))
    assert d.signals["kv_usage_max"] == pytest.approx(0.99)
    assert d.verdict == "kv_cache_exhaustion"
    assert all(f.verdict != "metrics_schema_mismatch" for f in d.findings)


def test_c19_old_names_only_give_the_verdict_and_a_schema_finding():
    sig = next(iter(compute_signals(_v011_samples("vllm:gpu_cache_usage_perc", 0.99, [2, 4, 6, 8]), 30.0).values()))
    d = diagnose_target(sig, resolve_limits(cli={"max_num_seqs": 256}))
    assert d.verdict == "kv_cache_exhaustion"
    schema = [f for f in d.findings if f.verdict == "metrics_schema_mismatch"]
    # one line with a count and one example, not a list of names (4 families here: KV, running, waiting,
    # preemptions; only the KV gauge has the old name)
    assert len(schema) == 1
    assert len(schema[0].evidence) == 1
    assert schema[0].evidence[0].startswith("Only under legacy names: 1 metric family, e.g. vllm:gpu_cache_usage_perc")
    assert escaped_names_note([sig]) is None


def test_c19_escaped_names_are_one_note_for_the_report_not_a_warning_per_target():
    """Prometheus 2.x stores every vLLM series escaped: that is said once, with what it means for dashboards."""
    sigs = [
        next(iter(compute_signals(_v011_samples("vllm_kv_cache_usage_perc", 0.99, [2, 4, 6, 8]), 30.0).values()))
        for _ in range(3)
    ]
    for sig in sigs:
        d = diagnose_target(sig, resolve_limits(cli={"max_num_seqs": 256}))
        assert d.verdict == "kv_cache_exhaustion"
        assert all(f.verdict != "metrics_schema_mismatch" for f in d.findings)
    note = escaped_names_note(sigs)
    assert note is not None
    assert "1 family, e.g. vllm_kv_cache_usage_perc for vllm:kv_cache_usage_perc" in note
    assert "dashboards and rules of your own" in note


def test_c19_missing_kv_series_is_unknown_not_zero():
    """Neither KV name present: KV usage is unknown (null), and no rule claims KV room from it."""
    samples = [
        s for s in _v011_samples("vllm:kv_cache_usage_perc", 0.99, [0, 0, 0, 0]) if s.name != "vllm:kv_cache_usage_perc"
    ]
    sig = next(iter(compute_signals(samples, 30.0).values()))
    d = diagnose_target(sig, resolve_limits(cli={"max_num_seqs": 256}))
    assert d.signals["kv_usage_avg"] is None
    assert "0.0 %" not in " ".join(d.evidence)
