"""vLLM's own answers for the KV numbers: run by the vLLM 0.29.0 reference python; the tests call :func:`ask`.

``python vllm_oracle.py CASES.json`` prints one JSON list, one answer per case, each computed by vLLM's code:

- ``{"kind": "pool", "config_dir", "max_model_len", "memory", "block_size"}``: ``get_kv_cache_configs`` on the
  model's full-attention layers (``ModelConfig`` gives their KV heads and head size) -> ``num_blocks`` and
  ``get_kv_cache_capacity``, or the refusal with vLLM's "estimated maximum model length";
- ``{"kind": "context", "config_dir", "max_model_len"}``: ``_get_and_verify_max_len`` after
  ``derive_max_model_len_and_key`` (vLLM's ``max_model_len`` from the config), or the refusal;
- ``{"kind": "batch", "config_dir", "memory", "name", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
  "enable_chunked_prefill", "performance_mode"}``: ``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args``
  for ``vllm serve`` on a GPU of that memory and name (the platform's two queries answered with them);
- ``{"kind": "request_memory", "total", "utilization"}``: ``request_memory`` (vllm/v1/worker/utils.py);
- ``{"kind": "constants"}``: the defaults kvpilot.vllm.defaults restates, read off vLLM's classes and source.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path


def pool(case: dict) -> dict:
    import torch
    from vllm.config import ModelConfig, ParallelConfig, VllmConfig
    from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity, get_kv_cache_configs
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    d = case["config_dir"]
    model = ModelConfig(
        model=d, tokenizer=d, skip_tokenizer_init=True, dtype="auto", seed=0, max_model_len=case["max_model_len"]
    )
    vllm_config = VllmConfig(model_config=model)
    vllm_config.cache_config.kv_cache_layout = "NHD"  # what the engine core resolves for FlashAttention
    spec = FullAttentionSpec(
        block_size=case["block_size"],
        num_kv_heads=model.get_num_kv_heads(ParallelConfig()),
        head_size=model.get_head_size(),
        dtype=torch.bfloat16,
    )
    layers = {f"layer.{i}": spec for i in range(model.get_total_num_hidden_layers())}
    try:
        (config,) = get_kv_cache_configs(vllm_config, [layers], [case["memory"]])
    except ValueError as exc:
        found = re.search(r"estimated maximum model length is (\d+)", str(exc))
        return {"fits": False, "estimated_max_model_len": int(found.group(1)) if found else 0}
    tokens, concurrency = get_kv_cache_capacity(vllm_config, config)
    return {"fits": True, "num_blocks": config.num_blocks, "tokens": tokens, "concurrency": concurrency}


def context(case: dict) -> dict:
    from vllm.config.model import _get_and_verify_max_len
    from vllm.transformers_utils.config import get_config, get_hf_text_config
    from vllm.transformers_utils.model_arch_config_convertor import (
        MODEL_ARCH_CONFIG_CONVERTORS,
        ModelArchConfigConvertorBase,
    )

    hf = get_config(case["config_dir"], False)
    text = get_hf_text_config(hf)
    convertor = MODEL_ARCH_CONFIG_CONVERTORS.get(hf.model_type, ModelArchConfigConvertorBase)(hf, text)
    arch = types.SimpleNamespace(derived_max_model_len_and_key=convertor.derive_max_model_len_and_key())
    try:
        return {"max_model_len": _get_and_verify_max_len(text, arch, None, case.get("max_model_len"), False, None)}
    except ValueError as exc:
        return {"refused": str(exc)[:200]}


def batch(case: dict) -> dict:
    from vllm.engine import arg_utils
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    platform = arg_utils.current_platform
    platform.get_device_total_memory = lambda *_a, **_k: case["memory"]
    platform.get_device_name = lambda *_a, **_k: case["name"]
    platform.is_cpu = lambda: False  # a GPU, whatever this machine is
    platform.is_tpu = lambda: False
    args = EngineArgs(
        model=case["config_dir"],  # a local folder: EngineArgs resolves its model at construction
        max_num_seqs=case["max_num_seqs"],
        max_num_batched_tokens=case["max_num_batched_tokens"],
        enable_chunked_prefill=case["enable_chunked_prefill"],
        performance_mode=case["performance_mode"],
    )
    model = types.SimpleNamespace(max_model_len=case["max_model_len"], is_multimodal_model=False, is_mm_prefix_lm=False)
    parallel = types.SimpleNamespace(use_batched_dp_moe=False)
    args._set_default_max_num_seqs_and_batched_tokens_args(UsageContext.OPENAI_API_SERVER, model, parallel)
    return {"max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": args.max_num_batched_tokens}


def request_memory(case: dict) -> dict:
    from vllm.config import CacheConfig
    from vllm.v1.worker.utils import request_memory as vllm_request_memory

    snapshot = types.SimpleNamespace(total_memory=case["total"], free_memory=case["total"], device_="cuda:0")
    return {"requested": vllm_request_memory(snapshot, CacheConfig(gpu_memory_utilization=case["utilization"]))}


def constants(_case: dict) -> dict:
    from vllm.config import CacheConfig
    from vllm.config.model import _get_and_verify_max_len
    from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase
    from vllm.v1.core.block_pool import BlockPool

    keys_source = inspect.getsource(ModelArchConfigConvertorBase.derive_max_model_len_and_key)
    keys = re.findall(r'^\s*"(\w+)",', keys_source.split("possible_keys = [")[1].split("]")[0], re.M)
    verify_source = inspect.getsource(_get_and_verify_max_len)
    without_factor = re.search(r"rope_type not in \(([^)]*)\)", verify_source).group(1)
    cache = CacheConfig()
    return {
        "default_block_size": CacheConfig.DEFAULT_BLOCK_SIZE,
        "block_size": cache.block_size,
        "gpu_memory_utilization": cache.gpu_memory_utilization,
        "free_blocks_of_10": BlockPool(10, enable_caching=True, hash_block_size=16).get_num_free_blocks(),
        "max_model_len_keys": keys,
        "rope_types_without_factor": re.findall(r'"(\w+)"', without_factor),
        "prescaled_model_type": "gemma3" if '"gemma3" not in hf_config.model_type' in verify_source else None,
    }


def ask(workdir: Path, cases: list[dict]) -> list[dict]:
    """The answers of vLLM 0.29.0 to ``cases`` (this file run by the reference python; the test is skipped without
    it, or fails under CI); ``workdir`` holds the cases file.
    """
    from tests.conftest import require_vllm_python

    path = workdir / "cases.json"
    path.write_text(json.dumps(cases))
    run = subprocess.run(
        [require_vllm_python(), __file__, str(path)], capture_output=True, text=True, timeout=900, check=True
    )
    answers: list[dict] = json.loads(run.stdout.strip().splitlines()[-1])
    return answers


KINDS = {"pool": pool, "context": context, "batch": batch, "request_memory": request_memory, "constants": constants}

if __name__ == "__main__":  # in the reference python only: the test process's environment is left alone
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with open(sys.argv[1], encoding="utf-8") as fh:
        cases = json.load(fh)
    print(json.dumps([KINDS[case["kind"]](case) for case in cases]))
