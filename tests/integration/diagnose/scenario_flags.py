"""The diagnose options an operator of each engine scenario would know: the flags the server runs with.

Read from the engine model's own resolved configuration (kvpilot.engine.scenarios.build), the way
`kvpilot diagnose --server` reads them from a VLLMServer spec. Used by the scenario tests and by
benchmarks/compare_vllm_doctor.py.
"""

from __future__ import annotations

from kvpilot.engine.scenarios import SCENARIOS, build
from kvpilot.gpus import gpu_profile

#: the verdict each engine scenario must get (its signature, kvpilot/engine/scenarios.py docstring)
EXPECTED = {
    "kv-exhaustion": "kv_cache_exhaustion",
    "max-num-seqs-cap": "max_num_seqs_cap",
    "token-budget-cap": "token_budget_cap",
    "compute-bound": "compute_bound",
    "prefix-thrash": "prefix_cache_ineffective",
    "healthy": "healthy",
    "idle": "idle",
    "seed-lru": "prefix_cache_ineffective",
}


def scenario_cli_args(name: str) -> list[str]:
    """``--max-num-seqs N --max-num-batched-tokens B --max-model-len L --gpu-memory BYTES --gpu-name G``."""
    engine, _ = build(SCENARIOS[name])
    cfg = engine.config
    args = [
        "--max-num-seqs",
        str(cfg.max_num_seqs),
        "--max-num-batched-tokens",
        str(cfg.max_num_batched_tokens),
        "--max-model-len",
        str(cfg.max_model_len),
    ]
    gpu = SCENARIOS[name].flags.get("gpu")
    if gpu:
        args += ["--gpu-memory", str(gpu_profile(gpu).memory_bytes), "--gpu-name", gpu]
    return args
