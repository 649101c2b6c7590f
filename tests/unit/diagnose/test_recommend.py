"""Recommendations: the arithmetic (worked by hand) and that they never contradict the verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.recommend import Inputs, recommend
from kvpilot.diagnose.signals import Signals, finish_signals
from tests.integration.diagnose.scenario_flags import EXPECTED, scenario_cli_args

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
GIB = 2**30


def signals(**values) -> Signals:
    return finish_signals(Signals(values=values, window_seconds=300.0, end=0.0))


def test_gpu_memory_utilization_arithmetic():
    # the reference deployment (background.md §7/§9): Qwen2.5-1.5B on an 8 GiB GPU at 0.60, 21,520 KV tokens.
    # 4 running x 8,000 tokens per request = 32,000 tokens of demand, 10,480 more than the pool:
    # 10,480 x 28,672 B = 300,482,560 B = 0.03498 of 8 GiB -> 0.60 + 0.035 = 0.635 -> rounded up to 0.64.
    # extra = (0.64 - 0.60) x 8 GiB / 28,672 B = 343,597,383.68 / 28,672 = 11,983.7 tokens
    config = json.loads((FIXTURES / "hf-configs" / "Qwen__Qwen2.5-1.5B-Instruct.json").read_text())
    sig = signals(running_max=4.0, prompt_tokens_per_s=6000.0, generation_tokens_per_s=2000.0,
                  requests_finished_per_s=1.0)
    limits = resolve_limits(cache_config={"gpu_memory_utilization": "0.6", "kv_cache_size_tokens": "21520"},
                            gpu_memory_bytes=8 * GIB)
    recs = {r.flag: r for r in recommend("kv_cache_exhaustion", Inputs(sig, limits, config))}
    util = recs["--gpu-memory-utilization"]
    assert (util.current, util.suggested) == (0.6, 0.64)
    assert "+11,984 KV tokens" in util.expected_effect and "28,672 B per token" in util.expected_effect
    assert "21,520 -> 33,504" in util.expected_effect  # 21,520 + 11,984
    # fp8 halves bytes per token: 21,520 -> 43,040
    assert "21,520 -> 43,040 tokens" in recs["--kv-cache-dtype"].expected_effect
    # 4 running already above floor(21,520 / 8,000) = 2: cap concurrency at 2
    assert (recs["--max-num-seqs"].current, recs["--max-num-seqs"].suggested) == (256, 2)


def test_utilization_is_not_suggested_from_a_guessed_default():
    sig = signals(running_max=4.0)
    recs = recommend("kv_cache_exhaustion", Inputs(sig, resolve_limits(cache_config={"kv_cache_size_tokens": "1000"})))
    assert "--gpu-memory-utilization" not in {r.flag for r in recs}


def test_fp8_is_not_suggested_when_already_fp8():
    recs = recommend("kv_cache_exhaustion", Inputs(signals(), resolve_limits(cli={"kv_cache_dtype": "fp8"})))
    assert "--kv-cache-dtype" not in {r.flag for r in recs}


def test_seqs_cap_suggestion_bounded_by_kv_room_and_budget():
    # 8 running hold 40 % of KV (5 % each), 100 waiting: demand 108, but 0.9 / 0.05 = 18 fit -> 18;
    # the budget of 16 is below 18: raised too (vLLM requires max_num_batched_tokens >= max_num_seqs)
    sig = signals(running_avg=8.0, waiting_avg=100.0, kv_usage_avg=0.4)
    recs = {r.flag: r for r in recommend("max_num_seqs_cap", Inputs(sig, resolve_limits(
        cli={"max_num_seqs": 8, "max_num_batched_tokens": 16})))}
    assert (recs["--max-num-seqs"].current, recs["--max-num-seqs"].suggested) == (8, 18)
    assert (recs["--max-num-batched-tokens"].current, recs["--max-num-batched-tokens"].suggested) == (16, 18)


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_recommendations_never_contradict_the_verdict(scenario):
    args = ["diagnose", "--recording", str(FIXTURES / "recordings" / f"scenario_{scenario}.om"), "--no-kube",
            "-o", "json", *scenario_cli_args(scenario)]
    target = json.loads(CliRunner().invoke(cli, args).output)["targets"][0]
    for r in target["recommendations"]:
        up = isinstance(r["current"], (int, float)) and isinstance(r["suggested"], (int, float)) \
            and r["suggested"] > r["current"]
        if target["verdict"] == "kv_cache_exhaustion":
            assert not (r["flag"] == "--max-num-seqs" and up)
            assert r["flag"] != "--max-num-batched-tokens" or not up
        if target["verdict"] in ("compute_bound", "max_num_seqs_cap"):
            assert not (r["flag"] == "--max-num-batched-tokens" and up and target["verdict"] == "compute_bound")
        if target["verdict"] == "token_budget_cap":
            assert r["flag"] == "--max-num-batched-tokens" and up
    if target["verdict"] in ("healthy", "idle"):
        assert target["recommendations"] == []
