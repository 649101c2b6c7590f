"""Rules on hand-built signals: each verdict, thresholds derived from limits, precedence.

Signals are set directly (the computation is tested in test_signals.py); expected verdicts
follow docs/diagnosis.md.
"""

from __future__ import annotations

import math

import pytest

from kvpilot.api.models import EngineSpec
from kvpilot.diagnose.facts import budget_binds, compute_knee, kv_ceiling, steps_full
from kvpilot.diagnose.limits import Limit, resolve_limits
from kvpilot.diagnose.rules import diagnose_target
from kvpilot.diagnose.signals import Signals, finish_signals

WINDOW = 300.0


def make(**values) -> Signals:
    """Signals of a live target (30 samples, last one fresh) with ``values`` set."""
    base = {
        "samples_in_window": 30.0,
        "last_sample_time": 1000.0,
        "preemptions_increase": 0.0,
        "running_min": values.get("running_avg"),
        "running_max": values.get("running_avg"),
    }
    base.update(values)
    sig = Signals(values=base, window_seconds=WINDOW, end=1000.0)
    buckets = base.pop("iteration_buckets", None)
    if buckets:
        sig.buckets["iteration_tokens"] = buckets
    return finish_signals(sig)


def test_no_data_without_running_or_waiting():
    d = diagnose_target(make(kv_usage_avg=0.5), resolve_limits())
    assert (d.verdict, d.severity) == ("no_data", "unknown")


def test_target_down_when_the_series_stopped():
    # 30 samples in 300 s = one every 10 s; last sample 100 s before the end > 3 intervals (30 s)
    d = diagnose_target(make(running_avg=1, waiting_avg=0, last_sample_time=900.0), resolve_limits())
    assert d.verdict == "target_down"
    assert "100 s old" in d.evidence[0]
    # 25 s old is within 3 intervals: alive
    assert (
        diagnose_target(
            make(running_avg=1, waiting_avg=0, waiting_max=0, last_sample_time=975.0), resolve_limits()
        ).verdict
        != "target_down"
    )


def test_idle_and_healthy():
    assert (
        diagnose_target(make(running_avg=0, running_max=0, waiting_avg=0, waiting_max=0), resolve_limits()).verdict
        == "idle"
    )
    d = diagnose_target(
        make(running_avg=3, waiting_avg=0, waiting_max=0, kv_usage_avg=0.1, kv_usage_max=0.2),
        resolve_limits(cli={"max_num_seqs": 8}),
    )
    assert (d.verdict, d.severity) == ("healthy", "ok")


IDLE_GAUGES = {"running_avg": 0, "running_max": 0, "waiting_avg": 0, "waiting_max": 0}


def test_idle_needs_flat_work_counters():
    # the gauges at 0 in every sample and the counters flat: nothing ran
    flat = make(**IDLE_GAUGES, prompt_tokens_per_s=0.0, generation_tokens_per_s=0.0, requests_finished_per_s=0.0)
    assert diagnose_target(flat, resolve_limits()).verdict == "idle"


@pytest.mark.parametrize(
    ("counter", "rate", "shown"),
    [
        # a busy server sampled twice (--quick) between its requests: 955 prompt tokens/s, 2 requests/s
        ("prompt_tokens_per_s", 955.0, "955 prompt tokens/s (vllm:prompt_tokens_total)"),
        ("generation_tokens_per_s", 40.0, "40 generated tokens/s (vllm:generation_tokens_total)"),
        ("requests_finished_per_s", 2.0, "2 requests finished/s (vllm:request_success_total)"),
    ],
)
def test_a_rising_work_counter_is_not_idle(counter, rate, shown):
    # running and waiting read 0 in both samples, yet a counter rose: requests ran between the samples
    d = diagnose_target(make(**IDLE_GAUGES, **{counter: rate}), resolve_limits())
    assert (d.verdict, d.severity) == ("healthy", "ok")
    assert not any("No request ran" in line for line in d.evidence)
    assert any("requests ran between the samples" in line and shown in line for line in d.evidence)


def test_kv_shortage_wins_over_running_at_max_num_seqs():
    # running == max_num_seqs == 4 AND preemptions with KV at 1.0: still a KV shortage
    # (docs/diagnosis.md, kv_cache_exhaustion)
    sig = make(
        running_avg=4,
        running_max=4,
        waiting_avg=6,
        waiting_max=9,
        waiting_trend_per_s=0.02,
        kv_usage_avg=0.97,
        kv_usage_max=1.0,
        preemptions_increase=12,
        preemptions_per_s=0.04,
    )
    d = diagnose_target(sig, resolve_limits(cli={"max_num_seqs": 4}))
    assert d.verdict == "kv_cache_exhaustion"
    assert "binds first" in " ".join(d.evidence)
    assert all(r.flag != "--max-num-seqs" or r.suggested <= r.current for r in d.recommendations)


def test_kv_ceiling_below_one_from_capacity_waiting_with_free_slots():
    # 10 running use 60 % of KV: 6 % each -> ceiling 1 - 2 x 0.06 = 0.88; KV peaked at 0.9 >= 0.88,
    # 5 requests wait for capacity while 246 of 256 slots are free: the ceiling binds well below 1.0
    sig = make(
        running_avg=10,
        running_max=10,
        waiting_avg=5,
        waiting_max=7,
        waiting_trend_per_s=0.0,
        kv_usage_avg=0.6,
        kv_usage_max=0.9,
        waiting_capacity_avg=5,
    )
    ceiling, _ = kv_ceiling(sig, resolve_limits())
    assert ceiling == 0.88
    d = diagnose_target(sig, resolve_limits(cli={"max_num_seqs": 256}))
    assert d.verdict == "kv_cache_exhaustion"
    assert 'reason="capacity"' in " ".join(d.evidence)


def test_ceiling_is_derived_from_the_limits_not_a_fixed_percentage():
    # the same KV 0.80 is at the ceiling for a server whose requests hold 15 % each (ceiling 0.70) ...
    big = make(running_avg=4, running_max=4, waiting_avg=3, waiting_max=5, kv_usage_avg=0.6, kv_usage_max=0.8)
    assert diagnose_target(big, resolve_limits(cli={"max_num_seqs": 64})).verdict == "kv_cache_exhaustion"
    # ... and far from it for one whose requests hold 1 % each (ceiling 0.98): with 196 of 256 slots free and
    # KV room, vLLM's admission logic leaves the token budget (default 2,048 on an unknown GPU) as the only
    # limit that can have refused the queue: a token-budget cap by elimination, never compute
    small = make(running_avg=60, running_max=60, waiting_avg=3, waiting_max=5, kv_usage_avg=0.6, kv_usage_max=0.8)
    d = diagnose_target(small, resolve_limits(cli={"max_num_seqs": 256}))
    assert d.verdict == "token_budget_cap"
    assert "elimination" in d.evidence[0]
    # 0.8 - 0.2 (the budget is vLLM's default assumed: its size decides the verdict)
    assert d.confidence == 0.6


def test_max_num_seqs_cap_threshold_scales_with_the_limit():
    # pinned means running_avg >= max_num_seqs - 0.5: 3.6 of 4 is pinned, 250 of 256 is not
    sig4 = make(running_avg=3.6, running_max=4, waiting_avg=5, waiting_max=8, kv_usage_avg=0.05, kv_usage_max=0.06)
    assert diagnose_target(sig4, resolve_limits(cli={"max_num_seqs": 4})).verdict == "max_num_seqs_cap"
    sig256 = make(running_avg=250, running_max=256, waiting_avg=5, waiting_max=8, kv_usage_avg=0.3, kv_usage_max=0.35)
    assert diagnose_target(sig256, resolve_limits(cli={"max_num_seqs": 256})).verdict != "max_num_seqs_cap"


def test_max_num_seqs_cap_inferred_from_a_flat_running_gauge_when_unconfigured():
    sig = make(
        running_avg=8,
        running_min=8,
        running_max=8,
        waiting_avg=20,
        waiting_max=30,
        kv_usage_avg=0.04,
        kv_usage_max=0.05,
    )
    d = diagnose_target(sig, resolve_limits())  # max_num_seqs unknown -> default 256
    assert d.verdict == "max_num_seqs_cap"
    assert d.confidence < 0.7
    assert "inferred" in d.evidence[0]


#: a growing queue beside steps full at a 512-token budget: steps in (256, 512] -> 95 of 100 -> share 0.95; mean
#: 500 tokens = 98 % of the budget
FULL_STEPS = dict(
    running_avg=6,
    running_max=8,
    waiting_avg=40,
    waiting_max=60,
    waiting_trend_per_s=0.2,
    iteration_buckets=[(256.0, 5.0), (512.0, 100.0), (math.inf, 100.0)],
    iteration_tokens_sum_increase=50000.0,
    iteration_steps_increase=100.0,
)


def test_token_budget_cap_needs_full_steps():
    sig = make(**FULL_STEPS, kv_usage_avg=0.1, kv_usage_max=0.12)
    d = diagnose_target(sig, resolve_limits(cli={"max_num_seqs": 128, "max_num_batched_tokens": 512}))
    assert d.verdict == "token_budget_cap"
    r = d.recommendations[0]
    assert (r.flag, r.current, r.suggested) == ("--max-num-batched-tokens", 512, 1024)


def test_full_steps_hold_the_queue_between_a_few_preemptions():
    # the same full steps (500 of a 512-token budget) with KV at its peak and 10 preemptions in 100 steps: a step
    # that preempts admits nobody, and every other full step refused the head on the budget before it asked the KV
    # cache for blocks (vLLM 0.29, a drawn scenario: 10 preemptions in 435 full steps, the head refused on the
    # budget in 88 % of the queued time) -> the budget, the preemptions a secondary KV finding
    full = dict(FULL_STEPS, kv_usage_avg=0.9, kv_usage_max=1.0)
    lim = resolve_limits(cli={"max_num_seqs": 128, "max_num_batched_tokens": 512})
    d = diagnose_target(make(**full, preemptions_increase=10.0), lim)
    assert d.verdict == "token_budget_cap"
    assert [f.verdict for f in d.findings] == ["kv_cache_exhaustion"]
    assert "10 of 100 preempted" in " ".join(d.findings[0].evidence)
    # preemptions in half the steps or more: those steps admitted nobody on the KV cache -> the KV cache
    assert diagnose_target(make(**full, preemptions_increase=50.0), lim).verdict == "kv_cache_exhaustion"
    # steps not full (200 of 512 tokens): nothing refused the head before the KV cache -> the KV cache
    half = {**full, "iteration_tokens_sum_increase": 20000.0}
    assert diagnose_target(make(**half, preemptions_increase=10.0), lim).verdict == "kv_cache_exhaustion"


def test_steps_full_and_the_compute_knee():
    assert steps_full(0.95, 500, 512)  # share >= 0.5 and 98 % fill
    assert not steps_full(0.95, 200, 512)  # 39 % fill: steps not full
    assert not steps_full(None, 52446, 65000)  # 80.7 % fill < 90 %
    assert steps_full(None, 64000, 65000)
    assert not steps_full(None, None, 2048)
    # H100 knee: 989e12 FLOP/s / 3.35e12 B/s = 295.2 tokens per step (docs/background.md §1)
    knee, how = compute_knee(resolve_limits(gpu_name="H100"))
    assert knee == pytest.approx(295.2, abs=0.1)
    assert "h100" in how
    # full steps are a budget cap below vLLM's large-GPU default 8,192; at or above it compute-bound (C12: 65,000)
    assert budget_binds(steps_full(None, 256, 256), 256)
    assert budget_binds(steps_full(None, 7373, 8191), 8191)
    assert not budget_binds(steps_full(None, 7400, 8192), 8192)  # 7,373 / 8,191 = 90.01 % full, 8,192 compute
    assert not budget_binds(steps_full(None, 64000, 65000), 65000)
    assert not budget_binds(steps_full(None, 7371, 8191), 8191)  # 89.99 % fill: not full
    # unknown GPU: the largest knee of the profiles, L4: 121e12 / 300e9 = 403.3
    assert compute_knee(resolve_limits())[0] == pytest.approx(403.3, abs=0.1)


def test_full_steps_past_the_knee_are_compute_bound():
    sig = make(
        running_avg=11,
        running_max=13,
        running_min=9,
        waiting_avg=200,
        waiting_max=400,
        waiting_trend_per_s=1.5,
        kv_usage_avg=0.13,
        kv_usage_max=0.15,
        iteration_tokens_sum_increase=64000.0 * 100,
        iteration_steps_increase=100.0,
    )
    d = diagnose_target(
        sig, resolve_limits(cli={"max_num_seqs": 256, "max_num_batched_tokens": 65000}, gpu_name="H100")
    )
    # a 65,000-token budget on an H100 is 65,000 / 295.2 = 220.2x the knee
    assert d.verdict == "compute_bound"
    assert "220.2x the 295 tokens at which compute binds" in " ".join(d.evidence)


def test_prefix_thrash_needs_some_hits_and_queries_beyond_kv_capacity():
    common = dict(running_avg=1, running_max=2, waiting_avg=0, waiting_max=0, kv_usage_avg=0.2, kv_usage_max=0.3)
    limits = resolve_limits(cli={"kv_cache_tokens": 50000})
    thrash = make(prefix_queries_increase=400000.0, prefix_hits_increase=40000.0, **common)
    d = diagnose_target(thrash, limits)
    # 400,000 queried - 40,000 hits = 360,000 tokens written = 7.2x the 50,000-token cache
    assert d.verdict == "prefix_cache_ineffective"
    assert "7.2x the KV capacity" in " ".join(d.evidence)
    # zero hits on traffic that may share nothing: no claim
    unique = make(prefix_queries_increase=400000.0, prefix_hits_increase=0.0, **common)
    assert diagnose_target(unique, limits).verdict == "healthy"
    # plenty of hits: fine
    good = make(prefix_queries_increase=400000.0, prefix_hits_increase=300000.0, **common)
    assert diagnose_target(good, limits).verdict == "healthy"


def test_hot_shared_prefix_over_a_long_window_is_not_thrash():
    # the healthy scenario live over 600 simulated seconds: 1,000-token prompts sharing a 500-token system
    # prompt, hit rate 49.9 % (570,478 of 1,143,356), KV capacity 1,087,424 tokens. Queried tokens exceed the
    # capacity (1.05x) only because the window is long; the tokens written to the cache (1,143,356 - 570,478
    # = 572,878) fill half of it: nothing was evicted, LRU cannot have cost a hit.
    sig = make(
        running_avg=3.3,
        running_max=6,
        waiting_avg=0,
        waiting_max=0,
        kv_usage_avg=0.002,
        kv_usage_max=0.004,
        prefix_queries_increase=1143356.0,
        prefix_hits_increase=570478.0,
        requests_finished_increase=1150.0,
    )
    d = diagnose_target(sig, resolve_limits(cli={"kv_cache_tokens": 1087424, "max_num_seqs": 1024}))
    assert d.verdict == "healthy"
    assert not d.findings


def test_shared_prefix_traffic_turning_the_cache_over_is_not_thrash():
    # the healthy scenario read live over ~20 simulated minutes (review finding): a 500-token system prompt
    # on ~1,000-token prompts hits 49.7 %, and the tokens written (2,370,000 - 1,177,890 = 1,192,110) exceed
    # the 1,087,424-token cache (1.1x). Turnover alone is circumstantial; a hit rate near the shared share
    # of the prompt is what a hot prefix gives, not thrash (which drives hits towards 0, §9).
    sig = make(
        running_avg=3.3,
        running_max=6,
        waiting_avg=0,
        waiting_max=0,
        kv_usage_avg=0.002,
        kv_usage_max=0.004,
        prefix_queries_increase=2370000.0,
        prefix_hits_increase=1177890.0,
        requests_finished_increase=2370.0,
    )
    d = diagnose_target(sig, resolve_limits(cli={"kv_cache_tokens": 1087424, "max_num_seqs": 1024}))
    assert d.verdict == "healthy"
    assert not d.findings
    # the same turnover with 12 % hits (the prefix-thrash scenario's rate) is thrash
    thrash = make(
        running_avg=3.3,
        running_max=6,
        waiting_avg=0,
        waiting_max=0,
        kv_usage_avg=0.9,
        kv_usage_max=0.95,
        prefix_queries_increase=2370000.0,
        prefix_hits_increase=284400.0,
        requests_finished_increase=2370.0,
    )
    d = diagnose_target(thrash, resolve_limits(cli={"kv_cache_tokens": 1087424, "max_num_seqs": 1024}))
    assert d.verdict == "prefix_cache_ineffective"


def test_preemption_recompute_hits_are_discounted():
    # 100 hits of 1,000 queried (10 %) but 2 preemptions x 50 prompt tokens/request could produce them all
    sig = make(
        running_avg=2,
        running_max=2,
        waiting_avg=0,
        waiting_max=0,
        kv_usage_avg=0.5,
        kv_usage_max=0.6,
        prefix_queries_increase=1000.0,
        prefix_hits_increase=100.0,
        preemptions_increase=2.0,
        requests_finished_increase=20.0,
    )
    d = diagnose_target(sig, resolve_limits(cli={"kv_cache_tokens": 100, "block_size": 64}))
    prefix = [f for f in [d, *d.findings] if f.verdict == "prefix_cache_ineffective"]
    assert prefix
    assert "0.0 %" in prefix[0].evidence[0]
    assert "preemption recompute" in prefix[0].evidence[0]


def test_limit_sources_in_precedence_order():
    # the command line overrides; then spec > pod args > pod log > cache_config_info > default
    lim = resolve_limits(
        EngineSpec.model_validate({"maxNumSeqs": 8, "maxModelLen": 4096}),
        {"max_num_seqs": 4, "max_num_batched_tokens": 1024},
        {"num_gpu_blocks": "100", "block_size": "16", "gpu_memory_utilization": "0.6"},
        gpu_memory_bytes=80 * 2**30,
        gpu_name="H100",
        pod_args={"max_num_seqs": 16, "max_model_len": 2048, "tensor_parallel_size": 2},
        pod_log={"max_num_seqs": 32, "tensor_parallel_size": 4, "kv_cache_dtype": "fp8"},
    )
    assert lim.max_num_seqs == Limit(4, "cli")
    assert lim.max_num_batched_tokens == Limit(1024, "cli")
    assert lim.max_model_len == Limit(4096, "spec")
    assert lim.tensor_parallel_size == Limit(2, "pod args")
    assert lim.kv_cache_dtype == Limit("fp8", "pod log")
    assert lim.gpu_memory_utilization == Limit(0.6, "cache_config_info")
    assert lim.kv_cache_tokens == Limit(1600, "derived")  # 100 blocks x 16
    assert resolve_limits().max_model_len.value is None
    # defaults by GPU tier (docs/background.md §7): >= 70 GiB non-A100 -> 1024 / 8192; A100 -> 256 / 2048
    big = resolve_limits(gpu_memory_bytes=80 * 2**30, gpu_name="H100")
    assert (big.max_num_seqs, big.max_num_batched_tokens) == (Limit(1024, "default"), Limit(8192, "default"))
    a100 = resolve_limits(gpu_memory_bytes=80 * 2**30, gpu_name="A100-80GB")
    assert (a100.max_num_seqs.value, a100.max_num_batched_tokens.value) == (256, 2048)
    assert resolve_limits(gpu_memory_bytes=192 * 2**30, gpu_name="B200").max_num_batched_tokens.value == 16384
