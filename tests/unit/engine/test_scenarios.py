"""Every scenario shows its defining signature in the engine's own counters and per-step gauges.

The exporter and the diagnoser test the same scenarios again through recordings; here the
timeline is taken directly from ``on_step`` (StepOutput: running, waiting, kv_cache_usage,
num_tokens) every simulated second or so.
"""

from __future__ import annotations

import dataclasses

import pytest

from kvpilot.engine.config import EngineConfig, EngineFlags
from kvpilot.engine.scenarios import SCENARIOS, ScenarioOverrides, build, resolve, run_scenario


def _timeline(name, overrides=None):
    """(engine, report-free timeline): samples of (t, running, waiting, kv, preemptions)."""
    engine, workload = build(name, overrides)
    sc = resolve(name, overrides)
    samples = []
    steps = []

    def on_step(eng, out):
        if out is not None:
            steps.append(out)
        if not samples or eng.now - samples[-1][0] >= 1.0:
            samples.append((eng.now, eng.num_running, eng.num_waiting, eng.kv_cache_usage, eng.num_preemptions))

    engine.run(workload, until=sc.duration, on_step=on_step, tick=1.0)
    return engine, samples, steps


def _window(samples, lo, hi):
    end = samples[-1][0]
    return [s for s in samples if lo * end <= s[0] <= hi * end]


def test_every_scenario_is_listed_with_a_description():
    assert set(SCENARIOS) == {
        "seed-lru",
        "kv-exhaustion",
        "max-num-seqs-cap",
        "token-budget-cap",
        "compute-bound",
        "prefix-thrash",
        "healthy",
        "idle",
    }
    for sc in SCENARIOS.values():
        assert sc.description
        assert "\n" not in sc.description


def test_kv_exhaustion():
    eng, samples, _ = _timeline("kv-exhaustion")
    late = _window(samples, 0.5, 1.0)
    early = _window(samples, 0.2, 0.3)
    assert late[-1][2] > 2 * early[-1][2] > 0  # waiting grows
    assert min(s[3] for s in late) > 0.8  # KV usage pinned near its ceiling
    assert max(s[3] for s in samples) > 0.97
    assert late[-1][4] > late[0][4] > 0  # preemptions keep growing
    assert max(s[1] for s in samples) < eng.config.max_num_seqs  # not the cap


def test_max_num_seqs_cap():
    eng, samples, _ = _timeline("max-num-seqs-cap")
    cap = eng.config.max_num_seqs
    late = _window(samples, 0.2, 1.0)
    # right after a step that finished a request, running is cap - 1 until the next step admits
    # (vLLM's make_stats also runs after finished requests left the running list)
    assert sum(s[1] == cap for s in late) / len(late) > 0.9
    assert max(s[1] for s in samples) == cap
    assert late[-1][2] > 2 * late[0][2] > 0  # waiting grows
    assert max(s[3] for s in samples) < 0.05  # KV low
    assert eng.num_preemptions == 0


def test_token_budget_cap():
    eng, samples, steps = _timeline("token-budget-cap")
    budget = eng.config.max_num_batched_tokens
    busy = [s for s in steps if s.start > 0.2 * eng.now]
    assert sum(s.num_tokens == budget for s in busy) / len(busy) > 0.95  # steps full
    late = _window(samples, 0.2, 1.0)
    assert max(s[1] for s in late) < eng.config.max_num_seqs / 4  # running below the cap
    assert max(s[3] for s in samples) < 0.2  # KV with room
    assert late[-1][2] > 2 * late[0][2] > 0  # waiting grows


def test_compute_bound():
    eng, samples, steps = _timeline("compute-bound")
    cfg = eng.config
    late = _window(samples, 0.3, 1.0)
    assert late[-1][2] > 2 * late[0][2] > 0  # waiting grows
    assert max(s[1] for s in samples) < cfg.max_num_seqs / 4  # the seq cap does not bind
    assert max(s[3] for s in samples) < 0.5
    assert eng.num_preemptions == 0
    # offered 9 req/s x 6,000 prompt tokens = 54,000 tok/s; served less, with steps of ~1 s
    served = eng.prompt_tokens / eng.now
    assert served < 0.9 * 54000
    assert sum(s.duration for s in steps) / len(steps) > 0.5  # long, compute-heavy steps


def test_prefix_thrash_is_caused_by_capacity():
    rep = run_scenario("prefix-thrash")
    assert rep["config"]["enable_prefix_caching"] is True
    assert rep["counters"]["prefix_cache_hit_rate"] < 0.25
    assert rep["final"]["waiting"] == 0  # not overloaded, just thrashing
    # same traffic, a cache larger than the 100 x 3,000-token working set: hits climb
    big = run_scenario("prefix-thrash", {"kv_cache_tokens": 400_000})
    assert big["counters"]["prefix_cache_hit_rate"] > 0.75


def test_healthy():
    rep = run_scenario("healthy")
    assert rep["peaks"]["waiting"] <= 1
    assert rep["final"]["waiting"] == 0
    assert rep["counters"]["preemptions"] == 0
    assert rep["peaks"]["kv_cache_usage"] < 0.1
    assert rep["counters"]["prefix_cache_hit_rate"] > 0.3  # the shared system prompt hits
    assert rep["requests"]["finished"] > 500


def test_idle():
    eng, samples, steps = _timeline("idle")
    assert steps == []
    assert eng.num_steps == 0
    assert eng.now == pytest.approx(300.0)
    assert len(samples) >= 290  # ticks kept the timeline going
    assert all(s[1:] == (0, 0, 0.0, 0) for s in samples)


def test_overrides_and_errors():
    sc = resolve("idle", {"arrival_rate": 2.0, "prompt_tokens": 100, "output_tokens": 10})
    assert sc.workload["type"] == "poisson"
    assert sc.workload["rate"] == 2.0
    assert resolve("healthy", {"gpu": "A100", "max_num_seqs": None}).flags["gpu"] == "A100"
    with pytest.raises(ValueError, match="^scenario: unknown 'nope'"):
        build("nope")
    with pytest.raises(ValueError, match="^max_num_sequences: unknown engine field"):
        build("healthy", {"max_num_sequences": 3})
    with pytest.raises(ValueError, match="^arrival_rate: scenario 'seed-lru'"):
        resolve("seed-lru", {"prompt_tokens": 10})
    custom = resolve("healthy", {"workload": {"rate": 0.5}, "duration": 60})
    assert custom.workload["rate"] == 0.5
    assert custom.workload["prefix_len"] == 500
    assert custom.duration == 60.0


def test_reports_are_json_able():
    import json

    for name in ("idle", "seed-lru"):
        json.dumps(run_scenario(name))


def test_overrides_may_set_every_engine_flag_at_their_top():
    # a scenario file sets an engine field at its top level as in its flags: ScenarioOverrides names each one
    fields = {f.name for f in dataclasses.fields(EngineConfig)} - {"profile"}  # the object no document sets
    assert EngineFlags.__optional_keys__ == fields
    assert fields <= ScenarioOverrides.__optional_keys__
