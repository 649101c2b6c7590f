"""kvpilot.vllm.defaults against vLLM 0.29.0 itself: the constants read off vLLM's classes and source, and the
batch limits ``vllm serve`` picks per GPU computed by vLLM's own ``EngineArgs`` (tests/unit/kv/vllm_oracle.py).

The non-``vllm_ref`` tests work the tiers out by hand from vllm/engine/arg_utils.py (``get_batch_defaults``,
``_set_default_max_num_seqs_and_batched_tokens_args``), quoted in each.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest

from kvpilot.vllm import defaults
from kvpilot.vllm.defaults import is_large_gpu, resolve_batch_limits, vllm_batch_defaults
from tests.unit.kv.vllm_oracle import ask

GIB = 2**30


def test_tiers_by_hand():
    # "if device_memory >= 160 * GiB_bytes": 16384 / 1024, whatever the name
    assert vllm_batch_defaults(160 * GIB, "NVIDIA A100 (hypothetical 160 GB)") == (1024, 16384)
    # "elif device_memory >= 70 * GiB_bytes and 'a100' not in device_name": 8192 / 1024
    assert vllm_batch_defaults(80 * GIB, "h100-sxm") == (1024, 8192)
    assert vllm_batch_defaults(70 * GIB, None) == (1024, 8192)
    assert vllm_batch_defaults(80 * GIB, "NVIDIA A100-SXM4-80GB") == (256, 2048)
    # else (and an unknown GPU: vLLM's "device_memory = 0"): 2048 / 256
    assert vllm_batch_defaults(70 * GIB - 1, "h100") == (256, 2048)
    assert vllm_batch_defaults(None, None) == (256, 2048)
    assert is_large_gpu(192 * GIB, "a100")
    assert not is_large_gpu(80 * GIB, "A100")
    assert not is_large_gpu(None, "h100")


def test_clamps_by_hand():
    # chunked prefill off: "max(model_config.max_model_len, self.max_num_batched_tokens)" -> 8192 on an L4
    assert resolve_batch_limits(24 * GIB, "l4", max_model_len=8192, enable_chunked_prefill=False) == (
        defaults.BatchLimits(256, 8192)
    )
    # "min(self.max_num_seqs * model_config.max_model_len, self.max_num_batched_tokens)": 1 x 1024 on an H100
    assert resolve_batch_limits(80 * GIB, "h100", max_model_len=1024, max_num_seqs=1) == defaults.BatchLimits(1, 1024)
    # an unset max_num_seqs is at most the budget: min(1024, 256)
    assert resolve_batch_limits(80 * GIB, "h100", max_model_len=8192, max_num_batched_tokens=256) == (
        defaults.BatchLimits(256, 256)
    )
    # --performance-mode throughput doubles what was not set: 2 x 256, 2 x 2048
    assert resolve_batch_limits(24 * GIB, "l4", max_model_len=8192, throughput_mode=True) == (
        defaults.BatchLimits(512, 4096)
    )
    # what the user set is kept, even against the clamps
    assert resolve_batch_limits(24 * GIB, "l4", max_model_len=8192, max_num_seqs=4, max_num_batched_tokens=64) == (
        defaults.BatchLimits(4, 64)
    )


GPUS = [
    (0, ""),
    (24 * GIB, "NVIDIA L4"),
    (70 * GIB - 1, "NVIDIA H100 80GB HBM3"),
    (70 * GIB, "NVIDIA H100 PCIe"),
    (80 * GIB, "NVIDIA H100 80GB HBM3"),
    (80 * GIB, "NVIDIA A100-SXM4-80GB"),
    (160 * GIB - 1, "NVIDIA H200"),
    (160 * GIB, "NVIDIA A100 160GB"),
    (192 * GIB, "NVIDIA B200"),
]
GRID = list(itertools.product(GPUS, (1024, 8192), (None, 1, 4), (None, 256), (True, False), ("balanced", "throughput")))


@pytest.mark.vllm_ref
def test_batch_limits_equal_vllm_s_engine_args_on_every_gpu_tier(tmp_path: Path, fixtures_dir: Path):
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(fixtures_dir / "hf-configs" / "Qwen__Qwen2.5-1.5B-Instruct.json", model / "config.json")
    cases = [
        {
            "kind": "batch",
            "config_dir": str(model),
            "memory": memory,
            "name": name,
            "max_model_len": length,
            "max_num_seqs": seqs,
            "max_num_batched_tokens": budget,
            "enable_chunked_prefill": chunked,
            "performance_mode": mode,
        }
        for (memory, name), length, seqs, budget, chunked, mode in GRID
    ]
    vllm = ask(tmp_path, cases)
    ours = [
        resolve_batch_limits(
            c["memory"],
            c["name"],
            max_model_len=c["max_model_len"],
            max_num_seqs=c["max_num_seqs"],
            max_num_batched_tokens=c["max_num_batched_tokens"],
            enable_chunked_prefill=c["enable_chunked_prefill"],
            throughput_mode=c["performance_mode"] == "throughput",
        )
        for c in cases
    ]
    assert [(o.max_num_seqs, o.max_num_batched_tokens) for o in ours] == [
        (v["max_num_seqs"], v["max_num_batched_tokens"]) for v in vllm
    ]
    # the grid reaches every tier: 256/2048, 1024/8192 and 1024/16384 all occur among vLLM's answers
    assert {(v["max_num_seqs"], v["max_num_batched_tokens"]) for v in vllm} >= {
        (256, 2048),
        (1024, 8192),
        (1024, 16384),
    }


@pytest.mark.vllm_ref
def test_constants_are_vllm_s(tmp_path: Path):
    (vllm,) = ask(tmp_path, [{"kind": "constants"}])
    assert defaults.DEFAULT_BLOCK_SIZE == vllm["default_block_size"] == vllm["block_size"] == 16
    assert defaults.DEFAULT_GPU_MEMORY_UTILIZATION == vllm["gpu_memory_utilization"] == 0.92
    assert defaults.NULL_BLOCKS == 10 - vllm["free_blocks_of_10"] == 1
    assert list(defaults.MAX_MODEL_LEN_KEYS) == vllm["max_model_len_keys"]
    assert list(defaults.ROPE_TYPES_WITHOUT_CONTEXT_FACTOR) == vllm["rope_types_without_factor"]
    assert (vllm["prescaled_model_type"],) == defaults.ROPE_PRESCALED_MODEL_TYPES
