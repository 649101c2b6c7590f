"""``binding_limit``: a window's ground truth from hand-built step records (no vLLM needed)."""

from __future__ import annotations

import pytest

from tests.reference.refusals import QUEUE_REASONS, binding_limit


def step(start: float, duration: float, refusal: str) -> dict:
    return {"start": start, "duration": duration, "refusal": refusal}


def test_the_reason_over_most_of_the_queued_time_binds():
    # 10 s window: 6 s max_num_seqs, 3 s kv_cache, 1 s nothing waiting -> queued 9 / 10
    steps = [step(0, 6, "max_num_seqs"), step(6, 3, "kv_cache"), step(9, 1, "none")]
    b = binding_limit(steps, 0, 10)
    assert b.limit == "max_num_seqs"
    assert b.queued_share == pytest.approx(0.9)
    assert b.shares["max_num_seqs"] == pytest.approx(6 / 9)
    assert b.shares["kv_cache"] == pytest.approx(3 / 9)
    assert b.steps == 3
    assert set(b.shares) == set(QUEUE_REASONS)


def test_time_weighs_not_step_count():
    # one 4 s token_budget step against three 1 s kv_cache steps: 4 s > 3 s
    steps = [step(0, 4, "token_budget")] + [step(4 + i, 1, "kv_cache") for i in range(3)]
    assert binding_limit(steps, 0, 7).limit == "token_budget"


def test_a_queue_less_than_half_the_window_is_none():
    # queued 4.9 s of 10 s (idle time counts as no queue): none; 5.0 s of 10 s: the queue binds
    assert binding_limit([step(0, 4.9, "lora")], 0, 10).limit == "none"
    assert binding_limit([step(0, 4.9, "lora")], 0, 10).shares["lora"] == 1.0
    assert binding_limit([step(0, 5.0, "lora")], 0, 10).limit == "lora"


def test_steps_are_clipped_to_the_window():
    # a 10 s kv step from t=0 counts 2 s inside [8, 12); the max_num_seqs step from 10 counts 2 s, the
    # token_budget one 1 s of its 5 (tie of 2 s broken in QUEUE_REASONS order: max_num_seqs first)
    steps = [step(0, 10, "kv_cache"), step(10, 1, "token_budget"), step(11, 5, "max_num_seqs")]
    b = binding_limit(steps, 8, 12)
    assert b.queued_share == pytest.approx(1.0)
    assert b.shares["kv_cache"] == pytest.approx(0.5)
    assert b.shares["token_budget"] == pytest.approx(0.25)
    assert b.limit == "kv_cache"
    tie = binding_limit([step(0, 2, "kv_cache"), step(2, 2, "max_num_seqs")], 0, 4)
    assert tie.limit == "max_num_seqs"


def test_no_steps_is_none_and_bad_input_is_refused():
    b = binding_limit([], 0, 10)
    assert (b.limit, b.queued_share, b.steps) == ("none", 0.0, 0)
    with pytest.raises(ValueError, match="empty window"):
        binding_limit([], 5, 5)
    with pytest.raises(ValueError, match="unknown refusal 'budget'"):
        binding_limit([step(0, 1, "budget")], 0, 1)
