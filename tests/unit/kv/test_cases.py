"""The KV cases of tests/fixtures/cases (each file's ``source`` names the public thread): each reproduces
its ``expected`` numbers within its ``tolerance_pct``. Inputs are what the case's log lines state (e.g.
``kv_cache_size=2.89GiB``), never the expected outputs.
"""

from __future__ import annotations

import math

import pytest

from kvpilot.kv import capacity, startup_memory_check

from .conftest import GIB, case

CONFIG_FIELDS = (
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_size",
    "head_dim",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
)


def config_of(c: dict) -> dict:
    """A config.json built from the case's ``model_config`` fields."""
    mc = c["model_config"]
    cfg = {k: mc[k] for k in CONFIG_FIELDS if k in mc}
    cfg["torch_dtype"] = mc["dtype"]
    return cfg


def close(actual: float, expected: float, tolerance_pct: float) -> bool:
    return abs(actual - expected) <= abs(expected) * tolerance_pct / 100


def test_c01_llama31_8b_max_len_29000_does_not_fit():
    c = case("C01")
    exp, tol = c["expected"], c["expected"]["tolerance_pct"]
    # log: total_gpu_memory=23.58GiB kv_cache_size=2.89GiB gpu_memory_utilization=0.90, max_model_len 29000
    cap = capacity(
        config_of(c),
        kv_memory_bytes=round(2.89 * GIB),
        gpu_memory_bytes=round(23.58 * GIB),
        gpu_memory_utilization=0.9,
        max_model_len=29_000,
        block_size=16,
    )
    assert cap.bytes_per_token == exp["kv_bytes_per_token"]
    assert cap.block_size * cap.bytes_per_token == exp["block_bytes"]
    assert close(cap.kv_tokens, exp["capacity_tokens"], tol)
    assert cap.fits is False
    assert round(cap.max_concurrency, 2) == exp["max_concurrency_at_max_model_len"]
    deficit = exp["required_tokens"] - cap.max_model_len_that_fits
    assert close(deficit, exp["deficit_tokens"], tol)
    assert close(deficit * cap.bytes_per_token / GIB, exp["deficit_gib"], tol)
    assert close(cap.min_gpu_memory_utilization_to_fit, exp["min_gpu_memory_utilization_to_fit"], tol)
    assert math.ceil(cap.min_gpu_memory_utilization_to_fit * 100) / 100 == exp["min_gpu_memory_utilization_to_fit"]


def test_c01_same_pool_from_gpu_memory_minus_profiled_usage():
    c = case("C01")
    exp, tol = c["expected"], c["expected"]["tolerance_pct"]
    # log: peak_torch_memory=17.98GiB (weights + activations) non_torch_memory=0.35GiB
    cap = capacity(
        config_of(c),
        gpu_memory_bytes=round(23.58 * GIB),
        gpu_memory_utilization=0.9,
        weights_bytes=round(17.98 * GIB),
        overhead_bytes=round(0.35 * GIB),
        max_model_len=29_000,
    )
    assert close(cap.kv_tokens, exp["capacity_tokens"], tol)
    assert cap.fits is False


@pytest.mark.parametrize(("run", "kv_gib"), [("run_20000", 3.81), ("run_35000", 5.82)])
def test_c01_other_runs(run, kv_gib):
    c = case("C01")
    exp, tol = c["expected"][run], c["expected"]["tolerance_pct"]
    max_len = int(run.split("_")[1])
    cap = capacity(config_of(c), kv_memory_bytes=round(kv_gib * GIB), max_model_len=max_len)
    assert close(cap.kv_tokens, exp["capacity_tokens"], tol)
    assert cap.fits is True  # verdict OK
    if "max_concurrency" in exp:
        assert round(cap.max_concurrency, 2) == exp["max_concurrency"]


def test_c03_deepseek_v2_lite_mla_32k():
    c = case("C03")
    exp, tol = c["expected"], c["expected"]["tolerance_pct"]
    # log: "(0.95 GiB KV cache is needed, which is larger than the available KV cache memory (0.93 GiB)"
    cap = capacity(config_of(c), kv_memory_bytes=round(0.93 * GIB), max_model_len=32_768)
    assert cap.bytes_per_token == exp["kv_bytes_per_token"]
    assert cap.bytes_per_token != exp["wrong_answers_to_reject"]["naive_gqa_formula_bytes_per_token"]
    assert close(cap.request_bytes / GIB, exp["required_gib"], tol)
    assert cap.fits is False
    assert close(cap.max_model_len_that_fits, exp["estimated_max_model_len"], tol)
    assert close((cap.request_bytes - cap.kv_memory_bytes) / cap.kv_memory_bytes * 100, exp["shortfall_pct"], 5)
    tp2 = capacity(config_of(c), kv_memory_bytes=round(0.93 * GIB), max_model_len=32_768, tensor_parallel_size=2)
    assert tp2.bytes_per_token == exp["kv_bytes_per_token"]  # note_tp: MLA latent replicated per rank


def test_c06_r1_distill_qwen14b_tp2():
    c = case("C06")
    exp, tol = c["expected"], c["expected"]["tolerance_pct"]
    kv_gib = exp["kv_gib_per_gpu_implied"]  # 7.46 GiB per GPU
    cap = capacity(config_of(c), tensor_parallel_size=2, kv_memory_bytes=round(kv_gib * GIB), max_model_len=131_072)
    assert capacity(config_of(c), max_model_len=131_072).bytes_per_token == exp["kv_bytes_per_token_total"]
    assert cap.bytes_per_token == exp["kv_bytes_per_token_per_gpu"]
    assert close(cap.kv_tokens, exp["capacity_tokens"], tol)
    assert cap.fits is False
    assert cap.request_bytes / GIB == exp["required_gib_per_gpu"]
    assert close(cap.max_model_len_that_fits, exp["fixes"]["max_model_len_le"], tol)
    fp8 = capacity(
        config_of(c),
        tensor_parallel_size=2,
        kv_memory_bytes=round(kv_gib * GIB),
        kv_cache_dtype="fp8",
        max_model_len=131_072,
    )
    assert close(fp8.kv_tokens, exp["fixes"]["fp8_kv_capacity_tokens"], tol)
    dp = capacity(
        config_of(c),
        tensor_parallel_size=2,
        data_parallel_size=2,
        kv_memory_bytes=round(kv_gib * GIB),
        max_model_len=131_072,
    )
    assert dp.bytes_per_token == cap.bytes_per_token
    assert dp.kv_tokens == cap.kv_tokens


def test_c11_qwen25_7b_16_gib_budget():
    c = case("C11")
    exp, tol = c["expected"], c["expected"]["tolerance_pct"]
    cap = capacity(config_of(c), kv_memory_bytes=16 * GIB, max_model_len=8192)  # flags.kv_cache_memory "16 GiB"
    assert cap.bytes_per_token == exp["kv_bytes_per_token"]
    assert close(cap.kv_tokens, exp["capacity_tokens"], tol)
    at_6000 = capacity(config_of(c), kv_memory_bytes=16 * GIB, max_model_len=6000)
    assert math.floor(at_6000.max_concurrency) == exp["max_safe_concurrency_at_6000_tokens"]
    assert close(exp["peak_demand_tokens_estimate"] / cap.kv_tokens, exp["overcommit_ratio_at_full_length"], 1)
    fp8 = capacity(config_of(c), kv_memory_bytes=16 * GIB, max_model_len=8192, kv_cache_dtype="fp8")
    assert close(fp8.kv_tokens, 599_168, tol)  # remedies: "fp8 KV (599168 tokens)"


def test_c20a_free_memory_below_utilization_target():
    c = case("C20a")
    exp = c["expected"]
    # log: "Free memory on device cuda:1 (19.77/22.05 GiB) on startup is less than desired GPU memory
    # utilization (0.9, 19.84 GiB)."
    check = startup_memory_check(
        total_bytes=22.05 * GIB, free_bytes=19.77 * GIB, gpu_memory_utilization=c["flags"]["gpu_memory_utilization"]
    )
    assert check.feasible is False
    assert round(check.requested_bytes / GIB, 3) == exp["requested_gib"]
    assert round(check.free_bytes / GIB, 2) == exp["free_gib"]
    assert round(check.shortfall_bytes / GIB, 3) == exp["shortfall_gib"]
    assert round(check.max_feasible_utilization, 4) == exp["max_feasible_util"]
    assert startup_memory_check(22.05 * GIB, 19.77 * GIB, exp["max_feasible_util"] - 1e-4).feasible is True
