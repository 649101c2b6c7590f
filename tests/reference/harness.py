"""kvpilot's side of the vLLM reference: workloads as the driver's JSON, and the driver run as a subprocess.

``tests/reference/vllm_driver.py`` runs in the vLLM reference venv (vLLM's own scheduler, output
processor and stat logger); this module runs in kvpilot's venv and never imports vLLM. Both sides
get the same requests, flags and step-time coefficients (those of the engine's
:class:`~kvpilot.engine.hardware.CostModel`), so their simulated clocks agree whenever their
schedules do.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kvpilot.engine.core import Engine
from kvpilot.engine.request import Request

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "vllm_driver.py"
HF_CONFIGS = HERE.parent / "fixtures" / "hf-configs"

#: engine model profile -> the model's config.json (tests/fixtures/hf-configs, with provenance there)
MODEL_CONFIGS = {
    "qwen2.5-1.5b": "Qwen__Qwen2.5-1.5B-Instruct.json",
    "qwen2.5-7b": "Qwen__Qwen2.5-7B-Instruct.json",
    "llama-3.1-8b": "meta-llama__Llama-3.1-8B-Instruct.json",
}


def cost_coefficients(engine: Engine) -> dict[str, float]:
    """The five numbers of ``CostModel.step_time`` (seconds per step / per token / per pair)."""
    c = engine.cost
    return {
        "weight_time": c.weight_time,
        "kv_time_per_token": c.kv_time_per_token,
        "flop_per_token": c.flop_per_token,
        "attn_flop": c.attn_flop,
        "overhead": c.overhead,
    }


def request_spec(req: Request) -> dict[str, Any]:
    """One request for the driver: its prompt segments (the generated-token segment left out)."""
    return {
        "request_id": req.request_id,
        "arrival_time": req.arrival_time,
        "segments": [[key, n] for key, n in req.segments[:-1]],
        "output_len": req.output_len,
        "finish_reason": req.finish_reason,
    }


def driver_spec(
    name: str,
    engine: Engine,
    requests: Iterable[Request],
    *,
    served_model_name: str = "kvpilot/reference",
    snapshot_interval: float | None = None,
    until: float | None = None,
    record_steps: bool | str = True,
    features: Mapping[str, Any] | None = None,
    request_fields: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The driver's workload document for ``requests`` on an engine built with the same flags.

    Args:
        name: the result's name.
        engine: its flags (``engine.config``), KV blocks and step-time coefficients are the driver's.
        requests: the requests (prompt segments, output length, arrival, finish reason).
        served_model_name: the ``model_name`` label vLLM exports.
        snapshot_interval: read the registry every so many simulated seconds (``None``: at the end only).
        until: stop at this simulated time (``None``: when every request finished).
        record_steps: ``True`` full step records, ``"light"`` the ground-truth fields only, ``False`` none.
        features: vLLM features kvpilot's engine does not model, added to the driver's ``config``:
            ``policy`` (``"fcfs"``/``"priority"``), ``lora`` (``{"max_loras", "max_lora_rank"}``),
            ``speculative`` (``{"num_speculative_tokens", "acceptance_rate", "seed"}``), ``remote_kv``
            (``{"seconds_per_token", "latency"}``); the step time stays the engine's roofline of the tokens scheduled.
        request_fields: request id -> fields added to that request: ``priority`` (int, lower first),
            ``lora`` (adapter name), ``remote_prefill`` (bool: its prompt's KV comes through ``remote_kv``).
    """
    cfg = engine.config
    hf = json.loads((HF_CONFIGS / MODEL_CONFIGS[cfg.model]).read_text())
    fields = request_fields or {}
    return {
        "name": name,
        "config": {
            "block_size": cfg.block_size,
            "num_gpu_blocks": engine.num_gpu_blocks,
            "max_num_seqs": cfg.max_num_seqs,
            "max_num_batched_tokens": cfg.max_num_batched_tokens,
            "max_model_len": cfg.max_model_len,
            "enable_prefix_caching": cfg.enable_prefix_caching,
            "enable_chunked_prefill": cfg.enable_chunked_prefill,
            "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "served_model_name": served_model_name,
            "hf_config": hf,
            **(features or {}),
        },
        "cost": cost_coefficients(engine),
        "requests": [{**request_spec(r), **fields.get(r.request_id, {})} for r in requests],
        "snapshot_interval": snapshot_interval,
        "until": until,
        "record_steps": record_steps,
    }


def run_vllm(python: str, specs: Sequence[dict[str, Any]], timeout: float = 900.0) -> dict[str, Any]:
    """Run the driver once for all ``specs`` (vLLM's import costs ~5-15 s, so batch many workloads).

    Raises:
        RuntimeError: the driver failed; the message holds the tail of its stderr.
    """
    proc = subprocess.run(
        [python, str(DRIVER)],
        input=json.dumps({"workloads": list(specs)}),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"vLLM driver exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)
