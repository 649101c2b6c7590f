"""kvpilot's KV pool, startup fit and model context against vLLM 0.29.0's own code on the same inputs
(``vllm_ref``; the answers come from tests/unit/kv/vllm_oracle.py run by the reference python).

- the pool: ``get_kv_cache_configs`` (blocks, the fit check that keeps the null block out, the "estimated
  maximum model length") and ``get_kv_cache_capacity`` (the logged tokens and concurrency);
- the context: ``_get_and_verify_max_len`` on every fixture config and on RoPE variants of them;
- the memory vLLM claims: ``request_memory``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kvpilot.kv import capacity
from kvpilot.kv.capacity import kv_cache_capacity, requested_memory_bytes
from kvpilot.kv.spec import context_length
from tests.unit.kv.vllm_oracle import ask

from .conftest import GIB, HF_CONFIGS, hf_config

pytestmark = pytest.mark.vllm_ref
QWEN_1_5B, QWEN_7B, LLAMA = (
    "Qwen__Qwen2.5-1.5B-Instruct",
    "Qwen__Qwen2.5-7B-Instruct",
    "meta-llama__Llama-3.1-8B-Instruct",
)
PHI3 = "microsoft__Phi-3-mini-4k-instruct"


def _folder(tmp_path: Path, name: str, config: dict) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


#: (config, max_model_len, KV memory bytes, block size): the reference pool, the boundary of the fit
#: check on both sides (16 GiB holds 131,072 tokens of 131,072 B, all 8,192 blocks: vLLM keeps one as the
#: null block and refuses; one block more fits), a length that is not a multiple of the block, the case
#: C01 pool, a large pool.
POOLS = [
    (QWEN_1_5B, 8192, 21_520 * 28_672, 16),
    (LLAMA, 131_072, 16 * GIB, 16),
    (LLAMA, 131_072, 16 * GIB + 16 * 131_072, 16),
    (LLAMA, 29_000, round(2.89 * GIB), 16),
    (QWEN_1_5B, 100, 70 * 16 * 28_672, 16),
    (QWEN_1_5B, 8000, GIB, 32),
    (QWEN_7B, 32_768, 16 * GIB, 16),
]


def test_pool_fit_and_estimated_length_equal_vllm_s_kv_cache_configs(tmp_path: Path):
    cases = [
        {
            "kind": "pool",
            "config_dir": _folder(tmp_path, f"pool{i}", hf_config(name)),
            "max_model_len": length,
            "memory": memory,
            "block_size": block,
        }
        for i, (name, length, memory, block) in enumerate(POOLS)
    ]
    vllm = ask(tmp_path, cases)
    for (name, length, memory, block), ref in zip(POOLS, vllm, strict=True):
        cap = capacity(hf_config(name), kv_memory_bytes=memory, max_model_len=length, block_size=block)
        assert cap.fits is ref["fits"], (name, length, memory, ref)
        if ref["fits"]:
            assert cap.kv_blocks == ref["num_blocks"], (name, length, memory)
            assert kv_cache_capacity(cap.kv_blocks, block, length) == (ref["tokens"], ref["concurrency"])
            assert cap.max_concurrency == ref["concurrency"]
        else:  # vLLM's "estimated maximum model length" is the longest request the usable blocks hold
            assert cap.pool_max_model_len == ref["estimated_max_model_len"], (name, length, memory)
    # by hand: 21,520 x 28,672 B = 1,345 blocks of 16 x 28,672 B; 1,345 / (8,192 / 16) = 2.626953125
    assert vllm[0] == {"fits": True, "num_blocks": 1345, "tokens": 21_520, "concurrency": 2.626953125}
    # 16 GiB: 8,192 blocks, 8,191 usable, 131,072 / 16 = 8,192 needed: refused, estimate 8,191 x 16 = 131,056
    assert vllm[1] == {"fits": False, "estimated_max_model_len": 131_056}
    assert vllm[2]["fits"] is True
    assert vllm[2]["num_blocks"] == 8193
    # 70 blocks, 100 tokens = cdiv(100, 16) = 7 blocks per request: 10 requests, int(10 x 100) = 1,000 tokens
    assert (vllm[4]["tokens"], vllm[4]["concurrency"]) == (1000, 10.0)


def _rope_variants() -> dict[str, dict]:
    qwen, phi, llama = hf_config(QWEN_7B), hf_config(PHI3), hf_config(LLAMA)
    long_factors = [1.0] * (phi["hidden_size"] // phi["num_attention_heads"] // 2)
    no_rope_llama = {k: v for k, v in llama.items() if k != "rope_scaling"}
    return {
        # Qwen2.5's model card: YaRN factor 4 over 32,768 -> 131,072
        "qwen-yarn": {
            **qwen,
            "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
        },
        "qwen-linear": {**qwen, "rope_scaling": {"type": "linear", "factor": 2.0}},
        "qwen-dynamic": {**qwen, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
        "qwen-model-max-length": {**qwen, "model_max_length": 65_536},
        "qwen-seq-length": {**qwen, "seq_length": 8192},
        # Phi-3-128k's shape: LongRoPE defaults to original_max_position_embeddings
        "phi-longrope": {
            **phi,
            "max_position_embeddings": 131_072,
            "original_max_position_embeddings": 4096,
            "rope_scaling": {"type": "longrope", "long_factor": long_factors, "short_factor": long_factors},
        },
        # transformers v5 spells it rope_parameters
        "llama-rope-parameters": {
            **no_rope_llama,
            "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0},
        },
    }


def test_context_equals_vllm_s_max_model_len_on_every_fixture_and_rope_variant(tmp_path: Path):
    configs = {path.stem: json.loads(path.read_text()) for path in sorted(HF_CONFIGS.glob("*.json"))}
    configs.update(_rope_variants())
    names = list(configs)
    cases = [{"kind": "context", "config_dir": _folder(tmp_path, n, configs[n])} for n in names]
    vllm = ask(tmp_path, cases)
    ours = {n: context_length(configs[n]) for n in names}
    assert {n: ours[n].default for n in names} == {n: v["max_model_len"] for n, v in zip(names, vllm, strict=True)}
    # by hand: 32,768 x 4 (yarn); 32,768 x 2 (linear, dynamic); model_max_length wins; the smallest key wins;
    # LongRoPE's default 4,096 but up to 131,072; 131,072 x 2
    assert [ours[n].default for n in list(_rope_variants())] == [131_072, 65_536, 65_536, 65_536, 8192, 4096, 262_144]
    assert ours["phi-longrope"].limit == 131_072


def test_a_max_model_len_above_the_context_is_refused_by_vllm_as_kvpilot_says(tmp_path: Path):
    variants = _rope_variants()
    asks = [
        (hf_config(QWEN_7B), 40_000),  # above 32,768: refused
        (hf_config(QWEN_7B), 32_768),  # the context itself: accepted
        (variants["qwen-yarn"], 100_000),  # YaRN raised the context to 131,072: accepted
        (variants["phi-longrope"], 100_000),  # LongRoPE: default 4,096, accepted up to 131,072
        (hf_config(LLAMA), 131_073),
    ]
    cases = [
        {"kind": "context", "config_dir": _folder(tmp_path, f"ask{i}", cfg), "max_model_len": n}
        for i, (cfg, n) in enumerate(asks)
    ]
    vllm = ask(tmp_path, cases)
    refused = ["refused" in v for v in vllm]
    assert refused == [True, False, False, False, True]
    for (cfg, n), no in zip(asks, refused, strict=True):
        cap = capacity(cfg, max_model_len=n)
        assert any("vLLM refuses to start unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in note for note in cap.notes) is no


def test_requested_memory_is_vllm_s(tmp_path: Path):
    asks = [(8 * GIB, 0.6), (round(22.05 * GIB), 0.9), (80 * GIB, 0.92), (24 * GIB, 1.0)]
    vllm = ask(tmp_path, [{"kind": "request_memory", "total": t, "utilization": u} for t, u in asks])
    assert [requested_memory_bytes(t, u) for t, u in asks] == [v["requested"] for v in vllm]
    assert vllm[0]["requested"] == math.ceil(8 * GIB * 0.6) == 5_153_960_756  # 5,153,960,755.2 rounded up
