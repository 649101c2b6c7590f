"""What-if changes: parsing (one line naming the key), what each does to the server's flags, the candidates."""

from __future__ import annotations

import pytest

from kvpilot.advice.whatif import Change, ChangeError, apply_change, candidates, parse_change, replicas_for
from kvpilot.diagnose.limits import resolve_limits
from kvpilot.engine.config import EngineConfig

BASE = EngineConfig(
    gpu="h100-sxm",
    model="qwen2.5-7b",
    kv_cache_tokens=100_000,
    max_num_seqs=16,
    max_num_batched_tokens=512,
    max_model_len=8192,
).resolved()


def test_parse_change():
    assert parse_change("max_num_seqs=16").as_dict() == {"max_num_seqs": 16}
    both = parse_change("max-num-seqs=16, kv_cache_dtype=FP8")
    assert both.items == (("max_num_seqs", 16), ("kv_cache_dtype", "fp8"))
    assert both.text() == ("max_num_seqs=16, kv_cache_dtype=fp8")
    assert parse_change("enable_prefix_caching=off").as_dict() == {"enable_prefix_caching": False}
    assert parse_change("gpu_memory_utilization=0.95").as_dict() == {"gpu_memory_utilization": 0.95}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_num_seqs", "expected KEY=VALUE"),
        ("tensor_parallel_size=2", "tensor_parallel_size: unknown key"),
        ("max_num_seqs=1.5", "max_num_seqs=1.5: not a whole number"),
        ("max_num_seqs=0", "must be from 1 to 2,147,483,647"),
        ("max_num_seqs=2147483648", "must be from 1 to 2,147,483,647"),  # a signed 32-bit int is the largest count
        ("max_num_seqs=" + "9" * 310, "not a whole number of at most 40 digits"),  # was an OverflowError (exit 70)
        ("kv_cache_tokens=" + "1" * 30, "kv_cache_tokens=" + "1" * 30 + ": must be from 1 to"),
        ("replicas=65", "must be from 1 to 64"),
        ("kv_cache_dtype=fp8banana", "unknown KV cache dtype"),  # vLLM's CacheDType has no such value
        ("gpu_memory_utilization=1.2", "must be in (0, 1]"),
        ("enable_prefix_caching=maybe", "true or false"),
        ("kv_cache_dtype=int4", "unknown KV cache dtype"),
        ("kv_cache_dtype=fp8_e5m2", None),  # the one-byte names vLLM 0.29.0 knows are taken
        ("kv_cache_dtype=fp8_inc", None),
        ("max_num_seqs=8,max_num_seqs=16", "given twice"),
    ],
)
def test_bad_changes_are_one_line_naming_the_key(text, message):
    if message is None:
        assert parse_change(text).as_dict()["kv_cache_dtype"] == text.split("=")[1]
        return
    with pytest.raises(ChangeError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        parse_change(text)


def test_fp8_doubles_the_kv_tokens_and_halves_the_kv_bytes_read():
    applied = apply_change(Change.of(kv_cache_dtype="fp8"), BASE, resolve_limits())
    # bf16 (2 bytes an element) -> fp8 (1): 100,000 -> 200,000 tokens; Qwen2.5-7B 57,344 -> 28,672 B a token
    assert applied.config.kv_cache_tokens == 200_000
    assert applied.config.resolved_bytes_per_token() == 28_672


def test_a_larger_max_num_seqs_raises_a_smaller_budget_as_vllm_requires():
    applied = apply_change(Change.of(max_num_seqs=1024), BASE, resolve_limits())
    assert (applied.config.max_num_seqs, applied.config.max_num_batched_tokens) == (1024, 1024)
    assert "raised to 1024" in applied.notes[0]
    with pytest.raises(ChangeError, match="vLLM requires it >= max_num_seqs"):
        apply_change(Change.of(max_num_batched_tokens=8), BASE, resolve_limits())


def test_gpu_memory_utilization_adds_the_memory_it_frees_in_whole_blocks():
    # 0.90 -> 0.95 of an 80 GiB H100: ceil(0.95 x 85,899,345,920) - ceil(0.90 x 85,899,345,920) = 4,294,967,296 B
    # more; (100,000 x 57,344 + 4,294,967,296) // (16 x 57,344) = 10,931 blocks of 16 = 174,896 tokens
    limits = resolve_limits(cli={"gpu_memory_utilization": 0.9})
    applied = apply_change(Change.of(gpu_memory_utilization=0.95), BASE, limits)
    assert applied.config.kv_cache_tokens == 174_896
    with pytest.raises(ChangeError, match="current value is not known"):
        apply_change(Change.of(gpu_memory_utilization=0.95), BASE, resolve_limits())  # vLLM's default assumed


def test_a_utilization_change_gives_the_pool_vllm_would_allocate():
    # Qwen2.5-1.5B on the 8 GiB laptop GPU, 21,520 tokens of 28,672 B at 0.6 -> 0.7: ceil(0.7 x 8 GiB) -
    # ceil(0.6 x 8 GiB) = 6,012,954,215 - 5,153,960,756 = 858,993,459 B more; (21,520 x 28,672 + 858,993,459)
    # // (16 x 28,672) = 1,476,014,899 // 458,752 = 3,217 blocks = 51,472 tokens (the linear 51,479 is no whole
    # number of blocks)
    laptop = EngineConfig(gpu="laptop-8gb", model="qwen2.5-1.5b", kv_cache_tokens=21_520, max_model_len=8192)
    limits = resolve_limits(cli={"gpu_memory_utilization": 0.6})
    tokens = apply_change(Change.of(gpu_memory_utilization=0.7), laptop.resolved(), limits).config.kv_cache_tokens
    assert tokens == 51_472
    assert tokens % 16 == 0


def test_a_dtype_change_keeps_whole_blocks():
    # fp8 -> bf16 doubles a token's bytes: 100,016 tokens x 1 B a element // (16 x 2 B) = 3,125 blocks = 50,000
    # tokens (half of 100,016 is 50,008, half a block more than the memory holds)
    fp8 = EngineConfig(
        gpu="h100-sxm", model="qwen2.5-7b", kv_cache_tokens=100_016, kv_cache_dtype="fp8", max_model_len=8192
    ).resolved()
    applied = apply_change(Change.of(kv_cache_dtype="bfloat16"), fp8, resolve_limits())
    assert applied.config.kv_cache_tokens == 50_000


def test_kv_tokens_too_few_for_one_request_cut_max_model_len_and_none_at_all_is_refused():
    applied = apply_change(Change.of(kv_cache_tokens=4096), BASE, resolve_limits())
    assert applied.config.max_model_len == 4096 - 16  # the null block aside: 255 usable blocks of 16
    with pytest.raises(ChangeError, match="less than 2 blocks"):
        apply_change(Change.of(kv_cache_tokens=16), BASE, resolve_limits())


def test_candidates_per_binding_limit():
    assert candidates("max_num_seqs", BASE, {}) == [
        Change.of(max_num_seqs=32),  # 2 x 16, a CUDA-graph size
        Change.of(max_num_seqs=64),  # 4 x 16
    ]
    # the rules' suggestion first, then twice it
    assert candidates("max_num_seqs", BASE, {"max_num_seqs": 24})[:2] == [
        Change.of(max_num_seqs=24),
        Change.of(max_num_seqs=64),
    ]
    assert candidates("token_budget", BASE, {}) == [
        Change.of(max_num_batched_tokens=1024),
        Change.of(max_num_batched_tokens=2048),
    ]
    assert candidates("kv_cache", BASE, {"max_num_seqs": 8}) == [
        Change.of(kv_cache_dtype="fp8"),
        Change.of(max_num_seqs=8),
    ]
    assert candidates("none", BASE, {}) == []


def test_replicas_for_the_arrivals():
    # 16 req/s arriving, 11 served by one: 16 / 11 x 1.02 = 1.48 -> 2
    assert replicas_for(16.0, 11.0) == 2
    assert replicas_for(16.0, 5.0) == 4  # 3.26
    assert replicas_for(16.0, 0.0) is None


def test_a_utilization_above_what_kvpilot_suggests_carries_a_caveat():
    # 0.95 is the most kvpilot suggests (docs/diagnosis.md); above it vLLM may not start: said, still simulated
    limits = resolve_limits(cli={"gpu_memory_utilization": 0.9})
    assert apply_change(Change.of(gpu_memory_utilization=0.95), BASE, limits).notes == ()
    (note,) = apply_change(Change.of(gpu_memory_utilization=0.96), BASE, limits).notes
    assert note.startswith("above 0.95 vLLM may not start")


def test_a_kv_cache_of_one_token_says_token():
    with pytest.raises(ChangeError, match=r"leaves 1 KV token, less than 2 blocks"):
        apply_change(Change.of(kv_cache_tokens=1), BASE, resolve_limits())
    with pytest.raises(ChangeError, match=r"leaves 16 KV tokens, less than 2 blocks"):
        apply_change(Change.of(kv_cache_tokens=16), BASE, resolve_limits())


def test_kv_memory_bytes_scale_a_pool_set_in_bytes():
    # a pool of 100,000 tokens in 6 GiB: 9 GiB holds 150,000
    limits = resolve_limits(cache_config={"kv_cache_memory_bytes": str(6 * 2**30), "kv_cache_size_tokens": "100000"})
    applied = apply_change(parse_change(f"kv_cache_memory_bytes={9 * 2**30}"), BASE, limits)
    assert applied.config.kv_cache_tokens == 150_000
    # a pool sized by the utilization has no bytes to scale
    with pytest.raises(ChangeError, match="kv_cache_memory_bytes: the server's KV pool is not set in bytes"):
        apply_change(Change.of(kv_cache_memory_bytes=2**30), BASE, resolve_limits())


def test_without_cuda_graphs_max_num_seqs_candidates_are_not_rounded():
    three = EngineConfig(gpu="h100-sxm", model="qwen2.5-7b", kv_cache_tokens=100_000, max_num_seqs=3).resolved()
    # 2 x 3 = 6 and 4 x 3 = 12; with CUDA graphs the batch sizes at or above them, 8 and 16
    assert candidates("max_num_seqs", three, {}, graphs=False) == [
        Change.of(max_num_seqs=6),
        Change.of(max_num_seqs=12),
    ]
    assert candidates("max_num_seqs", three, {}) == [Change.of(max_num_seqs=8), Change.of(max_num_seqs=16)]
