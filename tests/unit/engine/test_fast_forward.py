"""Fast-forward (engine.fast_forward) gives exactly what stepping one by one gives.

Both modes run the same workload; compared: the exported metrics text (every family, every bucket, every sum;
``_created`` timestamps aside) at the same snapshot times, the ``kvpilot simulate`` report, every finished
request's timings and inter-token gaps, the engine's counters and clock, and the block pool (free queue order,
reference counts, hashes, the prefix cache's index). Workloads: every engine scenario and the reference tier's
named and seeded random workloads (its generator, run here in-process without vLLM).
"""

from __future__ import annotations

from typing import Any

import pytest

from kvpilot.engine.config import EngineConfig
from kvpilot.engine.core import Engine
from kvpilot.engine.exporter import VLLMMetrics
from kvpilot.engine.request import Request
from kvpilot.engine.scenarios import SCENARIOS, build, resolve, run_scenario
from kvpilot.engine.workloads import OpenLoop, poisson
from tests.reference.workloads import NAMED, RANDOM_SEEDS, random_workload


def _metrics(engine: Engine, version: str) -> VLLMMetrics:
    return VLLMMetrics(
        vllm_version=version,
        model_name="m",
        cache_config={"block_size": str(engine.block_size), "num_gpu_blocks": str(engine.num_gpu_blocks)},
        max_model_len=engine.config.max_model_len,
    )


def _text(metrics: VLLMMetrics) -> str:
    body = metrics.exposition("text/plain")[0].decode()
    return "\n".join(line for line in body.splitlines() if "_created" not in line)


def _state(engine: Engine, finished: list) -> dict[str, Any]:
    pool = engine.pool
    return {
        "now": engine.now,
        "busy": engine.busy_time,
        "counters": (
            engine.num_steps,
            engine.num_preemptions,
            engine.prefix_queries,
            engine.prefix_hits,
            engine.external_queries,
            engine.external_hits,
            engine.prompt_tokens,
            engine.generation_tokens,
            engine.num_finished,
        ),
        "pool": pool.snapshot([r.table for r in engine.running]),
        "running": [(r.request_id, r.num_computed, r.num_output, r.blocks, r.last_token_time) for r in engine.running],
        "waiting": [(r.request_id, r.num_computed, r.num_preemptions) for r in engine.waiting],
        "finished": [
            (
                r.request_id,
                r.scheduled_time,
                r.first_token_time,
                r.last_token_time,
                r.finish_time,
                r.num_output,
                r.num_preemptions,
                r.prefix_hit_tokens,
                r.itls,
            )
            for r in finished
        ],
    }


def _run(make, fast_forward: bool, times: list[float], version: str = "0.29.0") -> tuple[list[str], dict, int]:
    """(metrics text at each of ``times``, final state, longest stretch) of one mode."""
    engine, workload = make(fast_forward)
    engine.metrics = metrics = _metrics(engine, version)
    engine.track_itls = True
    longest = [1]

    def on_step(_eng, out):
        if out is not None and out.num_steps > longest[0]:
            longest[0] = out.num_steps

    texts = []
    for t in times:
        engine.run(workload, until=t, on_step=on_step)
        texts.append(_text(metrics))
    engine.run(workload, on_step=on_step)  # to the end
    texts.append(_text(metrics))
    return texts, _state(engine, engine.finished), longest[0]


def _compare(make, times, version="0.29.0") -> int:
    texts_step, state_step, one = _run(make, False, times, version)
    texts_ff, state_ff, longest = _run(make, True, times, version)
    assert one == 1
    for t, a, b in zip([*times, "end"], texts_step, texts_ff, strict=True):
        assert a == b, f"metrics differ at t={t}"
    for key in state_step:
        assert state_step[key] == state_ff[key], key
    return longest


@pytest.mark.slow  # make test-unit skips it, make test runs it
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_scenario_is_the_same_fast_forwarded(name):
    sc = resolve(name)

    def make(ff):
        return build(sc, fast_forward=ff)

    horizon = sc.duration or 600.0
    longest = _compare(make, [horizon * k / 8 for k in range(1, 8)])
    if name not in ("idle", "seed-lru", "compute-bound"):  # these have no decode stretch to skip
        assert longest > 1
    step_report = run_scenario(name, fast_forward=False)
    assert run_scenario(name) == step_report


@pytest.mark.slow  # make test-unit skips it, make test runs it
def test_the_cpu_tier_is_the_same_fast_forwarded():
    # kv-exhaustion with a 1.5 GiB LMCache-like tier: stores and loads at prefill, decode stretches between
    sc = resolve("kv-exhaustion", {"kv_offload_cpu_bytes": 1610612736, "duration": 120})
    assert _compare(lambda ff: build(sc, fast_forward=ff), [30.0, 60.0, 90.0]) > 1


def test_old_metric_names_are_the_same_fast_forwarded():
    # vLLM 0.10.1 exposes time_per_output_token_seconds beside inter_token_latency_seconds; prefix counters in tokens
    sc = resolve("healthy", {"duration": 60})
    _compare(lambda ff: build(sc, fast_forward=ff), [15.0, 30.0, 45.0], version="0.10.1")
    _compare(lambda ff: build(sc, fast_forward=ff), [20.0], version="0.8.5")


def _reference(workload_fn):
    def make(ff):
        flags, requests = workload_fn()
        base = {"gpu": "h100", "model": "qwen2.5-1.5b", "max_model_len": 8192}  # tests/reference/compare.make_engine
        engine = Engine(EngineConfig.from_dict({**base, **flags}), keep_finished=True, fast_forward=ff)
        return engine, OpenLoop(requests)

    return make


@pytest.mark.parametrize("name", list(NAMED))
def test_reference_named_workloads_are_the_same_fast_forwarded(name):
    _compare(_reference(NAMED[name]), [0.5, 1.0, 2.0, 5.0, 20.0, 100.0])


@pytest.mark.slow  # make test-unit skips it, make test runs it
def test_reference_random_workloads_are_the_same_fast_forwarded():
    stretched = 0
    for seed in RANDOM_SEEDS:
        longest = _compare(_reference(lambda seed=seed: random_workload(seed)), [0.05, 0.2, 1.0, 3.0])
        stretched += longest > 1
    assert stretched > len(RANDOM_SEEDS) // 2  # most of them skip some steps


def _poisson_engine(ff: bool, **kw):
    cfg = EngineConfig(gpu="h100-sxm", model="qwen2.5-1.5b", max_num_seqs=256, max_num_batched_tokens=8192)
    wl = poisson(
        30,
        num_requests=300,
        seed=7,
        prompt_len={"dist": "normal", "mean": 500, "std": 100, "min": 50},
        output_len={"dist": "normal", "mean": 60, "std": 15, "min": 5},
        prefix_groups=4,
        prefix_len=128,
        **kw,
    )
    return Engine(cfg, keep_finished=True, fast_forward=ff), wl


def test_arrivals_admissions_and_finishes_happen_inside_a_stretch():
    # 30 req/s with ~2.5 ms steps: an arrival and a finish about every 13 steps; shared 128-token prefixes hit
    assert _compare(_poisson_engine, [2.0, 5.0, 8.0]) > 1
    assert _compare(lambda ff: _poisson_engine(ff, lazy=True), [3.0]) > 1
    engine, wl = _poisson_engine(True)
    admissions = finishes = 0

    def on_step(_eng, out):
        nonlocal admissions, finishes
        if out is not None:
            admissions += len(out.ttfts)
            finishes += len(out.finished)

    engine.run(wl, on_step=on_step)
    assert engine.num_finished == finishes == admissions == 300
    assert engine.prefix_hits > 0
    # only the first step of each busy period and the steps after a chunked prefill go through Engine.step
    assert engine.num_stepped < engine.num_steps / 20


def test_max_steps_stops_a_stretch_where_stepping_stops():
    def go(ff):
        engine, wl = _poisson_engine(ff)
        engine.metrics = metrics = _metrics(engine, "0.29.0")
        engine.track_itls = True
        seen = []
        for n in (1, 7, 100, 3, 1000, 17, 500):
            engine.run(wl, max_steps=n)
            seen.append((engine.num_steps, _text(metrics)))
        return seen, _state(engine, engine.finished)

    seen, state = go(True)
    assert [n for n, _ in seen] == [1, 8, 108, 111, 1111, 1128, 1628]  # running sums of the max_steps asked for
    assert (seen, state) == go(False)


def _chunking_engine(ff: bool, **kw):
    # a token budget cap: 256 tokens a step, prompts of ~1,500 tokens (6 chunks) with shared 256-token prefixes
    cfg = EngineConfig(gpu="h100-sxm", model="qwen2.5-1.5b", max_num_seqs=64, max_num_batched_tokens=256, **kw)
    wl = poisson(
        20,
        num_requests=200,
        seed=11,
        prompt_len={"dist": "normal", "mean": 1500, "std": 400, "min": 20},
        output_len={"dist": "normal", "mean": 40, "std": 15, "min": 1},
        prefix_groups=3,
        prefix_len=256,
    )
    return Engine(cfg, keep_finished=True, fast_forward=ff), wl


def _per_step(outs) -> list[tuple]:
    """on_step's outputs, a fast-forwarded run spread into its steps (each step's fields as stepping reports them)."""
    steps = []
    for out in outs:
        if out is None:
            continue
        if out.num_steps == 1 and not out.durations:
            steps.append((out.start, out.duration, out.num_tokens, out.num_scheduled, out.generation_tokens))
            continue
        assert len(out.durations) == out.num_steps
        assert out.generation_tokens % out.num_steps == 0
        t = out.start
        for d in out.durations:
            steps.append((t, d, out.num_tokens, out.num_scheduled, out.generation_tokens // out.num_steps))
            t += d
        assert t == out.start + out.duration
    return steps


def test_chunked_prefills_are_the_same_fast_forwarded():
    # every step but a few prefills a chunk of the budget the decodes leave
    assert _compare(_chunking_engine, [2.0, 4.0, 6.0]) > 1
    assert _compare(lambda ff: _chunking_engine(ff, enable_prefix_caching=False), [3.0]) > 1
    seen = {}
    for ff in (False, True):
        engine, wl = _chunking_engine(ff)
        outs = []
        engine.run(wl, on_step=lambda _eng, out, outs=outs: outs.append(out))
        seen[ff] = (_per_step(outs), [len(o.finished) for o in outs if o], engine.num_stepped, engine.num_steps)
    stepped, fast = seen[False], seen[True]
    assert fast[0] == stepped[0]  # every step's start, duration, tokens, requests and sampled tokens
    assert sum(fast[1]) == sum(stepped[1]) == 200
    assert stepped[2] == stepped[3] > 2000
    # only the first step of each busy period (and steps that would preempt) go through Engine.step
    assert fast[2] < stepped[3] / 50


def _lone_prompt(prompt: int, ff: bool):
    cfg = EngineConfig(gpu="h100-sxm", model="qwen2.5-1.5b", max_num_seqs=8, max_num_batched_tokens=256)
    engine = Engine(cfg, keep_finished=True, fast_forward=ff)
    outs = []
    engine.run([Request("a", prompt, 3)], on_step=lambda _eng, out: outs.append(out))
    return engine, outs


@pytest.mark.parametrize(
    ("prompt", "quiet", "last"),
    [
        (768, 1, 256),  # 256 at admission, 1 quiet chunk of 256, the last chunk takes the whole budget
        (769, 2, 1),  # one token more: 2 quiet chunks of 256, a last chunk of 1
        (513, 1, 1),
        (512, 0, 256),  # 256 + 256: no quiet chunk between the admission and the last
    ],
)
def test_a_lone_prompt_s_chunks_are_taken_at_once_up_to_its_last(prompt, quiet, last):
    engine, outs = _lone_prompt(prompt, True)
    shape = [(o.num_steps, o.num_tokens, o.num_scheduled, o.generation_tokens, len(o.ttfts)) for o in outs if o]
    # the admission (Engine.step), the quiet chunks as one run, the last chunk with the first token, then the
    # second token's decode (a run of one) and the third's, in which it finishes
    expected = [(1, 256, 1, 0, 0)]
    if quiet:
        expected.append((quiet, 256, 1, 0, 0))
    expected += [(1, last, 1, 1, 1), (1, 1, 1, 1, 0), (1, 1, 1, 1, 0)]
    assert shape == expected
    assert outs[-1].finished[0].num_output == 3
    assert engine.num_steps == -(-prompt // 256) + 2
    stepped, _ = _lone_prompt(prompt, False)
    assert _state(engine, engine.finished) == _state(stepped, stepped.finished)
