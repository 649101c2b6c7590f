"""``P``: the replay check's tolerances on both sides of each threshold, queue growth, the observed binding limit."""

from __future__ import annotations

import pytest

from kvpilot.advice.observe import observed_binding, observed_prediction
from kvpilot.advice.prediction import compare, queue_grows
from kvpilot.diagnose.model import Prediction
from kvpilot.diagnose.signals import Signals

WINDOW = Prediction(
    requests_finished_per_s=10.0,
    prompt_tokens_per_s=10_000.0,
    generation_tokens_per_s=1_000.0,
    queue_time_mean_s=20.0,
    mean_running=40.0,
    mean_waiting=100.0,
    max_kv_usage=0.5,
    binding_limit="token_budget",
)


def _with(**changes) -> Prediction:
    from dataclasses import replace

    return replace(WINDOW, **changes)


@pytest.mark.parametrize(
    ("changes", "missed"),
    [
        ({}, []),
        # throughput: 10 % of 10 req/s: 9.0 is in, 8.99 out (and 11.0 in, 11.01 out)
        ({"requests_finished_per_s": 9.0}, []),
        ({"requests_finished_per_s": 8.99}, ["requests_finished_per_s"]),
        ({"requests_finished_per_s": 11.01}, ["requests_finished_per_s"]),
        # queue time: 30 % of 20 s = 6 s: 26 s in, 26.1 s out
        ({"queue_time_mean_s": 26.0}, []),
        ({"queue_time_mean_s": 26.1}, ["queue_time_mean_s"]),
        # running: 10 % of 40 = 4
        ({"mean_running": 36.0}, []),
        ({"mean_running": 35.9}, ["mean_running"]),
        # KV peak: 0.1 absolute
        ({"max_kv_usage": 0.6}, []),
        ({"max_kv_usage": 0.61}, ["max_kv_usage"]),
        # the binding limit must be equal
        ({"binding_limit": "kv_cache"}, ["binding_limit"]),
        ({"queue_time_mean_s": None}, ["queue_time_mean_s"]),  # the replay must produce what the window shows
    ],
)
def test_replay_tolerances(changes, missed):
    assert [m.key for m in compare(_with(**changes), WINDOW)] == missed


def test_a_queue_time_of_seconds_has_a_one_second_floor():
    short = _with(queue_time_mean_s=0.5)
    assert compare(_with(queue_time_mean_s=1.5), short) == []  # 1 s apart: within "30 % or 1 s"
    assert [m.key for m in compare(_with(queue_time_mean_s=1.51), short)] == ["queue_time_mean_s"]
    # an unknown observation is not checked
    assert compare(_with(queue_time_mean_s=99.0), _with(queue_time_mean_s=None)) == []


def test_the_replay_must_agree_on_whether_the_queue_grows():
    # every recommendation turns on "the queue stops growing": a replay whose queue grows where the window's did
    # not (or the other way round) misses, whatever its mean waiting; an unknown observation is not checked
    grows = _with(queue_growing=True, waiting_trend_per_s=33.56)
    flat = _with(queue_growing=False, waiting_trend_per_s=0.1)
    assert compare(grows, _with(queue_growing=True, waiting_trend_per_s=2.6)) == []
    (miss,) = compare(grows, flat)
    assert miss.key == "queue_growing"
    assert miss.sentence() == "the queue: replay growing 33.6/s, window not growing (0.1/s) (allowed equal)"
    assert [m.key for m in compare(flat, grows)] == ["queue_growing"]
    assert compare(grows, _with(queue_growing=None)) == []


def test_a_miss_says_by_how_much():
    (miss,) = compare(_with(requests_finished_per_s=5.0), WINDOW)
    assert miss.sentence() == "requests finished per second: replay 5, window 10 (allowed 10 %)"


def test_queue_growth_needs_a_request_and_two_percent_of_the_arrivals():
    # 300 s window: 1 request gained is growth with few arrivals; with 1,000 arrivals it takes 20
    assert queue_grows(1 / 300, 300.0, 10) is True
    assert queue_grows(0.99 / 300, 300.0, 10) is False
    assert queue_grows(19.9 / 300, 300.0, 1000) is False
    assert queue_grows(20 / 300, 300.0, 1000) is True
    assert queue_grows(None, 300.0, 10) is None


def _signals(**values) -> Signals:
    base = {
        "waiting_avg": 10.0,
        "preemptions_increase": 0.0,
        "tokens_per_step_avg": 100.0,
        "running_avg": 10.0,
        "kv_usage_max": 0.5,
    }
    return Signals(values={**base, **values}, window_seconds=300.0)


def test_the_observed_binding_limit_follows_vllm_s_order():
    # no standing queue: none
    assert observed_binding(_signals(waiting_avg=0.49), 16, 2048, 0.9, "max_num_seqs_cap") == "none"
    # a preemption: kv_cache (vLLM admits nothing in a step that preempted)
    assert observed_binding(_signals(preemptions_increase=1.0, running_avg=16), 16, 2048, 0.9, "x") == "kv_cache"
    # steps full (90 % of the budget) before running at the cap: the budget is the loop's condition
    assert observed_binding(_signals(tokens_per_step_avg=1843.2, running_avg=16), 16, 2048, 0.9, "x") == "token_budget"
    assert observed_binding(_signals(tokens_per_step_avg=1843.1, running_avg=16), 16, 2048, 0.9, "x") == "max_num_seqs"
    # running pinned (within 0.5 of the cap) before KV at its ceiling: the cap is checked before allocate_slots
    assert observed_binding(_signals(running_avg=15.5, kv_usage_max=0.95), 16, 2048, 0.9, "x") == "max_num_seqs"
    assert observed_binding(_signals(running_avg=15.4, kv_usage_max=0.95), 16, 2048, 0.9, "x") == "kv_cache"
    # half the queue deferred (LoRA slots, KV transfer): lora, which the engine model never reproduces
    assert observed_binding(_signals(waiting_deferred_avg=5.0), 16, 2048, 0.9, "x") == "lora"
    assert observed_binding(_signals(waiting_deferred_avg=4.9), 16, 2048, 0.9, "compute_bound") == "token_budget"
    # none of them: the verdict's limit; no gauge: unknown
    assert observed_binding(_signals(), 16, 2048, 0.9, "compute_bound") == "token_budget"
    assert observed_binding(Signals(values={}), 16, 2048, 0.9, "healthy") is None


def test_the_observed_window_reads_the_histogram_means():
    s = _signals(requests_finished_per_s=2.0, requests_finished_increase=600.0, waiting_trend_per_s=0.1)
    s.values["queue_time_mean_s"] = 300.0 / 600.0  # the diagnosis' own mean of request_queue_time_seconds
    s.fit.update(ttft_sum_increase=900.0, ttft_count_increase=600.0)
    p = observed_prediction(s, "max_num_seqs")
    assert (p.queue_time_mean_s, p.ttft_mean_s, p.binding_limit) == (0.5, 1.5, "max_num_seqs")
    # 0.1 req/s x 300 s = 30 gained of 630 arrived (4.8 %): growing
    assert p.queue_growing is True
