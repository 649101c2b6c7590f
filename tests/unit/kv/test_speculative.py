"""--speculative-config: a speculative-decoding draft's KV layers share the target's pool.

Hand-worked numbers below; the reference test runs vLLM 0.29.0's own SpeculativeConfig (layer count, KV heads,
head size, dtype of the draft) and kv_cache_utils (blocks of the shared pool) on CPU.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.kv import KVConfigError, capacity, kv_spec_from_config
from kvpilot.kv.speculative import draft_layers, parse_speculative_config
from tests.conftest import require_vllm_python

from .conftest import FIXTURES, HF_CONFIGS, hf_config

EAGLE = FIXTURES / "speculative" / "yuhuili__EAGLE-LLaMA3-Instruct-8B.json"
LLAMA = HF_CONFIGS / "meta-llama__Llama-3.1-8B-Instruct.json"
DEEPSEEK = HF_CONFIGS / "deepseek-ai__DeepSeek-V3.json"
QWEN7B = HF_CONFIGS / "Qwen__Qwen2.5-7B-Instruct.json"
GIB16 = 16 * 2**30  # 17,179,869,184 bytes


def _kv(*args: str) -> dict:
    result = CliRunner().invoke(cli, ["kv", *args, "-o", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_eagle_draft_layer_adds_its_bytes_and_costs_tokens():
    # Llama-3.1-8B: 2 x 32 layers x 8 KV heads x 128 x 2 B = 131,072 B per token.
    # EAGLE-LLaMA3 draft: 1 layer x 2 x 8 x 128 x 2 B = 4,096 B; together 135,168 B per token.
    # 16 GiB / (16 x 135,168 B = 2,162,688 B per block) = 7,943 blocks (7,943 x 2,162,688 = 17,178,230,784;
    # 1,638,400 B left) = 127,088 tokens; without the draft 16 GiB / 2,097,152 B = 8,192 blocks = 131,072 tokens.
    spec = json.dumps({"method": "eagle", "model": str(EAGLE), "num_speculative_tokens": 3})
    base = ["--kv-memory", "16GiB", "--max-model-len", "8192"]
    doc = _kv(str(LLAMA), *base, "--speculative-config", spec)
    plain = _kv(str(LLAMA), *base)
    assert (plain["bytes_per_token"], plain["kv_blocks"], plain["kv_tokens"]) == (131072, 8192, 131072)
    assert (doc["bytes_per_token"], doc["kv_blocks"], doc["kv_tokens"]) == (135168, 7943, 127088)
    assert doc["speculative"] == {
        "method": "eagle",
        "draft_layers": 1,
        "draft_layers_source": "num_hidden_layers",
        "draft_bytes_per_token": 4096,
        "target_bytes_per_token": 131072,
    }
    # concurrency at 8,192 tokens: 7,943 blocks / 512 blocks per request = 15.513671875
    assert doc["max_concurrency"] == 7943 / 512


def test_deepseek_mtp_layer_is_shaped_like_the_target_s_mla_layers():
    # DeepSeek-V3: 61 MLA layers x (512 + 64) x 2 B = 70,272 B; num_nextn_predict_layers 1 adds 1,152 B:
    # 71,424 B per token; 16 GiB / (16 x 71,424 = 1,142,784 B) = 15,033 blocks = 240,528 tokens.
    for method in ("mtp", "deepseek_mtp"):
        doc = _kv(
            str(DEEPSEEK),
            "--kv-memory",
            "16GiB",
            "--max-model-len",
            "8192",
            "--speculative-config",
            json.dumps({"method": method, "num_speculative_tokens": 1}),
        )
        assert (doc["bytes_per_token"], doc["kv_blocks"], doc["kv_tokens"]) == (71424, 15033, 240528)
        assert doc["speculative"]["method"] == "mtp"
        assert doc["speculative"]["draft_layers_source"] == "num_nextn_predict_layers"


def test_eagle_draft_at_tensor_parallel_2_and_fp8():
    # TP 2: the draft follows the target's TP: 1 x 2 x (8 / 2) x 128 x 2 B = 2,048 B beside 65,536 B.
    # fp8 KV (one byte): target 2 x 32 x 8 x 128 x 1 = 65,536 B, draft 2,048 B.
    spec = json.dumps({"method": "eagle", "model": str(EAGLE)})
    tp2 = _kv(str(LLAMA), "-tp", "2", "--speculative-config", spec)
    assert (tp2["bytes_per_token"], tp2["speculative"]["draft_bytes_per_token"]) == (65536 + 2048, 2048)
    fp8 = _kv(str(LLAMA), "--kv-cache-dtype", "fp8", "--speculative-config", spec)
    assert (fp8["bytes_per_token"], fp8["speculative"]["draft_bytes_per_token"]) == (65536 + 2048, 2048)
    # draft_tensor_parallel_size 1 at target TP 2: the draft keeps all 8 heads: 4,096 B
    one = json.dumps({"method": "eagle", "model": str(EAGLE), "draft_tensor_parallel_size": 1})
    assert _kv(str(LLAMA), "-tp", "2", "--speculative-config", one)["speculative"]["draft_bytes_per_token"] == 4096


def test_methods_without_attention_add_nothing_and_names_resolve_as_vllm_does():
    for doc in ({"model": "ngram", "num_speculative_tokens": 3}, {"method": "suffix"}):
        out = _kv(str(QWEN7B), "--speculative-config", json.dumps(doc))
        assert out["bytes_per_token"] == 57344
        assert out["speculative"]["draft_layers"] == 0
    # without a method, "eagle-" in the model name means eagle (vllm/config/speculative.py __post_init__)
    assert parse_speculative_config({"model": "yuhuili/EAGLE-LLaMA3-Instruct-8B"}).method == "eagle"
    assert parse_speculative_config({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}).method == "eagle3"
    assert parse_speculative_config({"model": "Qwen/Qwen2.5-0.5B"}).method == "draft_model"
    assert parse_speculative_config({"method": "qwen3_next_mtp"}).method == "mtp"


def test_draft_model_counts_all_its_layers():
    # a separate draft model (Qwen2.5-1.5B for Qwen2.5-7B): 28 layers x 2 x 2 KV heads x 128 x 2 B = 28,672 B
    # beside the target's 57,344 B = 86,016 B per token
    spec = kv_spec_from_config(hf_config("Qwen__Qwen2.5-7B-Instruct"))
    draft_cfg = hf_config("Qwen__Qwen2.5-1.5B-Instruct")
    settings = parse_speculative_config({"model": "Qwen/Qwen2.5-1.5B-Instruct", "num_speculative_tokens": 4})
    layers = draft_layers(settings, spec, {}, kv_spec_from_config(draft_cfg), draft_cfg)
    assert (layers.method, layers.num_layers) == ("draft_model", 28)
    assert capacity(spec, max_model_len=8192, draft=layers).bytes_per_token == 57344 + 28672


def test_qwen3_next_mtp_defaults_to_one_full_attention_layer():
    # Qwen3-Next-80B-A3B: 12 full-attention layers x 2 x 2 KV heads x 256 x 2 B = 24,576 B; its config has no
    # num_nextn_predict_layers, and vLLM's qwen3_next_mtp.py defaults to 1 layer: + 2,048 B = 26,624 B
    doc = _kv(
        str(HF_CONFIGS / "Qwen__Qwen3-Next-80B-A3B-Instruct.json"),
        "--max-model-len",
        "8192",
        "--speculative-config",
        '{"method": "mtp"}',
    )
    assert (doc["bytes_per_token"], doc["speculative"]["draft_layers"]) == (26624, 1)


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("[1", "--speculative-config"),
        ('["eagle"]', "--speculative-config"),
        ('{"method": "medusa2"}', "--speculative-config method"),
        ('{"method": "eagle"}', "--speculative-config model"),
        ('{"method": "eagle", "model": "/no/such/draft"}', "--speculative-config model"),
        ('{"method": "mtp", "num_speculative_tokens": 0}', "--speculative-config num_speculative_tokens"),
        ('{"method": "mtp"}', "num_nextn_predict_layers"),  # Llama has no MTP layers
    ],
)
def test_bad_speculative_config_exits_2_naming_the_field(value, field):
    result = CliRunner().invoke(cli, ["kv", str(LLAMA), "--speculative-config", value])
    assert result.exit_code == 2, result.output
    assert f"error: {field}" in result.output
    assert "Traceback" not in result.output
    # no Python repr of a missing value in a user-facing message
    assert "None" not in result.output, result.output


def test_refused_with_pipeline_parallel_and_bad_draft_tp():
    spec = kv_spec_from_config(hf_config("deepseek-ai__DeepSeek-V3"))
    layers = draft_layers(parse_speculative_config({"method": "mtp"}), spec, hf_config("deepseek-ai__DeepSeek-V3"))
    with pytest.raises(KVConfigError, match="--speculative-config"):
        capacity(spec, max_model_len=4096, draft=layers, pipeline_parallel_size=2)
    llama = kv_spec_from_config(hf_config("meta-llama__Llama-3.1-8B-Instruct"))
    eagle = json.loads(EAGLE.read_text())
    drafted = draft_layers(
        parse_speculative_config({"method": "eagle", "model": "x"}), llama, {}, kv_spec_from_config(eagle), eagle
    )
    with pytest.raises(KVConfigError, match="draft_tensor_parallel_size"):
        capacity(llama, max_model_len=4096, tensor_parallel_size=4, draft=drafted, draft_tensor_parallel_size=2)


_VLLM_CODE = r"""
import json, os, sys
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig, VllmConfig
from vllm.v1.core.kv_cache_utils import get_kv_cache_config_from_groups, get_kv_cache_groups
from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec

out = []
for target_dir, spec_args, memory in json.loads(sys.argv[1]):
    target = ModelConfig(model=target_dir, tokenizer=target_dir, skip_tokenizer_init=True, dtype="auto", seed=0,
                         max_model_len=4096)
    parallel = ParallelConfig()
    spec = SpeculativeConfig(**spec_args, target_model_config=target, target_parallel_config=parallel)
    draft = spec.draft_model_config
    layers = {}
    for name, cfg, pc in (("target", target, parallel), ("draft", draft, spec.draft_parallel_config)):
        for i in range(cfg.get_total_num_hidden_layers()):
            kind = MLAAttentionSpec if cfg.is_deepseek_mla else FullAttentionSpec
            extra = {"cache_dtype_str": "auto"} if cfg.is_deepseek_mla else {}
            layers[f"{name}.{i}"] = kind(block_size=16, num_kv_heads=cfg.get_num_kv_heads(pc),
                                         head_size=cfg.get_head_size(), dtype=target.dtype, **extra)
    vllm_config = VllmConfig(model_config=target)
    vllm_config.cache_config.kv_cache_layout = "NHD"  # what the engine core resolves for FlashAttention
    groups = get_kv_cache_groups(vllm_config, layers)
    config = get_kv_cache_config_from_groups(vllm_config, groups, memory)
    out.append({"method": spec.method, "draft_layers": draft.get_total_num_hidden_layers(),
                "draft_dtype": str(draft.dtype), "groups": len(groups), "num_blocks": config.num_blocks})
print(json.dumps(out))
"""


@pytest.mark.vllm_ref
def test_pool_blocks_equal_vllm_s_own_speculative_config_and_kv_cache_utils(tmp_path: Path):
    python = require_vllm_python()

    def folder(name: str, source: Path, drop: tuple[str, ...] = ()) -> str:
        cfg = json.loads(source.read_text())
        for key in drop:  # DeepSeek-V3's fp8 quantization_config names a GPU kernel CPU vLLM refuses
            cfg.pop(key, None)
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(cfg))
        return str(tmp_path / name)

    llama, qwen = folder("llama", LLAMA), folder("qwen", QWEN7B)
    deepseek = folder("deepseek", DEEPSEEK, ("quantization_config",))
    eagle = tmp_path / "EAGLE-LLaMA3-Instruct-8B"
    eagle.mkdir()
    shutil.copy(EAGLE, eagle / "config.json")
    cases = [
        (llama, {"method": "eagle", "model": str(eagle), "num_speculative_tokens": 3}, GIB16),
        (deepseek, {"method": "deepseek_mtp", "num_speculative_tokens": 1}, GIB16),
        # a draft shaped unlike its target (8 KV heads beside Qwen's 4): one pool, block = sum of pages
        (qwen, {"method": "eagle", "model": str(eagle), "num_speculative_tokens": 3}, GIB16),
    ]
    run = subprocess.run(
        [python, "-c", _VLLM_CODE, json.dumps(cases)], capture_output=True, text=True, timeout=600, check=True
    )
    vllm = json.loads(run.stdout.strip().splitlines()[-1])
    ours = []
    for (target_dir, spec_args, memory), ref in zip(cases, vllm, strict=True):
        target_cfg = json.loads((Path(target_dir) / "config.json").read_text())
        settings = parse_speculative_config(spec_args)
        draft_cfg = json.loads(EAGLE.read_text()) if settings.needs_draft_config else None
        draft = kv_spec_from_config(draft_cfg) if draft_cfg else None
        target = kv_spec_from_config(target_cfg)
        layers = draft_layers(settings, target, target_cfg, draft, draft_cfg)
        cap = capacity(target, max_model_len=4096, kv_memory_bytes=memory, draft=layers)
        ours.append({"method": layers.method, "draft_layers": layers.num_layers, "num_blocks": cap.kv_blocks})
        assert ref["groups"] == 1
        assert ref["draft_dtype"] == "torch.bfloat16"
    assert ours == [{k: r[k] for k in ("method", "draft_layers", "num_blocks")} for r in vllm]
    # and the hand-worked figures: 7,943 (Llama + EAGLE), 15,033 (DeepSeek + MTP); Qwen2.5-7B + EAGLE:
    # 57,344 + 4,096 = 61,440 B per token, 16 GiB / (16 x 61,440) = 17,476 blocks
    assert [c["num_blocks"] for c in ours] == [7943, 15033, 17476]


def test_a_draft_model_with_pipeline_parallel_is_refused_before_the_draft_is_read(monkeypatch):
    # The draft is a Hub id that does not exist: were it fetched first, the user would read the Hub's (or the
    # offline mode's) error instead of the reason the combination is refused.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = json.dumps({"method": "eagle", "model": "no-such-org/no-such-draft"})
    result = CliRunner().invoke(
        cli, ["kv", str(LLAMA), "--kv-memory", "16GiB", "-pp", "2", "--speculative-config", spec]
    )
    assert result.exit_code == 2, result.output
    assert "--speculative-config: not modelled with --pipeline-parallel-size above 1" in result.output
    assert "no-such-draft" not in result.output
