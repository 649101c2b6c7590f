"""docs/background.md §2 and §4 reference numbers (must be reproduced exactly)."""

from __future__ import annotations

import pytest

from kvpilot.kv import DEFAULT_OVERHEAD_BYTES, bytes_per_token, capacity

from .conftest import GIB, hf_config

MHA_7B = {  # Qwen2.5-7B-Instruct with H_kv = heads = 28 (docs/background.md §2, last row)
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 28,
    "hidden_size": 3584,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 32768,
}


@pytest.mark.parametrize(
    ("config", "expected_bytes", "expected_gib_32k"),
    [
        (hf_config("Qwen__Qwen2.5-1.5B-Instruct"), 28_672, 0.875),
        (hf_config("Qwen__Qwen2.5-7B-Instruct"), 57_344, 1.75),
        (hf_config("Qwen__Qwen2.5-72B-Instruct"), 327_680, 10),
        (MHA_7B, 401_408, 12.25),
    ],
)
def test_reference_bytes_per_token_and_32k_request(config, expected_bytes, expected_gib_32k):
    assert bytes_per_token(config) == expected_bytes
    cap = capacity(config, max_model_len=32_768)
    assert cap.request_bytes / GIB == expected_gib_32k


def test_reference_kib_column():
    assert [
        bytes_per_token(c) / 1024
        for c in (
            hf_config("Qwen__Qwen2.5-1.5B-Instruct"),
            hf_config("Qwen__Qwen2.5-7B-Instruct"),
            hf_config("Qwen__Qwen2.5-72B-Instruct"),
            MHA_7B,
        )
    ] == [28, 56, 320, 392]


def test_lmcache_cross_check_4864_tokens():
    b = bytes_per_token(hf_config("Qwen__Qwen2.5-1.5B-Instruct"))
    assert round(4_864 * b / GIB, 5) == 0.12988
    assert round(21_520 * b / GIB, 3) == 0.575


def test_reference_21520_tokens_is_1345_blocks_1344_usable():
    cfg = hf_config("Qwen__Qwen2.5-1.5B-Instruct")
    kv_memory = 21_520 * 28_672  # exactly the logged pool
    cap = capacity(cfg, kv_memory_bytes=kv_memory, max_model_len=8192)
    assert cap.kv_tokens == 21_520
    assert cap.kv_blocks == 1_345
    assert cap.usable_blocks == 1_344
    # vLLM's log of the reference deployment: "Maximum concurrency for 8,192 tokens per request: 2.63x"
    assert f"{cap.max_concurrency:.2f}" == "2.63"
    assert cap.max_concurrency == 1_345 / (8192 // 16)


def test_fp8_is_one_byte():
    assert bytes_per_token(hf_config("Qwen__Qwen2.5-7B-Instruct"), kv_cache_dtype="fp8") == 2 * 28 * 4 * 128 * 1
    assert bytes_per_token(hf_config("Qwen__Qwen2.5-7B-Instruct"), kv_cache_dtype="fp8_e5m2") == 28_672


def test_reference_deployment_from_gpu_memory_with_the_default_overhead():
    """docs/background.md §7/§9: Qwen2.5-1.5B, 8 GiB GPU, utilization 0.60 -> vLLM logged 21,520 KV tokens.

    The default overhead (1.35 GiB) is what this deployment leaves, so this checks the derivation's
    arithmetic and the documented default, not an independent prediction.
    """
    weights = 1_543_714_304 * 2  # parameters of Qwen2.5-1.5B (tied embeddings) x 2 bytes
    cap = capacity(
        hf_config("Qwen__Qwen2.5-1.5B-Instruct"),
        gpu_memory_bytes=8 * GIB,
        gpu_memory_utilization=0.60,
        weights_bytes=weights,
        max_model_len=8192,
    )
    # vLLM claims ceil(0.6 x 8 GiB) = 5,153,960,756 B; minus the weights 3,087,428,608 and the pool
    # 21,520 x 28,672 = 617,021,440 leaves 1,449,510,708 B (1.35 GiB): the default overhead
    assert DEFAULT_OVERHEAD_BYTES == 5_153_960_756 - 3_087_428_608 - 617_021_440 == 1_449_510_708
    assert cap.kv_memory_bytes == 617_021_440
    assert (cap.kv_tokens, cap.kv_blocks, cap.usable_blocks) == (21_520, 1_345, 1_344)
    assert cap.estimate is True
