"""Workload generators, JSONL traces, and vLLM command-line parsing."""

from __future__ import annotations

import re

import pytest

from kvpilot.engine import Engine, EngineConfig
from kvpilot.engine.request import Request
from kvpilot.engine.workloads import (
    ArrivalStream,
    ClosedLoop,
    LengthSampler,
    OpenLoop,
    document_scan,
    from_dict,
    poisson,
    trace_requests,
)
from kvpilot.vllm.args import from_vllm_args, human_readable_int, parse_vllm_args


def test_poisson_is_seeded_and_has_the_right_rate():
    a = [r.arrival_time for r in poisson(5.0, duration=1000.0, seed=7).requests]
    b = [r.arrival_time for r in poisson(5.0, duration=1000.0, seed=7).requests]
    c = [r.arrival_time for r in poisson(5.0, duration=1000.0, seed=8).requests]
    assert a == b
    assert a != c
    # 5 req/s x 1,000 s = 5,000 expected; Poisson sd = sqrt(5,000) = 70.7; allow 5 sd
    assert abs(len(a) - 5000) < 5 * 70.7
    assert all(0 < t < 1000 for t in a)
    assert a == sorted(a)


def test_a_lazy_poisson_stream_hands_out_the_same_requests_when_the_clock_reaches_them():
    spec = dict(
        duration=100.0, seed=3, prompt_len={"dist": "uniform", "min": 5, "max": 50}, prefix_groups=2, prefix_len=4
    )
    eager = poisson(2.0, **spec).requests
    stream = poisson(2.0, lazy=True, **spec)
    t = eager[3].arrival_time
    assert stream.next_arrival_time() == eager[0].arrival_time
    assert [r.request_id for r in stream.pop_arrivals(t)] == [r.request_id for r in eager[:4]]
    assert stream.next_arrival_time() == eager[4].arrival_time
    assert stream.pop_arrivals(t) == []
    rest = stream.pop_arrivals(float("inf"))
    got = [(r.request_id, r.prompt_len, r.output_len, r.arrival_time, r.segments) for r in rest]
    assert got == [(r.request_id, r.prompt_len, r.output_len, r.arrival_time, r.segments) for r in eager[4:]]
    assert stream.done()
    assert stream.next_arrival_time() is None


def test_an_arrival_stream_refuses_to_go_back_in_time():
    stream = ArrivalStream([Request("a", 5, 1, 2.0), Request("b", 5, 1, 1.0)])
    with pytest.raises(ValueError, match="^arrival_time: request 'b' arrives before 'a'"):
        stream.pop_arrivals(5.0)


def test_poisson_must_be_bounded_and_positive():
    with pytest.raises(ValueError, match="^duration: "):
        poisson(1.0)
    with pytest.raises(ValueError, match="^rate: "):
        poisson(0.0, duration=10)


def test_shared_prefix_groups_share_segments():
    reqs = poisson(10.0, num_requests=50, seed=1, prefix_groups=2, prefix_len=64, prompt_len=100).requests
    keys = {r.segments[0] for r in reqs}
    assert keys == {("prefix-0", 64), ("prefix-1", 64)}


def sample_length(spec: object, rng, field: str = "length") -> int:
    return LengthSampler(spec, field).draw(rng)


def load_trace(lines: list[str]) -> OpenLoop:
    """A JSON Lines trace the way ``kvpilot simulate --trace`` reads it."""
    return from_dict({"type": "trace", "requests": trace_requests(lines)})


def test_length_distributions():
    import random

    rng = random.Random(0)
    assert sample_length(37, rng) == 37
    draws = [sample_length({"dist": "uniform", "min": 5, "max": 9}, rng) for _ in range(200)]
    assert min(draws) == 5
    assert max(draws) == 9
    clipped = [sample_length({"dist": "normal", "mean": 10, "std": 100, "min": 1, "max": 20}, rng) for _ in range(200)]
    assert all(1 <= x <= 20 for x in clipped)
    with pytest.raises(ValueError, match="^prompt_len: unknown distribution 'zipf'"):
        sample_length({"dist": "zipf"}, rng, "prompt_len")
    with pytest.raises(ValueError, match="needs 'std'"):
        sample_length({"dist": "normal", "mean": 3}, rng)


def test_document_scan_orders_and_tags():
    wl = document_scan(num_docs=3, doc_tokens=40, passes=("first", "reversed"))
    assert [r.request_id for r in wl.requests] == [
        "first-doc-0",
        "first-doc-1",
        "first-doc-2",
        "reversed-doc-2",
        "reversed-doc-1",
        "reversed-doc-0",
    ]
    assert wl.requests[0].segments[0] == wl.requests[5].segments[0] == ("doc-0", 40)


def test_closed_loop_sends_the_next_request_when_one_finishes():
    eng = Engine(EngineConfig(kv_cache_tokens=4096, max_model_len=1024))
    wl = document_scan(num_docs=3, doc_tokens=100, passes=("first",), output_len=4)
    eng.run(wl)
    r0, r1, r2 = wl.requests
    assert r0.arrival_time == 0.0
    assert r1.arrival_time == r0.finish_time
    assert r2.arrival_time == r1.finish_time


def test_closed_loop_rejects_bad_concurrency():
    with pytest.raises(ValueError, match="^concurrency: "):
        ClosedLoop([], concurrency=0)


def test_trace_fields_and_errors():
    lines = [
        "# a comment",
        '{"arrival_time": 0.5, "prompt_tokens": 100, "output_len": 7, "prefix_group": "sys",'
        ' "prefix_len": 64, "request_id": "x"}',
        "",
        '{"timestamp": 0.1, "prompt_len": 20, "extra": true}',
    ]
    wl = load_trace(lines)
    first, second = wl.requests  # sorted by arrival time
    assert (first.request_id, first.prompt_len, first.output_len) == ("trace-4", 20, 1)
    assert second.segments[:2] == (("prefix-sys", 64), ("x", 36))
    with pytest.raises(ValueError, match="^trace line 1: prompt_tokens: required"):
        load_trace(['{"arrival_time": 0}'])
    with pytest.raises(ValueError, match="^trace line 2: not valid JSON"):
        load_trace(["", "{nope"])
    with pytest.raises(ValueError, match="prefix_len: 50 must be smaller"):
        load_trace(['{"arrival_time": 0, "prompt_tokens": 50, "prefix_group": "g", "prefix_len": 50}'])


def test_trace_extra_keys_are_an_adapter_id_or_name_and_a_salt_string():
    line = '{{"arrival_time": 0, "prompt_tokens": 40, "lora_id": {lora}, "cache_salt": {salt}, "tag": {tag}}}'
    (by_id,) = load_trace([line.format(lora=3, salt='"tenant-a"', tag=7)]).requests
    (by_name,) = load_trace([line.format(lora='"sql-adapter"', salt="null", tag="null")]).requests
    assert (by_id.lora_id, by_id.cache_salt, by_id.tag) == (3, "tenant-a", "7")
    assert (by_name.lora_id, by_name.cache_salt, by_name.tag) == ("sql-adapter", None, None)
    assert by_id.extra_keys == (3, "tenant-a")
    assert by_name.extra_keys == ("sql-adapter", None)
    with pytest.raises(
        ValueError, match=r"^trace line 1: lora_id: 1\.5 is not an adapter's id \(an integer\) or name$"
    ):
        load_trace([line.format(lora=1.5, salt="null", tag="null")])
    with pytest.raises(ValueError, match="^trace line 1: lora_id: True is not"):
        load_trace([line.format(lora="true", salt="null", tag="null")])
    with pytest.raises(ValueError, match="^trace line 1: cache_salt: 42 is not a string$"):
        load_trace([line.format(lora="null", salt=42, tag="null")])


def test_length_specs_a_generator_cannot_use_get_the_generators_own_error():
    with pytest.raises(ValueError, match="^prompt_len: 'long' is neither a number nor a distribution"):
        from_dict({"type": "poisson", "rate": 1, "num_requests": 2, "prompt_len": "long"}).pop_arrivals(1e9)


def test_workload_numbers_from_a_file_are_checked_and_whole_floats_are_whole_numbers():
    # YAML gives 7.0 for "7.0": the same workload as 7, in both builds (the compiled generators take only ints)
    spec = {"type": "poisson", "rate": 2, "num_requests": 6, "seed": 7, "prefix_groups": 2, "prefix_len": 8}
    as_floats = {**spec, "num_requests": 6.0, "seed": 7.0, "prefix_groups": 2.0, "prefix_len": 8.0, "id_prefix": 5}
    ints = [(r.request_id[-1], r.arrival_time, r.prompt_len, r.segments[0]) for r in from_dict(spec).pop_arrivals(1e9)]
    floats = [
        (r.request_id, r.arrival_time, r.prompt_len, r.segments[0]) for r in from_dict(as_floats).pop_arrivals(1e9)
    ]
    assert [f[1:] for f in floats] == [i[1:] for i in ints]
    assert [f[0] for f in floats] == [f"5-{i}" for i in range(6)]  # id_prefix 5 is the name "5"
    for key, value, reason in [
        ("seed", 1.5, "1.5 is not a whole number"),
        ("seed", None, "must be given a value (it is null)"),
        ("rate", "2", "'2' is not a number"),
        ("num_requests", True, "True is not a number"),
        ("duration", float("inf"), "inf is not a number"),
    ]:
        with pytest.raises(ValueError, match=f"^workload.{key}: {re.escape(reason)}$"):
            from_dict({"type": "poisson", "rate": 2, "num_requests": 3, key: value})
    scan = from_dict({"type": "document_scan", "num_docs": 2.0, "doc_tokens": 64.0, "passes": [1, "rev"]})
    assert [r.request_id for r in scan.requests] == ["1-doc-0", "1-doc-1", "rev-doc-1", "rev-doc-0"]
    assert from_dict({"type": "closed_loop", "num_requests": 2, "concurrency": 1.0, "prefix_len": 0.0}).done() is False


def test_a_cli_arrival_rate_that_is_no_number_is_the_workloads_error():
    from kvpilot.engine.scenarios import build

    with pytest.raises(ValueError, match="^workload.rate: '5' is not a number$"):
        build("healthy", {"arrival_rate": "5"})


def test_workload_from_dict():
    stream = from_dict({"type": "poisson", "rate": 2, "num_requests": 5})  # drawn lazily: no list
    assert not hasattr(stream, "requests")
    assert len(stream.pop_arrivals(float("inf"))) == 5
    assert stream.done()
    assert from_dict({"type": "idle"}).done()
    tr = from_dict({"type": "trace", "requests": [{"arrival_time": 1, "prompt_tokens": 5}]})
    assert tr.requests[0].prompt_len == 5
    with pytest.raises(ValueError, match="^workload.type: 'burst'"):
        from_dict({"type": "burst"})
    with pytest.raises(ValueError, match="^workload: "):
        from_dict({"type": "poisson", "rate": 1, "duration": 2, "burstiness": 3})


def test_from_vllm_args_maps_the_flags():
    argv = [
        "serve",
        "Qwen/Qwen2.5-1.5B-Instruct",
        "--max-num-seqs",
        "4",
        "--gpu-memory-utilization",
        "0.6",
        "--max-model-len",
        "8192",
        "--max-num-batched-tokens=2048",
        "--no-enable-prefix-caching",
        "--kv-cache-dtype",
        "fp8",
        "--tensor-parallel-size",
        "2",
        "--block-size",
        "32",
        "--trust-remote-code",
        "--swap-space",
        "4",
    ]
    assert from_vllm_args(argv) == {
        "max_num_seqs": 4,
        "gpu_memory_utilization": 0.6,
        "max_model_len": 8192,
        "max_num_batched_tokens": 2048,
        "enable_prefix_caching": False,
        "kv_cache_dtype": "fp8",
        "tensor_parallel_size": 2,
        "block_size": 32,
        "model": "qwen2.5-1.5b",
        "served_model_name": "Qwen/Qwen2.5-1.5B-Instruct",
    }
    parsed = parse_vllm_args(["vllm"] + argv)
    assert any("--trust-remote-code" in n and "--swap-space" in n for n in parsed.notes)


def test_from_vllm_args_other_spellings_and_errors():
    got = from_vllm_args(
        [
            "serve",
            "my/model",
            "--max_num_seqs=8",
            "--enable-prefix-caching",
            "--served-model-name",
            "chat",
            "--kv-offloading-size",
            "1.5",
        ]
    )
    assert got == {
        "max_num_seqs": 8,
        "enable_prefix_caching": True,
        "served_model_name": "chat",
        "kv_offload_cpu_bytes": int(1.5 * 2**30),
    }
    notes = parse_vllm_args(["serve", "my/model"]).notes
    assert any("'my/model' has no profile" in n for n in notes)
    with pytest.raises(ValueError, match="^--max-num-seqs: "):
        from_vllm_args(["serve", "m", "--max-num-seqs", "four"])
    # vLLM's human_readable_int: lowercase decimal, uppercase binary
    assert human_readable_int("8k") == 8000
    assert human_readable_int("8K") == 8192
    assert from_vllm_args(["--max-model-len", "32K"]) == {"max_model_len": 32768}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        # a key a trace does not take (e.g. a file path) must not silently give an empty workload
        ({"type": "trace", "path": "trace.jsonl"}, "^workload.path: "),
        ({"type": "trace"}, "^workload.requests: "),
        ({"type": "trace", "requests": "r.jsonl"}, "^workload.requests: "),
    ],
)
def test_trace_from_dict_refuses_what_would_replay_nothing(spec, field):
    with pytest.raises(ValueError, match=field):
        from_dict(spec)


def test_strict_parsing_refuses_unknown_models_and_flags_naming_them():
    # simulate --vllm-args: no silent default model, no silently ignored engine flag
    with pytest.raises(ValueError, match="^model: 'my/model' is not a model the engine models"):
        from_vllm_args(["serve", "my/model", "--max-num-seqs", "4"], strict=True)
    with pytest.raises(
        ValueError, match="^--swap-space --speculative-config: flags the engine model does not simulate"
    ):
        from_vllm_args(
            ["serve", "Qwen/Qwen2.5-1.5B-Instruct", "--swap-space", "4", "--speculative-config", "{}"], strict=True
        )
    # flags that never change scheduling or KV are accepted, with or without their value
    got = from_vllm_args(
        ["serve", "Qwen/Qwen2.5-1.5B-Instruct", "--trust-remote-code", "--api-key", "k", "--max-num-seqs", "4"],
        strict=True,
    )
    assert got["max_num_seqs"] == 4
    assert got["model"] == "qwen2.5-1.5b"
    # not strict (the vllm shim in a cluster): notes, no error
    assert parse_vllm_args(["serve", "my/model", "--swap-space", "4"]).overrides == {"served_model_name": "my/model"}
