"""The simulated window: what the engine model's run adds up to, on workloads whose answer is arithmetic.

Step time (docs/engine.md, the engine's roofline) of Qwen2.5-1.5B on an H100 SXM for one request with ~150
tokens of context: 1.5 ms overhead + 3.08e9 B of weights / (3.35e12 B/s x 0.70) = 1.3134 ms + 150 x 28,672 B /
2.345e12 B/s = 0.0018 ms -> 2.8152 ms (a 100-token prefill computes 100 x 3.08e9 FLOP / 771e12 = 0.40 ms: memory
bound). A request of 100 prompt and 100 output tokens alone takes 100 steps (the prefill samples the first token).
"""

from __future__ import annotations

import dataclasses

import pytest

from kvpilot.advice.fit import LengthDistribution, WorkloadFit
from kvpilot.advice.simulate import refusal, simulate, warmup_seconds
from kvpilot.engine.config import EngineConfig
from kvpilot.engine.core import StepOutput

STEP = 1.5e-3 + 3.08e9 / (3.35e12 * 0.7) + 150 * 28_672 / (3.35e12 * 0.7)
LIFETIME = 100 * STEP  # 0.28152 s
CONFIG = EngineConfig(
    gpu="h100-sxm",
    model="qwen2.5-1.5b",
    kv_cache_tokens=100_000,
    max_num_seqs=1,
    max_num_batched_tokens=2048,
    max_model_len=8192,
)


def _fit(rate: float, window: float = 60.0, **kw) -> WorkloadFit:
    fixed = LengthDistribution((100,), (1.0,), 100.0, "histogram")
    base = dict(
        window_seconds=window,
        sample_interval=10.0,
        arrival_rate=rate,
        arrivals=rate * window,
        served_rate=rate,
        prompt=fixed,
        output=fixed,
        shared_prefix_tokens=0,
        prefix_hit_rate=None,
        running_start=0.0,
        waiting_start=0.0,
    )
    return WorkloadFit(**{**base, **kw})


def test_one_slot_under_overload_serves_one_request_per_lifetime():
    p = simulate(CONFIG, _fit(10.0)).prediction
    assert p.requests_finished_per_s == pytest.approx(1 / LIFETIME, rel=0.01)  # 3.552 req/s
    assert p.binding_limit == "max_num_seqs"
    assert p.queue_growing is True
    assert p.binding_shares["max_num_seqs"] == pytest.approx(1.0, abs=0.01)
    # scrapes at 0, 10, ..., 60 s: the first before anything ran (the window starts empty), then 1 running, or 0
    # when the scrape follows a step that finished a request (vLLM admits the next one in the next step)
    assert 5 / 7 - 1e-9 <= p.mean_running <= 6 / 7 + 1e-9
    assert p.generation_tokens_per_s == pytest.approx(100 / LIFETIME, rel=0.01)


def test_a_light_load_is_served_as_it_arrives():
    result = simulate(CONFIG, _fit(0.5, window=120.0))
    p = result.prediction
    assert p.requests_finished_per_s == pytest.approx(result.arrivals / 120.0, abs=1 / 120)  # the last may not finish
    assert p.binding_limit == "none"
    assert p.queue_growing is False
    assert result.itl_mean_s == pytest.approx(STEP, rel=0.01)


def test_the_window_s_queue_is_served_first_and_its_queue_time_counts_from_before():
    # 50 waiting at the start, nothing arriving after: served one after another, 50 x 0.2815 = 14 s
    p = simulate(CONFIG, _fit(0.0, waiting_start=50.0)).prediction
    assert p.requests_finished_per_s == pytest.approx(50 / 60)
    # the i-th (0-based) is admitted after i lifetimes: mean (0 + ... + 49) / 50 = 24.5 lifetimes = 6.90 s
    assert p.queue_time_mean_s == pytest.approx(24.5 * LIFETIME, rel=0.01)
    assert p.queue_growing is False
    assert p.waiting_trend_per_s < 0


def test_replicas_split_the_arrivals_and_add_up_the_rates():
    # 10 req/s over 2 one-slot replicas: each overloaded, 2 x 3.552 req/s
    p = simulate(CONFIG, _fit(10.0), replicas=2).prediction
    assert p.requests_finished_per_s == pytest.approx(2 / LIFETIME, rel=0.01)
    assert 5 / 7 - 1e-9 <= p.mean_running <= 6 / 7 + 1e-9  # per replica


def test_a_running_set_at_the_start_warms_up_first():
    fit = _fit(2.0, running_start=1.0, served_rate=2.0)
    assert warmup_seconds(fit) == 5.0  # 3 lifetimes of Little's 1 / 2 s = 1.5 s, at least 5 s
    assert warmup_seconds(_fit(2.0)) == 0.0
    assert warmup_seconds(_fit(2.0, running_start=100.0, served_rate=1.0)) == 30.0  # at most half the window
    result = simulate(CONFIG, fit)
    assert result.simulated_s >= 65.0  # 5 s of warm-up, then the 60 s window


def _out(waiting: int, running: int = 1, tokens: int = 10, preemptions: int = 0) -> StepOutput:
    return StepOutput(0.0, 0.01, tokens, running, 0, 0, preemptions, 0, 0, 0, 0, running, waiting, 0.5)


def test_the_refusal_of_a_step_follows_vllm_s_order():
    limits = EngineConfig(max_num_seqs=4, max_num_batched_tokens=64, kv_cache_tokens=10_000).resolved().batch_limits()
    assert refusal(_out(waiting=0), limits) == "none"
    assert refusal(_out(waiting=1, running=4, tokens=64, preemptions=1), limits) == "kv_cache"  # no admission
    assert refusal(_out(waiting=1, running=4, tokens=64), limits) == "token_budget"  # the loop's condition first
    assert refusal(_out(waiting=1, running=4, tokens=63), limits) == "max_num_seqs"
    assert refusal(_out(waiting=1, running=3, tokens=63), limits) == "kv_cache"  # allocate_slots found no room


def test_a_kv_cache_beyond_what_the_engine_model_holds_is_refused_not_allocated():
    # 2**22 blocks of 16 tokens = 67,108,864 tokens simulate; one block more is refused with the count, before the
    # engine model lays out a free list of 1.1e29 ids (an OverflowError) or of a few hundred million (GiBs)
    simulate(dataclasses.replace(CONFIG, kv_cache_tokens=2**22 * 16), _fit(0.1, window=10.0))
    with pytest.raises(ValueError, match=r"4,194,305 blocks, above the 4,194,304 one simulated server holds"):
        simulate(dataclasses.replace(CONFIG, kv_cache_tokens=(2**22 + 1) * 16), _fit(0.1, window=10.0))
    with pytest.raises(ValueError, match="blocks, above the 4,194,304"):
        simulate(dataclasses.replace(CONFIG, kv_cache_tokens=int("1" * 30)), _fit(0.1, window=10.0))


@pytest.mark.parametrize(
    ("flags", "kw"),
    [
        # a token budget cap: every step prefills a chunk of a long prompt beside the decodes (a shared prefix hit)
        (
            {"max_num_seqs": 128, "max_num_batched_tokens": 256},
            {"prompt": LengthDistribution((1500, 2500), (0.5, 1.0), 2000.0, "histogram"), "shared_prefix_tokens": 1200},
        ),
        # a sequence cap: decode stretches, admissions whose whole prompt fits
        ({"max_num_seqs": 4}, {"output": LengthDistribution((300,), (1.0,), 300.0, "histogram")}),
    ],
)
def test_fast_forwarding_predicts_exactly_what_stepping_predicts(flags, kw):
    config = dataclasses.replace(CONFIG, **flags)
    fit = _fit(12.0, window=30.0, sample_interval=3.0, running_start=2.0, waiting_start=5.0, **kw)
    stepped = simulate(config, fit, fast_forward=False)
    fast = simulate(config, fit)
    for field in ("prediction", "itl_mean_s", "arrivals", "steps", "simulated_s"):
        assert getattr(fast, field) == getattr(stepped, field), field
    assert fast.prediction.binding_shares  # requests waited: the shares were counted, step by step
