"""The operator pre-flight condition (pure)."""

from __future__ import annotations

import pytest

from kvpilot.api.models import EngineSpec
from kvpilot.kv import KVConfigError
from kvpilot.kv.preflight import gpu_memory_from_node_label, kv_preflight

from .conftest import GIB, hf_config

LLAMA = hf_config("meta-llama__Llama-3.1-8B-Instruct")


def condition_and_warning(*args, **kwargs):
    """The pre-flight's ``(condition, warning)``: the two the operator writes and posts."""
    result = kv_preflight(*args, **kwargs)
    return result.condition, result.warning


def test_fits_gives_true_condition_and_no_warning():
    cond, warning = condition_and_warning(
        LLAMA,
        EngineSpec(max_model_len=8192, gpu_memory_utilization=0.9),
        gpu_memory_bytes=80 * GIB,
        weights_bytes=15 * GIB,
        overhead_bytes=2 * GIB,
    )
    assert cond["type"] == "KVCapacity"
    assert cond["status"] == "True"
    assert cond["reason"] == "Fits"
    assert warning is None
    # 0.9 x 80 GiB - 17 GiB = 55 GiB; / (16 x 131,072 B) = 28,160 blocks = 450,560 tokens
    assert "450,560 tokens" in cond["message"]
    assert "131,072 B/token" in cond["message"]


def test_max_model_len_too_long_warns_with_fixes():
    cond, warning = condition_and_warning(
        LLAMA,
        EngineSpec(gpu_memory_utilization=0.9),
        gpu_memory_bytes=24 * GIB,
        weights_bytes=15 * GIB,
        overhead_bytes=2 * GIB,
    )
    # default maxModelLen = max_position_embeddings 131,072 -> 16 GiB of KV; 0.9 x 24 - 17 = 4.6 GiB available
    assert cond["status"] == "False"
    assert cond["reason"] == "MaxModelLenExceedsKV"
    assert warning == cond["message"]
    assert "16.00 GiB" in warning
    assert "refuse to start" in warning
    assert "maxModelLen <=" in warning


def test_no_memory_left():
    cond, warning = condition_and_warning(
        LLAMA, EngineSpec(max_model_len=4096), gpu_memory_bytes=16 * GIB, weights_bytes=15 * GIB
    )
    assert cond["status"] == "False"
    assert cond["reason"] == "NoKVMemory"
    assert warning == cond["message"]
    # 0.92 x 16 GiB = 14.72 GiB is less than the 15 GiB of weights alone: no KV; one request of 4,096 tokens
    # x 131,072 B = 0.5 GiB
    assert warning.startswith("one request of maxModelLen 4,096 needs 0.50 GiB KV, more than 0.00 GiB available")


def test_unknown_inputs_and_bad_config_never_raise():
    cond, warning = condition_and_warning(LLAMA, EngineSpec(), gpu_memory_bytes=None, weights_bytes=15 * GIB)
    assert (cond["status"], cond["reason"], warning) == ("Unknown", "InsufficientInputs", None)
    cond, warning = condition_and_warning({"num_hidden_layers": 2}, None, kv_memory_bytes=GIB)
    assert (cond["status"], cond["reason"], warning) == ("Unknown", "InvalidModelConfig", None)
    assert "num_attention_heads" in cond["message"]


def test_node_label_is_mib():
    assert gpu_memory_from_node_label("81559") == 81559 * 2**20
    with pytest.raises(KVConfigError, match="nvidia.com/gpu.memory"):
        gpu_memory_from_node_label("80Gi")


def test_numbers_match_the_api_preflight_status_fields():
    from kvpilot.api.models import PreflightStatus
    from kvpilot.kv.preflight import kv_preflight

    result = kv_preflight(
        LLAMA,
        EngineSpec(max_model_len=8192, gpu_memory_utilization=0.9),
        gpu_memory_bytes=80 * GIB,
        weights_bytes=15 * GIB,
        overhead_bytes=2 * GIB,
    )
    status = PreflightStatus(**result.numbers)
    assert status.kv_tokens == 28_160 * 16
    assert status.bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert status.fits is True
    assert status.estimate is True
    # (0.9 x 80 GiB - 55 GiB + (512 blocks + the null block) x 16 x 131,072 B) / 80 GiB = (17 + 1 + 2 MiB) / 80:
    # vLLM 0.29.0 keeps the null block out of the fit check
    assert abs(status.min_gpu_memory_utilization - (18 + 2 / 1024) / 80) < 1e-9
