"""Run inside the vLLM 0.29.0 reference venv: parse argument vectors with vLLM's own parser.

Reads a JSON list of argument vectors on stdin and prints one JSON object per vector:
``{"ok": true, "values": {dest: value}}`` or ``{"ok": false, "error": "..."}``. The parser is
``FlexibleArgumentParser`` (``vllm/utils/argparse_utils.py``, with its dotted-key and underscore
pre-processing in ``parse_args``) with ``AsyncEngineArgs.add_cli_args`` (``vllm/engine/arg_utils.py``):
every engine flag. The frontend flags (``--port``, ``--host``, ``--api-key``) live in
``vllm/entrypoints/launchers/cli_args.py``, which imports FastAPI (not in the ``--no-deps`` venv).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

RESULT = sys.stdout
sys.stdout = sys.stderr  # vLLM logs (and warns) on stdout: keep it for the JSON answer only
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402

#: the argparse destinations of the flags kvpilot manages
DESTS = (
    "model",
    "served_model_name",
    "gpu_memory_utilization",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "tensor_parallel_size",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "kv_cache_dtype",
    "kv_offloading_backend",
    "kv_offloading_size",
    "kv_transfer_config",
    "hf_token",
)


def _shown(value: object) -> str:
    """``repr`` of a parsed value; a config object by its fields (``engine_id`` is a fresh uuid per parse)."""
    if hasattr(value, "__dataclass_fields__"):
        return repr(sorted((k, repr(v)) for k, v in vars(value).items() if k != "engine_id"))
    return repr(value)


def main() -> None:
    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser(exit_on_error=False))
    out = []
    for argv in json.load(sys.stdin):
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                ns = parser.parse_args(argv)
        except (SystemExit, Exception) as exc:  # noqa: BLE001 - vLLM refusing the vector is an answer
            out.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        out.append({"ok": True, "values": {d: _shown(getattr(ns, d, None)) for d in DESTS}})
    json.dump(out, RESULT)


if __name__ == "__main__":
    main()
