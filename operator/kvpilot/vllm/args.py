"""vLLM's own command line (``vllm serve MODEL --max-num-seqs 4 ...``) -> EngineConfig overrides.

Flag names and meanings from vLLM's ``EngineArgs.add_cli_args`` (vllm/engine/arg_utils.py,
v0.30-v0.33): dashes or underscores, ``--flag=value`` or ``--flag value``, boolean flags with a
``--no-`` form (``argparse.BooleanOptionalAction``), integer sizes with vLLM's ``k``/``K``/``m``
suffixes (``--max-model-len 8k`` = 8,000; ``8K`` = 8,192, ``human_readable_int``). Flags the
engine model does not use are ignored and listed in ``notes``.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from typing import TypedDict, cast

from kvpilot.text.errors import InvalidValueError
from kvpilot.text.numbers import GIB
from kvpilot.vllm.defaults import VLLM_BLOCK_SIZES

#: Hugging Face model ids whose shape the engine knows -> its model profile name.
MODEL_IDS = {
    "qwen/qwen2.5-1.5b-instruct": "qwen2.5-1.5b",
    "qwen/qwen2.5-1.5b": "qwen2.5-1.5b",
    "qwen/qwen2.5-7b-instruct": "qwen2.5-7b",
    "qwen/qwen2.5-7b": "qwen2.5-7b",
    "meta-llama/llama-3.1-8b-instruct": "llama-3.1-8b",
    "meta-llama/meta-llama-3.1-8b-instruct": "llama-3.1-8b",
    "meta-llama/llama-3.1-8b": "llama-3.1-8b",
}


def human_readable_int(text: str) -> int:
    """VLLM's integer parser: ``1k`` = 1,000, ``1K`` = 1,024, ``m``/``M``, ``g``/``G`` likewise.

    Raises:
        ValueError: not an integer.
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)\s*", str(text))
    if not m:
        raise ValueError(f"{text!r} is not an integer")
    number, suffix = float(m.group(1)), m.group(2)
    powers = {"k": 1, "m": 2, "g": 3, "t": 4}
    if suffix:
        base = 1024 if suffix.isupper() else 1000
        number *= base ** powers[suffix.lower()]
    if not number.is_integer():
        raise ValueError(f"{text!r} is not an integer")
    return int(number)


class VLLMFlags(TypedDict, total=False):
    """What a vLLM server's command line (:func:`parse_vllm_args`) or startup log
    (:func:`kvpilot.vllm.startup_log.startup_limits`) states of its engine, by the name and type of the
    :class:`~kvpilot.engine.config.EngineConfig` field it sets (``--num-gpu-blocks-override`` is
    ``num_gpu_blocks``, ``--kv-offloading-size`` ``kv_offload_cpu_bytes``; ``kv_cache_tokens`` is the KV
    capacity the log reports). A key is present when stated.
    """

    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    max_model_len: int
    gpu_memory_utilization: float
    block_size: int
    num_gpu_blocks: int | None
    kv_cache_tokens: int | None
    kv_cache_dtype: str
    tensor_parallel_size: int
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    kv_offload_cpu_bytes: int
    model: str
    served_model_name: str | None


@dataclass
class VLLMArgs:
    """Result of :func:`parse_vllm_args`: engine overrides, the model argument, notes."""

    overrides: VLLMFlags = field(default_factory=VLLMFlags)
    model: str | None = None
    notes: list[str] = field(default_factory=list)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm", add_help=False, allow_abbrev=False, exit_on_error=False)
    p.add_argument("positional", nargs="*")
    p.add_argument("--model")
    p.add_argument("--max-num-seqs", "--max_num_seqs", type=human_readable_int)
    p.add_argument("--max-num-batched-tokens", "--max_num_batched_tokens", type=human_readable_int)
    p.add_argument("--max-model-len", "--max_model_len", type=human_readable_int)
    p.add_argument("--gpu-memory-utilization", "--gpu_memory_utilization", type=float)
    p.add_argument("--block-size", "--block_size", type=int, choices=VLLM_BLOCK_SIZES)  # vLLM's BlockSize
    p.add_argument("--num-gpu-blocks-override", "--num_gpu_blocks_override", type=int)
    p.add_argument("--kv-cache-dtype", "--kv_cache_dtype")
    p.add_argument("--tensor-parallel-size", "--tensor_parallel_size", "-tp", type=int)
    p.add_argument(
        "--enable-prefix-caching", "--enable_prefix_caching", action=argparse.BooleanOptionalAction, default=None
    )
    p.add_argument(
        "--enable-chunked-prefill", "--enable_chunked_prefill", action=argparse.BooleanOptionalAction, default=None
    )
    p.add_argument("--served-model-name", "--served_model_name", nargs="+")
    p.add_argument("--kv-offloading-size", "--kv_offloading_size", type=float)
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    return p


_MAP = {
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "max_model_len": "max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "block_size": "block_size",
    "num_gpu_blocks_override": "num_gpu_blocks",
    "kv_cache_dtype": "kv_cache_dtype",
    "tensor_parallel_size": "tensor_parallel_size",
    "enable_prefix_caching": "enable_prefix_caching",
    "enable_chunked_prefill": "enable_chunked_prefill",
}


#: vLLM flags that never change what the engine model simulates (scheduling, KV, speed): accepted by
#: ``strict`` parsing. Serving, logging, tokenizer and tool-calling options of ``vllm serve``
#: (``vllm/entrypoints/openai/cli_args.py``, ``vllm/engine/arg_utils.py``, vLLM 0.29).
NEUTRAL_FLAGS = frozenset(
    {
        "--trust-remote-code",
        "--api-key",
        "--disable-log-requests",
        "--enable-log-requests",
        "--disable-log-stats",
        "--uvicorn-log-level",
        "--chat-template",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "--reasoning-parser",
        "--tokenizer",
        "--revision",
        "--download-dir",
    }
)


def _unknown_flags(unknown: list[str]) -> list[str]:
    """The flags of ``unknown`` (parse_known_args leftovers) not in :data:`NEUTRAL_FLAGS`, without values."""
    out = []
    skip_value = False
    for word in unknown:
        if word.startswith("-"):
            name = word.split("=", 1)[0].replace("_", "-")
            skip_value = name in NEUTRAL_FLAGS and "=" not in word
            if name not in NEUTRAL_FLAGS:
                out.append(name)
        elif skip_value:
            skip_value = False
    return out


def parse_vllm_args(argv: list[str], strict: bool = False) -> VLLMArgs:  # noqa: C901
    """Parse ``[vllm] serve MODEL [flags]`` (or flags alone).

    ``MODEL`` selects a model profile when it is one of :data:`MODEL_IDS` (else a note, and the
    engine's default profile is used); it is also the served model name unless
    ``--served-model-name`` is given. ``--kv-offloading-size`` (GiB, vLLM's native CPU offload)
    becomes ``kv_offload_cpu_bytes``. ``--host``/``--port`` are returned in ``overrides`` as
    ``host``/``port`` only in :attr:`VLLMArgs.notes`-free form for the shim: they are NOT engine
    fields, so they are reported under ``notes`` and left out of ``overrides``.

    ``strict`` (``kvpilot simulate --vllm-args``): a model with no profile and flags the engine does
    not model (other than :data:`NEUTRAL_FLAGS`) are refused, naming them, instead of simulating a
    default.

    Raises:
        InvalidValueError: naming the flag for a value of the wrong type; with ``strict``, naming ``model`` or the
            flags the engine model does not simulate.
    """
    args = list(argv)
    if args and args[0] == "vllm":
        args = args[1:]
    try:
        ns, unknown = _parser().parse_known_args(args)
    except argparse.ArgumentError as exc:
        flag = (exc.argument_name or "argument").split("/")[0]
        raise InvalidValueError(flag, exc.message) from None
    out = VLLMArgs()
    pos = list(ns.positional)
    if pos and pos[0] == "serve":
        pos = pos[1:]
    model = ns.model or (pos[0] if pos else None)
    if len(pos) > 1:
        out.notes.append(f"ignored extra positional arguments: {' '.join(pos[1:])}")
    out.model = model
    stated = {target: getattr(ns, name) for name, target in _MAP.items()}
    # argparse gave each value the type of the EngineConfig field it sets (_parser, _MAP)
    out.overrides = cast(VLLMFlags, {key: value for key, value in stated.items() if value is not None})
    if ns.kv_offloading_size is not None:
        out.overrides["kv_offload_cpu_bytes"] = int(ns.kv_offloading_size * GIB)
    if model:
        profile = MODEL_IDS.get(model.lower())
        if profile:
            out.overrides["model"] = profile
        elif strict:
            raise InvalidValueError(
                "model", f"{model!r} is not a model the engine models (known: {', '.join(sorted(set(MODEL_IDS)))})"
            )
        else:
            out.notes.append(
                f"model {model!r} has no profile; using the default model profile "
                f"(known: {', '.join(sorted(set(MODEL_IDS)))})"
            )
    served = ns.served_model_name[0] if ns.served_model_name else model
    if served:
        out.overrides["served_model_name"] = served
    if ns.host is not None or ns.port is not None:
        out.notes.append(f"--host/--port are for the server, not the engine model (host={ns.host}, port={ns.port})")
    if unknown:
        if strict and _unknown_flags(unknown):
            raise InvalidValueError(
                " ".join(_unknown_flags(unknown)),
                "flags the engine model does not simulate (it would run vLLM's default instead)",
            )
        out.notes.append(f"ignored flags the engine model does not use: {' '.join(unknown)}")
    return out


def from_vllm_args(argv: list[str], strict: bool = False) -> VLLMFlags:
    """EngineConfig overrides from vLLM's command line (see :func:`parse_vllm_args`)."""
    return parse_vllm_args(argv, strict=strict).overrides
