"""The replay's requests are streamed: the window's queue is a count of which the engine holds only the head its
scheduler can look at, and the arrivals' times are drawn one stretch at a time. Streamed or built up front, the
replay is the same to the last digit (the scheduler admits at most ``min(max_num_seqs, max_num_batched_tokens)``
requests a step, from the head of the queue: ``kvpilot.advice.limits.released_ahead``), and what it holds does not
grow with the queue.
"""

from __future__ import annotations

import dataclasses
import tracemalloc

import pytest

import kvpilot.advice.simulate as simulate_module
from kvpilot.advice.fit import LengthDistribution, WorkloadFit
from kvpilot.advice.limits import released_ahead
from kvpilot.advice.simulate import simulate
from kvpilot.engine.config import EngineConfig

CONFIG = EngineConfig(
    gpu="h100-sxm",
    model="qwen2.5-1.5b",
    kv_cache_tokens=16_000,  # 1,000 blocks of 16: the running set preempts
    max_num_seqs=48,
    max_num_batched_tokens=1024,
    max_model_len=4096,
)


def _fit(waiting: float, **kw) -> WorkloadFit:
    """A window of 60 s scraped every 10 s: 3 requests/s arriving unevenly, 30 running and ``waiting`` waiting at its
    start, lengths of several sizes.
    """
    base = dict(
        window_seconds=60.0,
        sample_interval=10.0,
        arrival_rate=3.0,
        arrivals=180.0,
        served_rate=2.0,
        prompt=LengthDistribution((60, 300, 900), (0.5, 0.3, 0.2), 318.0, "histogram"),
        output=LengthDistribution((20, 150), (0.6, 0.4), 72.0, "histogram"),
        shared_prefix_tokens=32,
        prefix_hit_rate=0.2,
        running_start=30.0,
        waiting_start=waiting,
        profile=((0.0, 10.0, 10), (10.0, 20.0, 60), (20.0, 30.0, 5), (30.0, 40.0, 45), (40.0, 60.0, 60)),
    )
    return WorkloadFit(**{**base, **kw})


def _at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole queue in the engine at once, as the replay built it before it was streamed."""
    monkeypatch.setattr(simulate_module, "released_ahead", lambda *_: 10**9)


def _tight(monkeypatch: pytest.MonkeyPatch) -> None:
    """No more than the scheduler can look at: one more than twice a step's admissions."""
    monkeypatch.setattr(simulate_module, "released_ahead", lambda seqs, tokens: 2 * min(seqs, tokens) + 1)


@pytest.mark.parametrize("replicas", [1, 3])
@pytest.mark.parametrize("caching", [True, False])
def test_a_streamed_queue_replays_as_the_whole_queue_would(monkeypatch, replicas, caching):
    config = dataclasses.replace(CONFIG, enable_prefix_caching=caching)
    fit = _fit(30_000.0)  # 30,000 waiting (10,000 a replica): more than released_ahead's floor of 4,096
    runs = []
    for how in (_at_once, _tight, None):
        with monkeypatch.context() as patch:
            if how is not None:
                how(patch)
            result = simulate(config, fit, replicas=replicas, seed=7)
        runs.append((result.prediction, result.itl_mean_s, result.arrivals, result.steps, result.simulated_s))
    assert runs[0][0].mean_waiting > 4_096  # the queue is there to stream
    assert runs[1] == runs[0]
    assert runs[2] == runs[0]


def test_the_head_released_is_more_than_a_step_admits():
    assert released_ahead(48, 1024) == 4096  # the floor
    assert released_ahead(4096, 8192) == 2 * 4096 + 1
    assert released_ahead(100_000, 3000) == 6001  # a step admits at most one request a token of its budget


def test_a_queue_of_ten_million_holds_what_the_engine_schedules():
    """10,000,000 waiting and nothing arriving, one slot: built up front about 10 GB; streamed, a few MB. The queue's
    gauge still reads it: 10,000,000 less what was served before each scrape (60 s at under 4 requests a second: at
    most 240), and nothing is left for the window's own arrivals to be admitted.
    """
    config = dataclasses.replace(CONFIG, max_num_seqs=1)
    fit = _fit(1e7, running_start=0.0, arrivals=0.0, arrival_rate=0.0, profile=())
    tracemalloc.start()
    try:
        result = simulate(config, fit, seed=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    p = result.prediction
    assert peak < 32 * 2**20
    assert 1e7 - 240 <= p.mean_waiting <= 1e7
    assert p.requests_finished_per_s > 0
    assert p.binding_limit == "max_num_seqs"
