"""The engine's public pieces a driver of its own uses (Engine.admit, sample, finish, count_step; StepOutput.build),
with values from hand arithmetic; StepOutput.build is StepOutput by another road.
"""

from __future__ import annotations

import dataclasses
import inspect

from kvpilot.engine import Engine, EngineConfig, Request, StepOutput
from kvpilot.engine.core import Admission, Sampled


def _engine(**kw) -> Engine:
    base = {"gpu": "h100-sxm", "model": "qwen2.5-1.5b", "max_model_len": 1600, "num_gpu_blocks": 101}  # 100 usable
    base.update(kw)
    return Engine(EngineConfig(**base), keep_finished=True)


def test_step_output_build_has_every_field_and_gives_what_the_dataclass_gives():
    fields = {f.name: f for f in dataclasses.fields(StepOutput)}
    params = inspect.signature(StepOutput.build).parameters
    assert set(params) == set(fields)
    values = {name: i + 1 for i, name in enumerate(fields)}
    values.update(
        finished=[],
        ttfts=[0.5],
        itl_counts=[(0.01, 3)],
        start=1.5,
        duration=0.25,
        kv_cache_usage=0.75,
        durations=[0.25],
    )
    assert StepOutput.build(**values) == StepOutput(**values)
    # the defaults: counters 0, empty lists, one step
    minimal = {"start": 0.0, "duration": 1.0, "num_tokens": 2, "num_scheduled": 2, "running": 2, "waiting": 0}
    built = StepOutput.build(**minimal, kv_cache_usage=0.5)
    assert built == StepOutput(
        **minimal,
        prompt_tokens=0,
        generation_tokens=0,
        preemptions=0,
        prefix_queries=0,
        prefix_hits=0,
        external_queries=0,
        external_hits=0,
        kv_cache_usage=0.5,
    )
    assert built.finished is not StepOutput.build(**minimal, kv_cache_usage=0.5).finished  # a new list each time


def test_admit_schedules_the_head_of_the_queue_and_says_what_it_cost():
    eng = _engine(max_num_batched_tokens=256, max_num_seqs=8)
    eng.add_request(Request("a", 100, 3))
    eng.add_request(Request("b", 200, 3))
    scheduled: list[Request] = []
    adm = eng.admit(256, 0.0, scheduled)
    # a's 100 tokens fit the 256; b's 200 do not fit the 156 left, chunked: 156 of them
    assert [r.request_id for r in scheduled] == ["a", "b"]
    assert adm.budget == 0
    assert adm.context == 100 + 156
    # attention pairs: token i of a prompt attends to i + 1 tokens: 100 * 101 / 2 + 156 * 157 / 2
    assert adm.pairs == 5050 + 12246
    assert (adm.prefix_queries, adm.prefix_hits) == (300, 0)  # whole prompts queried, nothing cached before
    assert adm.load_tokens == 0
    a, b = scheduled
    assert (a.capacity, b.capacity) == (7 * 16, 10 * 16)  # ceil(100 / 16) = 7 blocks, ceil(156 / 16) = 10
    assert eng.pool.num_free == 100 - 17
    assert a.num_cached_blocks == 6
    assert b.num_cached_blocks == 9
    assert isinstance(adm, Admission)


def test_admit_stops_at_a_request_that_does_not_fit_and_counts_hits():
    eng = _engine(max_num_batched_tokens=4096, max_num_seqs=8)
    shared = (("system", 64), ("a", 36))
    eng.add_request(Request("a", 100, 3, segments=shared))
    eng.add_request(Request("b", 100, 3, segments=(("system", 64), ("b", 36))))
    eng.add_request(Request("c", 1599, 3))  # its whole prompt needs 100 blocks: 90 are free after a (7) and b (3)
    scheduled: list[Request] = []
    adm = eng.admit(4096, 0.0, scheduled)
    assert [r.request_id for r in scheduled] == ["a", "b"]  # c does not fit: admission stops
    # b finds a's 4 system-prompt blocks (64 tokens), cached when a was scheduled
    assert (adm.prefix_queries, adm.prefix_hits) == (200, 64)
    assert adm.budget == 4096 - 100 - 36
    assert [r.request_id for r in eng.waiting] == ["c"]


def test_sample_gives_first_tokens_and_grouped_gaps_and_finish_frees_blocks():
    eng = _engine(max_num_batched_tokens=256, max_num_seqs=8)
    a, b = Request("a", 20, 2), Request("b", 30, 1)
    for r in (a, b):
        eng.add_request(r)
    scheduled: list[Request] = []
    eng.admit(256, 0.0, scheduled)
    finished: list[Request] = []
    out = eng.sample(scheduled, 0.0, 0.5, finished)
    assert isinstance(out, Sampled)
    assert (out.generation_tokens, out.prompt_tokens, out.ttfts) == (2, 50, [0.5, 0.5])
    assert finished == [b]  # b wanted one token
    assert (a.num_output, a.total, a.first_token_time) == (1, 21, 0.5)
    eng.finish(b, 0.5)
    assert eng.num_finished == 1
    assert b.blocks == []
    assert b.finish_time == 0.5
    assert eng.pool.num_free == 100 - 2  # a keeps its 2 blocks; b's 2 are back
    a.num_computed = 21  # a's decode scheduled in the next step, from 0.5 to 0.7
    out = eng.sample([a], 0.5, 0.7, finished)
    assert (out.generation_tokens, out.num_common, out.other_gaps) == (1, 1, [])  # its last token came at 0.5
    assert finished == [b, a]


def test_count_step_adds_a_step_its_admissions_and_outputs():
    eng = _engine()
    adm = Admission(0, prefix_queries=100, prefix_hits=64)
    eng.count_step(adm, Sampled(generation_tokens=2, prompt_tokens=100), 1, decoded=5)
    eng.count_step(None, Sampled(), 0)
    eng.count_decode_steps(10, 40)
    assert (eng.num_steps, eng.num_preemptions) == (12, 1)
    assert (eng.prefix_queries, eng.prefix_hits, eng.prompt_tokens, eng.generation_tokens) == (100, 64, 100, 47)
