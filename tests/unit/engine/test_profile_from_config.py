"""The served model's own engine profile from its config.json: parameters counted from its shapes (checked against
the model cards), its KV layout as ``kvpilot kv`` reads it, for every architecture that command supports.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvpilot.engine.config import EngineConfig
from kvpilot.engine.hardware import MODEL_PROFILES, config_params, profile_from_config
from kvpilot.kv import bytes_per_token
from tests.realserver.make_model import SHAPE

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "hf-configs"


def _config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def test_a_dense_models_parameters_from_its_shapes():
    # Qwen2.5-7B: attention 3,584 x 128 x (2 x 28 + 2 x 4) = 29,360,128, MLP 3 x 3,584 x 18,944 = 203,685,888 per
    # layer, x 28 = 6,525,288,448; embeddings untied 2 x 152,064 x 3,584 = 1,089,994,752: 7,615,283,200 (card 7.61B)
    total, active = config_params(_config("Qwen__Qwen2.5-7B-Instruct"))
    assert total == active == 7_615_283_200
    assert abs(total - MODEL_PROFILES["qwen2.5-7b"].params) / MODEL_PROFILES["qwen2.5-7b"].params < 0.001


def test_a_mixture_of_experts_computes_with_its_active_experts():
    # Qwen3-30B-A3B: 128 experts of 3 x 2,048 x 768 = 4,718,592, 8 per token; attention 2,048 x 128 x (64 + 8)
    # = 18,874,368 per layer, 48 layers; embeddings 2 x 151,936 x 2,048 = 622,329,856.
    # all: 48 x (18,874,368 + 128 x 4,718,592) + 622,329,856 = 30,519,328,768 (card 30.5B);
    # active: 48 x (18,874,368 + 8 x 4,718,592) + 622,329,856 = 3,340,238,848 (card 3.3B)
    assert config_params(_config("Qwen__Qwen3-30B-A3B")) == (30_519_328_768, 3_340_238_848)


def test_the_tiny_cpu_model():
    # 4 layers, hidden 256, 4 heads and 2 KV heads of 64, MLP 512, vocab 2,048 tied: 2,048 x 256 = 524,288 +
    # 4 x (256 x 64 x 12 + 3 x 256 x 512) = 2,359,296: 2,883,584 parameters, 5,767,168 bytes in bf16
    tiny = {"model_type": "qwen2", **SHAPE, "torch_dtype": "bfloat16"}  # the real-server tier's model
    profile = profile_from_config(tiny, "tiny")
    assert (profile.params, profile.weight_bytes, profile.max_model_len) == (2_883_584, 5_767_168, 4096)
    # 2 x 4 layers x 2 KV heads x 64 x 2 bytes = 2,048 bytes per token, as vLLM's CPU server logs (64 MiB / 32,768)
    assert EngineConfig(profile=profile, kv_cache_tokens=32_768).resolved_bytes_per_token() == 2048


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.stem)
def test_every_config_kv_reads_gives_a_profile_with_its_kv_bytes(path):
    config = json.loads(path.read_text())
    profile = profile_from_config(config, path.stem)
    assert profile.params > 0
    assert profile.weight_bytes > 0
    engine = EngineConfig(profile=profile, kv_cache_tokens=65_536, max_model_len=4096)
    assert engine.resolved_bytes_per_token() == bytes_per_token(config)
