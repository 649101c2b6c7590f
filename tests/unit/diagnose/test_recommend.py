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
from kvpilot.kv.spec import ModelConfig
from tests.integration.diagnose.scenario_flags import EXPECTED, scenario_cli_args

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
GIB = 2**30


def signals(**values) -> Signals:
    return finish_signals(Signals(values=values, window_seconds=300.0, end=0.0))


def test_gpu_memory_utilization_arithmetic():
    # the reference deployment (docs/background.md §7/§9): Qwen2.5-1.5B on an 8 GiB GPU at 0.60, 21,520 KV tokens.
    # 4 running x 8,000 tokens per request = 32,000 tokens of demand, 10,480 more than the pool:
    # 10,480 x 28,672 B = 300,482,560 B = 0.03498 of 8 GiB -> 0.60 + 0.035 = 0.635 -> rounded up to 0.64.
    # vLLM claims ceil(0.64 x 8 GiB) - ceil(0.60 x 8 GiB) = 5,497,558,139 - 5,153,960,756 = 343,597,383 B more;
    # (21,520 x 28,672 + 343,597,383) // (16 x 28,672) = 960,618,823 // 458,752 = 2,093 blocks = 33,488 tokens
    config = ModelConfig.read(json.loads((FIXTURES / "hf-configs" / "Qwen__Qwen2.5-1.5B-Instruct.json").read_text()))
    sig = signals(
        running_max=4.0, prompt_tokens_per_s=6000.0, generation_tokens_per_s=2000.0, requests_finished_per_s=1.0
    )
    limits = resolve_limits(
        cache_config={"gpu_memory_utilization": "0.6", "kv_cache_size_tokens": "21520"}, gpu_memory_bytes=8 * GIB
    )
    recs = {r.flag: r for r in recommend("kv_cache_exhaustion", Inputs(sig, limits, config))}
    util = recs["--gpu-memory-utilization"]
    assert (util.current, util.suggested) == (0.6, 0.64)
    assert "+11,968 KV tokens" in util.expected_effect  # 33,488 - 21,520: whole blocks, not 11,983.7
    assert "28,672 B per token" in util.expected_effect
    assert "21,520 -> 33,488" in util.expected_effect
    # fp8 halves bytes per token: 21,520 -> 43,040
    assert "21,520 -> 43,040 tokens" in recs["--kv-cache-dtype"].expected_effect
    # 4 running already above floor(21,520 / 8,000) = 2: cap concurrency at 2
    assert (recs["--max-num-seqs"].current, recs["--max-num-seqs"].suggested) == (256, 2)


def test_tensor_parallel_quantified_from_the_kv_heads():
    # Qwen2.5-1.5B: 28 layers, 2 KV heads of 128, bf16: 28 x 2 x 128 x 2 (K and V) x 2 B = 28,672 B per token
    # on one GPU; TP 2 splits the 2 KV heads: 14,336 B -> the same KV memory holds 21,520 x 2 = 43,040 tokens
    config = ModelConfig.read(json.loads((FIXTURES / "hf-configs" / "Qwen__Qwen2.5-1.5B-Instruct.json").read_text()))
    sig = signals(running_max=4.0)
    tp1 = {
        r.flag: r
        for r in recommend(
            "kv_cache_exhaustion",
            Inputs(
                sig,
                resolve_limits(cli={"tensor_parallel_size": 1}, cache_config={"kv_cache_size_tokens": "21520"}),
                config,
            ),
        )
    }
    r = tp1["--tensor-parallel-size"]
    assert (r.current, r.suggested) == (1, 2)
    assert "28,672 -> 14,336 B" in r.expected_effect
    assert "21,520 x 2 = 43,040" in r.expected_effect
    # TP 2 -> 4: 2 KV heads on 4 GPUs are replicated, 14,336 B per token either way: no gain, no advice
    tp2 = recommend(
        "kv_cache_exhaustion",
        Inputs(
            sig, resolve_limits(cli={"tensor_parallel_size": 2}, cache_config={"kv_cache_size_tokens": "21520"}), config
        ),
    )
    assert "--tensor-parallel-size" not in {x.flag for x in tp2}
    # unknown TP: assumed 1 and said so, current null
    unknown = {
        x.flag: x
        for x in recommend(
            "kv_cache_exhaustion", Inputs(sig, resolve_limits(cache_config={"kv_cache_size_tokens": "21520"}), config)
        )
    }
    assert unknown["--tensor-parallel-size"].current is None
    assert "assumed 1" in unknown["--tensor-parallel-size"].expected_effect


def test_utilization_is_not_suggested_from_a_guessed_default():
    sig = signals(running_max=4.0)
    recs = recommend("kv_cache_exhaustion", Inputs(sig, resolve_limits(cache_config={"kv_cache_size_tokens": "1000"})))
    assert "--gpu-memory-utilization" not in {r.flag for r in recs}


def test_fp8_is_not_suggested_when_already_fp8():
    recs = recommend("kv_cache_exhaustion", Inputs(signals(), resolve_limits(cli={"kv_cache_dtype": "fp8"})))
    assert "--kv-cache-dtype" not in {r.flag for r in recs}


def test_seqs_cap_suggestion_bounded_by_kv_room_and_budget():
    # 8 running hold 40 % of KV (5 % each), 100 waiting, queue not growing: demand 108, but
    # 0.9 / 0.05 = 18 fit -> rounded down to the CUDA-graph batch size 16 (multiples of 8);
    # the budget of 8 is below 16: raised too (vLLM requires max_num_batched_tokens >= max_num_seqs)
    sig = signals(running_avg=8.0, waiting_avg=100.0, kv_usage_avg=0.4, waiting_trend_per_s=0.0)
    recs = {
        r.flag: r
        for r in recommend(
            "max_num_seqs_cap", Inputs(sig, resolve_limits(cli={"max_num_seqs": 8, "max_num_batched_tokens": 8}))
        )
    }
    assert (recs["--max-num-seqs"].current, recs["--max-num-seqs"].suggested) == (8, 16)
    assert "18" in recs["--max-num-seqs"].expected_effect
    assert "80.0 %" in recs["--max-num-seqs"].expected_effect
    assert (recs["--max-num-batched-tokens"].current, recs["--max-num-batched-tokens"].suggested) == (8, 16)


def test_seqs_cap_on_a_growing_queue_sizes_for_the_arrival_rate_not_the_backlog():
    # 4 slots pinned, 400 waiting on average and growing 1 req/s (300 over 5 min); 1 req/s completes.
    # Admitting the backlog would say 404. Little's law: each slot completes 1 / 4 = 0.25 req/s,
    # arrivals = 1 served + 1 queued = 2 req/s -> 4 x 2 / 1 = 8 slots keep up; x 1.25 to drain the
    # backlog = 10 -> CUDA-graph batch size 16. KV: 0.5 % per request -> 0.9 / 0.005 = 180 fit.
    sig = signals(
        running_avg=4.0, waiting_avg=400.0, waiting_trend_per_s=1.0, requests_finished_per_s=1.0, kv_usage_avg=0.02
    )
    recs = {r.flag: r for r in recommend("max_num_seqs_cap", Inputs(sig, resolve_limits(cli={"max_num_seqs": 4})))}
    r = recs["--max-num-seqs"]
    assert (r.current, r.suggested) == (4, 16)
    assert "Little" in r.expected_effect
    assert "8.0 slots keep up" in r.expected_effect
    assert "8.0 %" in r.expected_effect  # 16 x 0.5 %
    # the growth is today's, with 4 slots, not what the change brings
    assert r.expected_effect.startswith("with 4 slots now the queue grows: arrivals 1.00 served + 1.00 queued")


@pytest.mark.parametrize(
    ("trend", "suggested", "how"),
    [
        # a standing queue (its trend measured, 0): everyone admitted, 4 + 672 = 676 -> batch size 688
        (0.0, 688, "a queue stands: 4.0 running + 672.0 waiting = 676.0 admitted at once"),
        # one scrape in the window: the trend is unknown, which is no evidence of a standing queue: 2 x 4
        (None, 8, "whether the queue grows is unknown: 2 x 4 = 8"),
    ],
)
def test_seqs_cap_admits_the_whole_queue_only_when_it_is_known_to_stand(trend, suggested, how):
    values = {"running_avg": 4.0, "waiting_avg": 672.0, "kv_usage_avg": 0.0012}
    if trend is not None:
        values["waiting_trend_per_s"] = trend
    limits = resolve_limits(cli={"max_num_seqs": 4, "max_num_batched_tokens": 8192})
    recs = {r.flag: r for r in recommend("max_num_seqs_cap", Inputs(signals(**values), limits))}
    r = recs["--max-num-seqs"]
    assert (r.current, r.suggested) == (4, suggested)
    assert how in r.expected_effect


def test_seqs_cap_kv_bound_uses_the_full_request_footprint():
    # 4 running at 2 % of KV each (8 % in all) look like room for 0.9 / 0.02 = 45, but each request
    # ends at 6,000 prompt + 2,000 generated = 8,000 tokens of a 100,000-token pool = 8 %:
    # 0.9 / 0.08 = 11.25 -> 11 fit -> CUDA-graph batch size 8, although 4 + 60 waiting = 64 would queue.
    sig = signals(
        running_avg=4.0,
        waiting_avg=60.0,
        kv_usage_avg=0.08,
        prompt_tokens_per_s=6000.0,
        generation_tokens_per_s=2000.0,
        requests_finished_per_s=1.0,
    )
    recs = {
        r.flag: r
        for r in recommend(
            "max_num_seqs_cap", Inputs(sig, resolve_limits(cli={"max_num_seqs": 4, "kv_cache_tokens": 100_000}))
        )
    }
    assert (recs["--max-num-seqs"].current, recs["--max-num-seqs"].suggested) == (4, 8)


def test_seqs_cap_no_raise_when_kv_holds_no_more():
    # 4 running, requests of 30,000 tokens in a 100,000-token pool: 0.9 / 0.3 = 3 < 4: no increase
    sig = signals(
        running_avg=4.0,
        waiting_avg=10.0,
        kv_usage_avg=0.2,
        prompt_tokens_per_s=29000.0,
        generation_tokens_per_s=1000.0,
        requests_finished_per_s=1.0,
    )
    recs = recommend(
        "max_num_seqs_cap", Inputs(sig, resolve_limits(cli={"max_num_seqs": 4, "kv_cache_tokens": 100_000}))
    )
    assert all(r.flag != "--max-num-seqs" for r in recs)


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_recommendations_never_contradict_the_verdict(scenario):
    args = [
        "diagnose",
        "--no-what-if",
        "--recording",
        str(FIXTURES / "recordings" / f"scenario_{scenario}.om"),
        "--no-kube",
        "-o",
        "json",
        *scenario_cli_args(scenario),
    ]
    target = json.loads(CliRunner().invoke(cli, args).output)["targets"][0]
    for r in target["recommendations"]:
        up = (
            isinstance(r["current"], (int, float))
            and isinstance(r["suggested"], (int, float))
            and r["suggested"] > r["current"]
        )
        if target["verdict"] == "kv_cache_exhaustion":
            assert not (r["flag"] == "--max-num-seqs" and up)
            assert r["flag"] != "--max-num-batched-tokens" or not up
        if target["verdict"] in ("compute_bound", "max_num_seqs_cap"):
            assert not (r["flag"] == "--max-num-batched-tokens" and up and target["verdict"] == "compute_bound")
        if target["verdict"] == "token_budget_cap":
            assert r["flag"] == "--max-num-batched-tokens"
            assert up
    if target["verdict"] in ("healthy", "idle"):
        assert target["recommendations"] == []


def test_seqs_cap_bounded_by_kv_below_what_keeps_up_says_the_queue_still_grows():
    # 4 slots, 1 req/s served, queue +3 req/s: 4 x 4 / 1 = 16 keep up; but each request holds 10 % of KV:
    # 0.9 / 0.1 = 9 fit -> batch size 8, fewer than 16: the suggestion cannot stop the growth, and says so
    sig = signals(
        running_avg=4.0, waiting_avg=400.0, waiting_trend_per_s=3.0, requests_finished_per_s=1.0, kv_usage_avg=0.4
    )
    recs = {r.flag: r for r in recommend("max_num_seqs_cap", Inputs(sig, resolve_limits(cli={"max_num_seqs": 4})))}
    r = recs["--max-num-seqs"]
    assert (r.current, r.suggested) == (4, 8)
    assert "bounded by KV" in r.expected_effect
    assert "fewer than the 16.0 that keep up: the queue would still grow" in r.expected_effect
    # the control: with room for 180 (0.5 % each), 16 x 1.25 = 20 -> 24 is suggested and nothing is said
    roomy = signals(
        running_avg=4.0, waiting_avg=400.0, waiting_trend_per_s=3.0, requests_finished_per_s=1.0, kv_usage_avg=0.02
    )
    (r,) = [
        x
        for x in recommend("max_num_seqs_cap", Inputs(roomy, resolve_limits(cli={"max_num_seqs": 4})))
        if x.flag == "--max-num-seqs"
    ]
    assert r.suggested == 24
    assert "still grow" not in r.expected_effect


@pytest.mark.parametrize(
    ("gpu_memory", "asks"),
    [
        (None, "give --gpu-memory and --model-config to count tokens"),
        (8 * GIB, "give --model-config to count tokens"),  # the memory was given: never asked for again
    ],
)
def test_utilization_without_a_token_count_asks_only_for_what_is_missing(gpu_memory, asks):
    sig = signals(running_max=4.0)
    limits = resolve_limits(
        cache_config={"gpu_memory_utilization": "0.6", "kv_cache_size_tokens": "21520"}, gpu_memory_bytes=gpu_memory
    )
    recs = {r.flag: r for r in recommend("kv_cache_exhaustion", Inputs(sig, limits))}
    effect = recs["--gpu-memory-utilization"].expected_effect
    assert effect.startswith("+0.10 x GPU memory for KV")
    assert f"({asks})" in effect
