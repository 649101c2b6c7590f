"""Every copied Hugging Face config: KV bytes per token (per GPU, TP 1, --kv-cache-dtype auto), worked out by
hand from the config's fields (arithmetic written out; comments name the fields), plus the fixed per-request
state of sliding / hybrid models.
"""

from __future__ import annotations

import pytest

from kvpilot.kv import KVConfigError, bytes_per_token, footprint, kv_spec_from_config

from .conftest import HF_CONFIGS, hf_config

# file stem -> (bytes each token adds, sliding-layer bytes per token, Mamba/linear state bytes per request)
EXPECTED = {
    # 2 x num_hidden_layers x num_key_value_heads x (hidden_size / num_attention_heads) x 2 (bfloat16)
    "Qwen__Qwen2.5-1.5B-Instruct": (2 * 28 * 2 * (1536 // 12) * 2, 0, 0),  # use_sliding_window false
    "Qwen__Qwen2.5-7B-Instruct": (2 * 28 * 4 * (3584 // 28) * 2, 0, 0),
    "Qwen__Qwen2.5-72B-Instruct": (2 * 80 * 8 * (8192 // 64) * 2, 0, 0),
    "Qwen__Qwen2.5-VL-7B-Instruct": (2 * 28 * 4 * (3584 // 28) * 2, 0, 0),  # flat multimodal config
    "meta-llama__Llama-3.1-8B-Instruct": (2 * 32 * 8 * (4096 // 32) * 2, 0, 0),
    "meta-llama__Llama-3.1-70B-Instruct": (2 * 80 * 8 * (8192 // 64) * 2, 0, 0),
    "mistralai__Mistral-7B-Instruct-v0.3": (2 * 32 * 8 * (4096 // 32) * 2, 0, 0),  # sliding_window null
    # explicit head_dim 128 (not hidden/heads)
    "Qwen__Qwen3-0.6B": (2 * 28 * 8 * 128 * 2, 0, 0),
    "Qwen__Qwen3-8B": (2 * 36 * 8 * 128 * 2, 0, 0),
    "Qwen__Qwen3-32B": (2 * 64 * 8 * 128 * 2, 0, 0),
    "Qwen__Qwen3-30B-A3B": (2 * 48 * 4 * 128 * 2, 0, 0),
    # MLA: num_hidden_layers x (kv_lora_rank + qk_rope_head_dim) x 2, no K/V factor
    "deepseek-ai__DeepSeek-V3": (61 * (512 + 64) * 2, 0, 0),
    # nested text_config with no core fields: transformers LlamaConfig defaults (32 layers, 32 heads,
    # kv heads = heads, hidden 4096 -> head dim 128), torch_dtype float16
    "llava-hf__llava-1.5-7b-hf": (2 * 32 * 32 * (4096 // 32) * 2, 0, 0),
    # Gemma-2: 42 layers alternate sliding (even) / full (odd): 21 + 21, head_dim 256, window 4096
    "google__gemma-2-9b-it": (2 * 21 * 8 * 256 * 2, 2 * 21 * 8 * 256 * 2, 0),
    # Gemma-3 (text_config): 62 layers, every 6th full -> 10 full, 52 sliding; head_dim 128; dtype from top level
    "google__gemma-3-27b-it": (2 * 10 * 16 * 128 * 2, 2 * 52 * 16 * 128 * 2, 0),
    # gpt-oss: layer_types 12 full + 12 sliding, head_dim 64; no torch_dtype -> bfloat16 (vLLM float32 -> 16-bit)
    "openai__gpt-oss-20b": (2 * 12 * 8 * 64 * 2, 2 * 12 * 8 * 64 * 2, 0),
    # Phi-3-mini-4k: sliding_window 2047 < 4096 without a layer pattern -> every layer slides (32 layers,
    # 32 KV heads, head dim 3072/32 = 96): nothing grows beyond the window
    "microsoft__Phi-3-mini-4k-instruct": (0, 2 * 32 * 32 * (3072 // 32) * 2, 0),
    # Qwen3-Next: full_attention_interval 4 -> 12 full layers (kv 2, head_dim 256); 36 Gated DeltaNet layers:
    # conv (4-1) x (2*16*128 + 32*128) + state 32 x 128 x 128, bf16
    "Qwen__Qwen3-Next-80B-A3B-Instruct": (
        2 * 12 * 2 * 256 * 2,
        0,
        36 * ((4 - 1) * (2 * 16 * 128 + 32 * 128) + 32 * 128 * 128) * 2,
    ),
    "Qwen__Qwen3-Next-80B-A3B-Thinking": (
        2 * 12 * 2 * 256 * 2,
        0,
        36 * ((4 - 1) * (2 * 16 * 128 + 32 * 128) + 32 * 128 * 128) * 2,
    ),
    # Jamba: attention on layers 4, 12, 20, 28 (kv 8, head dim 4096/32); 28 Mamba-1 layers:
    # d_inner = mamba_expand 2 x hidden 4096; conv (d_conv 4 - 1) x d_inner + ssm d_inner x d_state 16, bf16
    "ai21labs__Jamba-v0.1": (2 * 4 * 8 * (4096 // 32) * 2, 0, 28 * ((4 - 1) * (2 * 4096) + (2 * 4096) * 16) * 2),
    # Nemotron-3-Nano: 6 '*' attention layers (kv 2, head_dim 128); 23 'M' Mamba-2 layers:
    # conv (4-1) x (64*64 + 2*8*128) in bf16 + ssm 64 x 64 x 128 in mamba_ssm_cache_dtype float32
    "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": (
        2 * 6 * 2 * 128 * 2,
        0,
        23 * ((4 - 1) * (64 * 64 + 2 * 8 * 128) * 2 + 64 * 64 * 128 * 4),
    ),
}


def test_every_fixture_has_an_expected_value():
    assert {p.stem for p in HF_CONFIGS.glob("*.json")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bytes_per_token(name):
    growth, sliding, state = EXPECTED[name]
    cfg = hf_config(name)
    assert bytes_per_token(cfg) == growth
    fp = footprint(kv_spec_from_config(cfg))
    assert fp.sliding_bytes_per_token == sliding
    assert fp.state_bytes_per_request == state
    assert fp.estimate == (sliding > 0 or state > 0)


def test_llava_reports_the_defaults_it_used():
    spec = kv_spec_from_config(hf_config("llava-hf__llava-1.5-7b-hf"))
    assert spec.model_dtype == "float16"
    assert "text_config.num_hidden_layers" in spec.defaults_used
    assert "text_config.num_key_value_heads" in spec.defaults_used
    assert spec.attention == "mha"


def test_mla_is_not_divided_by_tensor_parallel():
    cfg = hf_config("deepseek-ai__DeepSeek-V3")
    assert bytes_per_token(cfg, tensor_parallel_size=8) == 61 * (512 + 64) * 2
    assert bytes_per_token(cfg, kv_cache_dtype="fp8") == 61 * (512 + 64) * 1
    assert bytes_per_token(cfg, kv_cache_dtype="fp8_ds_mla") == 61 * 656


@pytest.mark.parametrize(
    ("tp", "expected"),
    [
        (1, 2 * 28 * 4 * 128 * 2),
        (2, 2 * 28 * (4 // 2) * 128 * 2),
        (4, 2 * 28 * (4 // 4) * 128 * 2),
    ],
)
def test_tensor_parallel_divides_by_min_tp_kv_heads(tp, expected):
    assert bytes_per_token(hf_config("Qwen__Qwen2.5-7B-Instruct"), tensor_parallel_size=tp) == expected


def test_kv_heads_are_replicated_when_tp_exceeds_them():
    # Llama-3.1-8B: 32 query heads, 8 KV heads; TP 16 divides 32 and is a multiple of 8: one KV head per GPU,
    # total / min(16, 8) = 2 x 32 x 8 x 128 x 2 / 8
    assert (
        bytes_per_token(hf_config("meta-llama__Llama-3.1-8B-Instruct"), tensor_parallel_size=16) == 2 * 32 * 1 * 128 * 2
    )


@pytest.mark.parametrize(
    ("model", "tp", "field"),
    [
        # Qwen2.5-7B has 28 query heads: TP 8 does not divide them (vLLM: "Total number of attention heads (28)
        # must be divisible by tensor parallel size (8)")
        ("Qwen__Qwen2.5-7B-Instruct", 8, "num_attention_heads"),
        # ... TP 14 divides the 28 heads but not the 4 KV heads' replication (14 % 4 = 2)
        ("Qwen__Qwen2.5-7B-Instruct", 14, "num_key_value_heads"),
    ],
)
def test_tensor_parallel_vllm_refuses(model, tp, field):
    with pytest.raises(KVConfigError, match=field):
        bytes_per_token(hf_config(model), tensor_parallel_size=tp)


def test_mamba_state_shrinks_with_tensor_parallel():
    cfg = hf_config("ai21labs__Jamba-v0.1")
    fp = footprint(kv_spec_from_config(cfg), tensor_parallel_size=2)
    assert fp.state_bytes_per_request == 28 * ((4 - 1) * (2 * 4096 // 2) + (2 * 4096 // 2) * 16) * 2
    assert fp.bytes_per_token == 2 * 4 * (8 // 2) * 128 * 2


def test_sliding_window_request_and_capacity_by_hand():
    from kvpilot.kv import capacity

    cap = capacity(hf_config("openai__gpt-oss-20b"), kv_memory_bytes=10 * 2**30, max_model_len=32_768)
    full = (32_768 // 16) * 16 * (2 * 12 * 8 * 64 * 2)
    # 12 sliding layers hold ceil(min(128 - 1 + 2048, 32768) / 16) + 1 = 136 + 1 blocks
    sliding = (-(-(128 - 1 + 2048) // 16) + 1) * 16 * (2 * 12 * 8 * 64 * 2)
    assert cap.request_bytes == full + sliding
    assert cap.state_bytes_per_request == sliding
    slot_block = 16 * (2 * 24 * 8 * 64 * 2)  # pool blocks are slots of all 24 per-token layers
    assert cap.kv_blocks == (10 * 2**30) // slot_block
    assert cap.max_concurrency == cap.kv_blocks / -(-(full + sliding) // slot_block)
    assert cap.estimate is True


def test_gemma3_default_context_from_gemma3_text_config_defaults():
    from kvpilot.kv import capacity

    cap = capacity(hf_config("google__gemma-3-27b-it"))
    assert cap.max_model_len == 131_072  # transformers Gemma3TextConfig default max_position_embeddings
    assert "text_config.max_position_embeddings" in cap.spec.defaults_used


def test_nested_text_config_sliding_window_without_layer_pattern():
    # A multimodal-style config: text_config with a sliding_window but no layer pattern, and
    # max_position_embeddings only at the top level (vLLM reads the top level first).
    config = {
        "model_type": "x",
        "max_position_embeddings": 4096,
        "text_config": {
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "hidden_size": 256,
            "sliding_window": 1024,
        },
    }
    # window 1024 < 4096: every layer slides (Mistral/Phi-3 convention)
    assert kv_spec_from_config(config).layer_counts == (("sliding_attention", 2),)
    # window 4096 >= top-level max_position_embeddings 4096: every layer sees the whole context
    config["text_config"]["sliding_window"] = 4096
    assert kv_spec_from_config(config).layer_counts == (("full_attention", 2),)
