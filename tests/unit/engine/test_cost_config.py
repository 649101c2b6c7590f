"""Cost model arithmetic and EngineConfig derivations, worked out by hand from the datasheets."""

from __future__ import annotations

import typing

import pytest

from kvpilot.engine import EngineConfig
from kvpilot.engine.config import EngineFlags
from kvpilot.engine.hardware import CostModel, model_profile
from kvpilot.gpus import gpu_profile

GIB = 2**30


def test_decode_is_weight_reads_over_bandwidth_background_s1():
    # docs/background.md §1: 16.2 GB of weights on a 896 GB/s GPU at 70 %: 16.2e9 / (896e9 * 0.7)
    # = 25.83 ms per token -> 38.7 tok/s (measured 39).
    cm = CostModel(
        gpu_profile("laptop-896gbs"),
        model_profile("qwen2.5-7b"),
        bytes_per_token=0,
        overhead=0.0,
        weight_bytes=int(16.2e9),
    )
    assert 1 / cm.step_time(1, 0, 1) == pytest.approx(38.7, rel=0.01)


def test_h100_step_time_by_hand():
    cm = CostModel(gpu_profile("H100"), model_profile("qwen2.5-7b"), bytes_per_token=57344, overhead=0.0015)
    # decode of one request with 1,000 tokens of context: the checkpoint's 15,231,233,024 B of weights
    # (model.safetensors.index.json total_size) / (3.35e12 * 0.7) = 6.4952 ms; KV 1,000 * 57,344 / 2.345e12 = 0.0245 ms
    expected = 0.0015 + 15_231_233_024 / 2.345e12 + 1000 * 57344 / 2.345e12
    assert cm.step_time(1, 1000, 1000) == pytest.approx(expected, rel=1e-9)
    # a 4,096-token prefill is compute-bound: 2 * 7.61e9 * 4096 FLOP + attention
    # 4 * 28 layers * 28 heads * 128 * (4096 * 4097 / 2) over 989e12 * 0.78
    flops = 2 * 7.61e9 * 4096 + 4 * 28 * 28 * 128 * (4096 * 4097 / 2)
    assert cm.step_time(4096, 4096, 4096 * 4097 / 2) == pytest.approx(0.0015 + flops / (989e12 * 0.78), rel=1e-9)


def test_gpu_aliases_and_unknown_profile():
    assert gpu_profile("A100").bandwidth == 2.039e12
    assert gpu_profile("L4").peak_flops == 121e12
    with pytest.raises(ValueError, match="gpu: unknown profile 'B300'"):
        gpu_profile("B300")


def test_kv_tokens_give_blocks():
    cfg = EngineConfig(kv_cache_tokens=21520)
    assert cfg.resolved_num_gpu_blocks() == 1345
    assert cfg.kv_cache_tokens_resolved() == 21520


def test_derived_capacity_is_the_logged_experiment():
    # vLLM claims ceil(8 GiB * 0.60) = 5,153,960,756 B; minus the checkpoint's 1,543,714,304 bf16 parameters
    # (3,087,428,608 B) and the default reserve, what that deployment leaves (1,449,510,708 B) = 617,021,440 B;
    # / (28,672 B * 16) = 1,345 blocks = 21,520 tokens, the pool vLLM logged (docs/background.md §9), as
    # `kvpilot kv` derives it (test_the_engine_s_pool_is_kvpilot_kv_s below)
    cfg = EngineConfig(gpu="laptop-8gb", model="qwen2.5-1.5b", gpu_memory_utilization=0.60, max_model_len=8192)
    assert cfg.resolved_num_gpu_blocks() == 1345
    assert cfg.kv_cache_tokens_resolved() == 21520


def test_bytes_per_token_fp8_and_tensor_parallel():
    assert EngineConfig(model="qwen2.5-7b").resolved_bytes_per_token() == 57344
    assert EngineConfig(model="qwen2.5-7b", kv_cache_dtype="fp8").resolved_bytes_per_token() == 28672
    # TP 4 with 4 KV heads: one KV head per GPU, 57,344 / 4
    assert EngineConfig(model="qwen2.5-7b", tensor_parallel_size=4).resolved_bytes_per_token() == 57344 // 4
    # TP 16 with Llama's 8 KV heads (32 query heads): heads replicated, one per GPU, 131,072 / min(16, 8)
    assert EngineConfig(model="llama-3.1-8b", tensor_parallel_size=16).resolved_bytes_per_token() == 131072 // 8
    # TP 8 does not divide Qwen2.5-7B's 28 attention heads: vLLM refuses to start ("Total number of attention
    # heads (28) must be divisible by tensor parallel size (8)"), so the engine does too
    with pytest.raises(ValueError, match="^tensor_parallel_size: 8 does not divide num_attention_heads 28"):
        EngineConfig(model="qwen2.5-7b", tensor_parallel_size=8).resolved_bytes_per_token()


def test_from_dict_names_bad_fields():
    cfg = EngineConfig.from_dict({"max-num-seqs": "4", "enable_prefix_caching": "false"})
    assert cfg.max_num_seqs == 4
    assert cfg.enable_prefix_caching is False
    with pytest.raises(ValueError, match="^max_num_sequences: unknown engine field"):
        EngineConfig.from_dict({"max_num_sequences": 4})
    with pytest.raises(ValueError, match="^max_num_seqs: 'many' is not a valid int"):
        EngineConfig.from_dict({"max_num_seqs": "many"})
    # the model's own profile is an object code sets, not a document's value
    with pytest.raises(ValueError, match="^profile: 'qwen' is not a model profile"):
        EngineConfig.from_dict({"profile": "qwen"})
    assert EngineConfig.from_dict({"profile": None}).profile is None


def test_engine_flags_are_the_config_fields_with_their_types():
    # every field a caller may set, typed as the field (all but the profile object): a field added to one and not
    # the other, or typed otherwise, fails here
    config = typing.get_type_hints(EngineConfig)
    del config["profile"]
    assert typing.get_type_hints(EngineFlags) == config


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_num_seqs": 512, "max_num_batched_tokens": 256}, "^max_num_batched_tokens: 256 must be"),
        (
            {"enable_chunked_prefill": False, "max_num_batched_tokens": 2048, "max_model_len": 8192},
            "^max_num_batched_tokens: 2048 is smaller than max_model_len",
        ),
        ({"kv_cache_tokens": 4096, "max_model_len": 8192}, "^max_model_len: to serve at least one"),
        ({"gpu_memory_utilization": 1.5}, "^gpu_memory_utilization: must be in"),
        ({"offload_chunk_tokens": 100}, "^offload_chunk_tokens: 100 must be a multiple"),
        (
            {"gpu": "laptop-8gb", "model": "llama-3.1-8b", "max_model_len": 2048},
            "^gpu_memory_utilization: no available memory",
        ),
    ],
)
def test_validate_rejects_like_vllm(fields, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig(**fields).validate()


def test_batch_defaults_depend_on_the_gpu_like_vllm():
    # docs/background.md §7: 256 / 2048; 1024 / 8192 on >= 70 GiB GPUs that are not A100s
    assert (
        EngineConfig(gpu="l4").resolved().max_num_seqs,
        EngineConfig(gpu="l4").resolved().max_num_batched_tokens,
    ) == (256, 2048)
    h100 = EngineConfig(gpu="h100-sxm").resolved()
    assert (h100.max_num_seqs, h100.max_num_batched_tokens) == (1024, 8192)
    a100 = EngineConfig(gpu="a100-80gb").resolved()
    assert (a100.max_num_seqs, a100.max_num_batched_tokens) == (256, 2048)
    mixed = EngineConfig(gpu="h100-sxm", max_num_seqs=4).resolved()
    assert (mixed.max_num_seqs, mixed.max_num_batched_tokens) == (4, 8192)


@pytest.mark.parametrize(
    ("profile", "config_file"),
    [
        ("qwen2.5-1.5b", "Qwen__Qwen2.5-1.5B-Instruct.json"),
        ("qwen2.5-7b", "Qwen__Qwen2.5-7B-Instruct.json"),
        ("llama-3.1-8b", "meta-llama__Llama-3.1-8B-Instruct.json"),
    ],
)
def test_model_profiles_match_their_config_json(fixtures_dir, profile, config_file):
    import json

    import kvpilot.kv as kv

    cfg = json.loads((fixtures_dir / "hf-configs" / config_file).read_text())
    p = model_profile(profile)
    assert p.num_layers == cfg["num_hidden_layers"]
    assert p.num_heads == cfg["num_attention_heads"]
    assert p.num_kv_heads == cfg["num_key_value_heads"]
    assert p.head_dim == cfg["hidden_size"] // cfg["num_attention_heads"] == 128
    # 2 x layers x kv heads x head dim x 2 bytes, and the KV library agrees
    assert p.bytes_per_token == 2 * p.num_layers * p.num_kv_heads * 128 * 2
    assert kv.bytes_per_token(cfg) == p.bytes_per_token
    # the context vLLM derives from the config (32,768 for Qwen2.5, 131,072 for Llama-3.1)
    assert p.max_model_len == kv.kv_spec_from_config(cfg).context.default == cfg["max_position_embeddings"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        # 1 token // 16 = 0 blocks: not even the null block; the message must not report negative capacity
        ({"kv_cache_tokens": 1}, "^kv_cache_tokens: 1 "),
        ({"kv_cache_tokens": 31}, "^kv_cache_tokens: 31 "),  # 1 block: the null block only, nothing usable
        ({"num_gpu_blocks": 1}, "^num_gpu_blocks: 1 "),
    ],
)
def test_kv_cache_smaller_than_two_blocks_is_refused(fields, message):
    with pytest.raises(ValueError, match=message) as info:
        EngineConfig(**fields).validate()
    assert "-1" not in str(info.value)
    assert "-16" not in str(info.value)


DEPLOYMENTS = [
    # gpu, model profile, its config.json, --gpu-memory-utilization, TP, --kv-cache-dtype, --block-size
    ("laptop-8gb", "qwen2.5-1.5b", "Qwen__Qwen2.5-1.5B-Instruct.json", 0.60, 1, "auto", 16),
    ("h100-sxm", "qwen2.5-7b", "Qwen__Qwen2.5-7B-Instruct.json", 0.92, 1, "auto", 16),
    ("h100-sxm", "llama-3.1-8b", "meta-llama__Llama-3.1-8B-Instruct.json", 0.92, 2, "fp8", 16),
    ("l4", "qwen2.5-1.5b", "Qwen__Qwen2.5-1.5B-Instruct.json", 0.9, 1, "auto", 32),
    ("a100-80gb", "qwen2.5-7b", "Qwen__Qwen2.5-7B-Instruct.json", 0.92, 4, "auto", 16),
]


@pytest.mark.parametrize(("gpu", "model", "config_file", "util", "tp", "dtype", "block"), DEPLOYMENTS)
def test_the_engine_s_pool_is_kvpilot_kv_s(fixtures_dir, gpu, model, config_file, util, tp, dtype, block):
    """One server, one answer: the engine model's KV pool and concurrency are `kvpilot kv`'s for the same GPU
    memory, utilization, weights, TP, KV dtype and block size (both through kvpilot.kv.capacity).
    """
    import json

    from click.testing import CliRunner

    from kvpilot.cli import cli
    from kvpilot.commands.simulate.cli import kv_cache_log_line

    engine = EngineConfig(
        gpu=gpu,
        model=model,
        gpu_memory_utilization=util,
        tensor_parallel_size=tp,
        kv_cache_dtype=dtype,
        block_size=block,
        max_model_len=8192,
    )
    weights = model_profile(model).weight_bytes // tp
    result = CliRunner().invoke(
        cli,
        [
            "kv",
            str(fixtures_dir / "hf-configs" / config_file),
            "--gpu-memory",
            f"{gpu_profile(gpu).memory_bytes}B",
            "--gpu-memory-utilization",
            str(util),
            "--weights-memory",
            f"{weights}B",
            "--tensor-parallel-size",
            str(tp),
            "--kv-cache-dtype",
            dtype,
            "--block-size",
            str(block),
            "--max-model-len",
            "8192",
            "-o",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    kv = json.loads(result.output)
    assert engine.resolved_num_gpu_blocks() == kv["kv_blocks"]
    assert engine.resolved_bytes_per_token() == kv["bytes_per_token"]
    assert engine.kv_cache_tokens_resolved() == kv["kv_tokens"]
    assert f"{kv['max_concurrency']:.2f}x" in kv_cache_log_line(block, engine.resolved_num_gpu_blocks(), 8192)
    if gpu == "laptop-8gb":  # the reference deployment: 1,345 blocks (docs/background.md §9)
        assert kv["kv_blocks"] == 1345
        assert kv["kv_tokens"] == 21_520
