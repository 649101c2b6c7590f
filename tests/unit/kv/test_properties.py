"""Property tests (hypothesis) of the KV arithmetic over random dense configs."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from kvpilot.kv import bytes_per_token, capacity

dense = st.fixed_dictionaries(
    {
        "num_hidden_layers": st.integers(1, 128),
        "num_attention_heads": st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128]),
        "hidden_size": st.sampled_from([512, 1024, 2048, 4096, 8192]),
        "torch_dtype": st.sampled_from(["bfloat16", "float16"]),
        "max_position_embeddings": st.integers(16, 1 << 20),
    }
).flatmap(
    lambda c: st.sampled_from([h for h in (1, 2, 4, 8, 16, 32, 64, 128) if h <= c["num_attention_heads"]]).map(
        lambda kv: {**c, "num_key_value_heads": kv}
    )
)
tp = st.sampled_from([1, 2, 4, 8, 16])


@given(dense, tp, tp)
def test_more_tensor_parallel_never_increases_per_gpu_bytes(cfg, a, b):
    small, large = sorted((a, b))
    assume(cfg["num_attention_heads"] % large == 0)  # vLLM refuses a TP that does not divide the heads
    assert bytes_per_token(cfg, tensor_parallel_size=large) <= bytes_per_token(cfg, tensor_parallel_size=small)


@given(dense, tp)
def test_fp8_halves_16_bit(cfg, t):
    assume(cfg["num_attention_heads"] % t == 0)  # vLLM refuses a TP that does not divide the heads
    assert 2 * bytes_per_token(cfg, "fp8", t) == bytes_per_token(cfg, "auto", t)


@given(dense)
def test_matches_the_formula(cfg):
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    assert bytes_per_token(cfg) == 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim * 2


@given(dense, st.integers(0, 1 << 36), st.integers(1, 1 << 20), st.sampled_from([8, 16, 32]))
def test_capacity_invariants(cfg, memory, max_len, block):
    cap = capacity(cfg, kv_memory_bytes=memory, max_model_len=max_len, block_size=block)
    assert cap.kv_blocks * block * cap.bytes_per_token <= memory < (cap.kv_blocks + 1) * block * cap.bytes_per_token
    assert cap.kv_tokens == cap.kv_blocks * block
    assert cap.usable_blocks == max(0, cap.kv_blocks - 1)
    # vLLM 0.29.0 plans the fit against the usable blocks (all but the null block), and caps the length it
    # accepts at the model's context (max_position_embeddings here)
    usable_tokens = cap.usable_blocks * block
    assert cap.fits == (max_len <= usable_tokens)
    assert cap.pool_max_model_len == usable_tokens
    assert cap.max_model_len_that_fits == min(usable_tokens, cfg["max_position_embeddings"])
    assert cap.max_concurrency == cap.kv_blocks / -(-max_len // block)


@given(dense, st.integers(1, 1 << 34), st.integers(1, 1 << 20))
def test_data_parallel_never_divides(cfg, memory, max_len):
    one = capacity(cfg, kv_memory_bytes=memory, max_model_len=max_len)
    four = capacity(cfg, kv_memory_bytes=memory, max_model_len=max_len, data_parallel_size=4)
    assert (one.bytes_per_token, one.kv_tokens) == (four.bytes_per_token, four.kv_tokens)
    assert four.to_json()["kv_tokens_all_replicas"] == 4 * one.kv_tokens


@given(dense, st.integers(1 << 30, 1 << 37), st.floats(0.3, 0.95), st.integers(1, 1 << 16))
def test_min_utilization_is_the_boundary(cfg, gpu, util, max_len):
    weights = int(gpu * 0.2)
    cap = capacity(
        cfg,
        gpu_memory_bytes=gpu,
        gpu_memory_utilization=util,
        weights_bytes=weights,
        overhead_bytes=0,
        max_model_len=max_len,
    )
    needed = cap.min_gpu_memory_utilization_to_fit
    if needed <= 1:
        at = capacity(
            cfg,
            gpu_memory_bytes=gpu,
            gpu_memory_utilization=min(1.0, needed + 1e-9),
            weights_bytes=weights,
            overhead_bytes=0,
            max_model_len=max_len,
        )
        assert at.fits
    assert cap.fits == (needed <= util + 1e-12)
