"""What-if changes: ``KEY=VALUE`` parsed, applied to the replayed server, and the candidates per binding limit.

Keys (``kvpilot diagnose --what-if``; several in one, comma-separated, change together):

- ``max_num_seqs``, ``max_num_batched_tokens``: the flags (vLLM requires the budget >= ``max_num_seqs``: a
  larger ``max_num_seqs`` raises a smaller budget to it, as vLLM's own default does, and says so);
- ``kv_cache_tokens``: the KV capacity in tokens;
- ``gpu_memory_utilization``: the KV pool grows by the memory the change frees, ``(u' - u) x GPU memory``
  bytes (weights and activations stay), cut into whole blocks (``kvpilot.kv.capacity.tokens_at_utilization``;
  ``docs/diagnosis.md``, "Recommendations"); needs the current ``u`` (read, not vLLM's default) and the GPU's memory;
- ``kv_cache_memory_bytes``: a pool set in bytes (``--kv-cache-memory-bytes``, as a CPU server's is): its tokens
  scale with the bytes (``tokens x new / now``, whole blocks); needs the current bytes (``vllm:cache_config_info``);
- ``kv_cache_dtype``: tokens x (element bytes now / then), whole blocks (``kvpilot.kv.kv_element_bytes``:
  bf16 -> fp8 2x), and the KV reads of each step shrink with them;
- ``enable_prefix_caching``: ``true`` / ``false``;
- ``replicas``: data-parallel copies of the server, the arrivals split evenly.

Pure functions, no I/O.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvpilot.advice.keys import WHAT_IF_KEYS
from kvpilot.diagnose.limits import Limits
from kvpilot.diagnose.model import BindingLimit, ChangeValue
from kvpilot.diagnose.recommend import MAX_SUGGESTED_UTILIZATION, capture_sizes_around
from kvpilot.engine.bounds import FIELD_BOUNDS
from kvpilot.engine.config import EngineConfig
from kvpilot.gpus import gpu_profile
from kvpilot.kv import KVConfigError, kv_element_bytes
from kvpilot.kv.capacity import pool_tokens, tokens_at_utilization
from kvpilot.text.numbers import count, plain

#: the command-line flag each key is (the report's "change:" lines); replicas and KV tokens are no vLLM flag
FLAGS: dict[str, str] = {
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "kv_cache_tokens": "KV cache tokens",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "kv_cache_memory_bytes": "--kv-cache-memory-bytes",
    "kv_cache_dtype": "--kv-cache-dtype",
    "enable_prefix_caching": "--enable-prefix-caching",
    "replicas": "replicas (scale out)",
}
#: the largest replica count a what-if simulates (and the search for one that keeps up tries)
MAX_REPLICAS = 64
#: the highest --gpu-memory-utilization a candidate suggests (kvpilot.diagnose.recommend's bound)
MAX_UTILIZATION = 0.95


class ChangeError(ValueError):
    """A what-if that cannot be applied: one line naming the key."""


@dataclass(frozen=True)
class Change:
    """One what-if: ``(key, value)`` pairs applied together, in the order given."""

    items: tuple[tuple[str, ChangeValue], ...]

    @classmethod
    def of(cls, **values: ChangeValue) -> Change:
        """``Change.of(max_num_seqs=16)``."""
        return cls(tuple(values.items()))

    def as_dict(self) -> dict[str, ChangeValue]:
        """``{KEY: VALUE}`` (the ``change`` object of ``-o json``)."""
        return dict(self.items)

    def text(self) -> str:
        """``max_num_seqs=16, kv_cache_dtype=fp8``."""
        return ", ".join(f"{k}={_value_text(v)}" for k, v in self.items)

    @property
    def replicas(self) -> int:
        """The replica count the change asks for (1: not a scale-out)."""
        return int(self.as_dict().get("replicas", 1))

    @property
    def mixed(self) -> bool:
        """Flags and replicas changed together (``kv_cache_dtype=fp8, replicas=2``): neither a flag change nor a
        scale-out alone, so the advice's searches for those leave it out (its what-if answers its own question).
        """
        return self.replicas > 1 and len(self.items) > 1


def _value_text(value: ChangeValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return plain(value)
    return str(value)


def parse_change(text: str) -> Change:
    """``KEY=VALUE[,KEY=VALUE...]`` as typed after ``--what-if``.

    Raises:
        ChangeError: an unknown key, a value of the wrong type or out of range, a key given twice.
    """
    items: list[tuple[str, ChangeValue]] = []
    for part in text.split(","):
        key, sep, raw = part.partition("=")
        key = key.strip().replace("-", "_")
        raw = raw.strip()
        if not sep or not key or not raw:
            raise ChangeError(f"--what-if {text!r}: expected KEY=VALUE (keys: {', '.join(WHAT_IF_KEYS)})")
        if key not in WHAT_IF_KEYS:
            raise ChangeError(f"--what-if {key}: unknown key (keys: {', '.join(WHAT_IF_KEYS)})")
        if any(k == key for k, _ in items):
            raise ChangeError(f"--what-if {key}: given twice in one change")
        items.append((key, _parse_value(key, raw)))
    return Change(tuple(items))


def _parse_count(key: str, raw: str) -> int:
    """A count key's value: a whole number from 1 to the engine field's bound (replicas: :data:`MAX_REPLICAS`)."""
    shown = raw if len(raw) <= 40 else raw[:37] + "..."
    try:
        value = int(raw) if len(raw) <= 40 else None  # no count has 40 digits: never parse 4,300
    except ValueError:
        value = None
    if value is None:
        raise ChangeError(f"--what-if {key}={shown}: not a whole number of at most 40 digits")
    bounds = {"replicas": MAX_REPLICAS, "kv_cache_memory_bytes": int(FIELD_BOUNDS["weight_bytes"].high)}
    high = bounds.get(key) or int(FIELD_BOUNDS[key].high)  # the engine's own bound (bytes: its memory bound)
    if not 1 <= value <= high:
        raise ChangeError(f"--what-if {key}={shown}: must be from 1 to {high:,}")
    return value


def _parse_value(key: str, raw: str) -> ChangeValue:
    if key in ("max_num_seqs", "max_num_batched_tokens", "kv_cache_tokens", "kv_cache_memory_bytes", "replicas"):
        return _parse_count(key, raw)
    if key == "gpu_memory_utilization":
        try:
            util = float(raw)
        except ValueError:
            raise ChangeError(f"--what-if {key}={raw}: not a number") from None
        if not 0 < util <= 1:
            raise ChangeError(f"--what-if {key}={raw}: must be in (0, 1]")
        return util
    if key == "enable_prefix_caching":
        low = raw.lower()
        if low not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
            raise ChangeError(f"--what-if {key}={raw}: true or false")
        return low in ("true", "1", "yes", "on")
    try:
        kv_element_bytes(raw, "bfloat16")
    except KVConfigError as exc:
        raise ChangeError(f"--what-if {key}={raw}: {exc.args[-1] if exc.args else exc}") from None
    return raw.lower()


@dataclass(frozen=True)
class Applied:
    """A change applied: the engine flags, the replicas and what the change implied (``notes``)."""

    config: EngineConfig
    replicas: int
    notes: tuple[str, ...]


def kv_tokens(config: EngineConfig) -> int:
    """The KV capacity of ``config`` in tokens (given, or derived from the GPU's memory)."""
    return config.kv_cache_tokens_resolved()


def apply_change(change: Change, config: EngineConfig, limits: Limits) -> Applied:  # noqa: C901
    """``config`` with ``change`` (module docstring for each key).

    Raises:
        ChangeError: the change cannot be applied to this server (a current value it needs is unknown, or
            vLLM would refuse the result), naming the key.
    """
    fields: dict[str, Any] = {}
    notes: list[str] = []
    replicas = 1
    batch = config.batch_limits()  # a resolved config's own limits
    seqs, budget = batch.max_num_seqs, batch.max_num_batched_tokens
    tokens = kv_tokens(config)
    dtype = config.kv_cache_dtype
    for key, value in change.items:
        if key == "max_num_seqs":
            seqs = int(value)
        elif key == "max_num_batched_tokens":
            budget = int(value)
            if budget < seqs:
                raise ChangeError(
                    f"--what-if max_num_batched_tokens={budget}: vLLM requires it >= max_num_seqs ({seqs})"
                )
        elif key == "kv_cache_tokens":
            tokens = int(value)
        elif key == "kv_cache_memory_bytes":
            tokens = _memory_bytes_tokens(int(value), tokens, config, limits)
        elif key == "gpu_memory_utilization":
            tokens = _utilization_tokens(float(value), tokens, config, limits)
            fields["gpu_memory_utilization"] = float(value)
            if float(value) > MAX_SUGGESTED_UTILIZATION:
                notes.append(
                    f"above {MAX_SUGGESTED_UTILIZATION} vLLM may not start: the activations and CUDA graphs need "
                    "the rest of the GPU (kvpilot suggests at most that)."
                )
        elif key == "kv_cache_dtype":
            now, then = kv_element_bytes(dtype, "bfloat16"), kv_element_bytes(str(value), "bfloat16")
            tokens = pool_tokens(tokens * now, config.block_size, then)  # bytes a token scale with the element's
            dtype = str(value)
        elif key == "enable_prefix_caching":
            fields["enable_prefix_caching"] = bool(value)
        elif key == "replicas":
            replicas = int(value)
    if budget < seqs:
        if any(k == "max_num_batched_tokens" for k, _ in change.items):
            raise ChangeError(f"--what-if max_num_seqs={seqs}: vLLM requires max_num_batched_tokens >= it ({budget})")
        notes.append(f"max_num_batched_tokens raised to {seqs}: vLLM requires it >= max_num_seqs.")
        budget = seqs
    block = config.block_size
    if tokens <= 0:
        raise ChangeError(
            f"--what-if {change.text()}: vLLM would not start: the change leaves no GPU memory for the KV cache "
            f"({count(-tokens)} tokens' worth short)"
        )
    if tokens < 2 * block:
        unit = "KV token" if tokens == 1 else "KV tokens"
        raise ChangeError(f"--what-if {change.text()}: leaves {count(tokens)} {unit}, less than 2 blocks")
    fields.update(
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        kv_cache_tokens=tokens,
        num_gpu_blocks=None,
        kv_cache_dtype=dtype,
        bytes_per_token=_bytes_per_token(config, dtype),
    )
    new = dataclasses.replace(config, **fields)
    usable = (new.resolved_num_gpu_blocks() - 1) * block
    if new.max_model_len > usable:
        notes.append(f"max_model_len cut to {count(usable)}: vLLM refuses to start when one request cannot fit.")
        new = dataclasses.replace(new, max_model_len=usable)
    try:
        new.validate()
    except ValueError as exc:
        raise ChangeError(f"--what-if {change.text()}: {exc}") from None
    return Applied(new, replicas, tuple(notes))


def _bytes_per_token(config: EngineConfig, dtype: str) -> int | None:
    """KV bytes per token per GPU with ``dtype`` when the config gives them (else the engine derives them from
    its model profile and ``kv_cache_dtype``: None).
    """
    if config.bytes_per_token is None:
        return None
    now, then = kv_element_bytes(config.kv_cache_dtype, "bfloat16"), kv_element_bytes(dtype, "bfloat16")
    return int(config.bytes_per_token * then / now)


def _memory_bytes_tokens(value: int, tokens: int, config: EngineConfig, limits: Limits) -> int:
    now = limits.value("kv_cache_memory_bytes")
    if not now:
        raise ChangeError(
            "--what-if kv_cache_memory_bytes: the server's KV pool is not set in bytes "
            "(no kv_cache_memory_bytes in its cache_config_info): vLLM sizes it from --gpu-memory-utilization"
        )
    return pool_tokens(tokens * value, config.block_size, int(now))  # a token's bytes: now / tokens


def _utilization_tokens(util: float, tokens: int, config: EngineConfig, limits: Limits) -> int:
    now = limits.value("gpu_memory_utilization")
    if now is None or limits.gpu_memory_utilization.source in ("default", "unknown"):
        raise ChangeError(
            "--what-if gpu_memory_utilization: the server's current value is not known "
            "(give --gpu-memory-utilization, or a spec or cache_config_info that has it)"
        )
    memory = limits.gpu_memory_bytes or gpu_profile(config.gpu).memory_bytes
    bpt = config.resolved_bytes_per_token()
    return tokens_at_utilization(tokens, config.block_size, bpt, memory, float(now), util)


def candidates(
    binding: BindingLimit | None, config: EngineConfig, suggested: Mapping[str, ChangeValue], *, graphs: bool = True
) -> list[Change]:
    """The changes simulated by default for a window whose binding limit is ``binding``, smallest first.

    - ``max_num_seqs``: the rules' suggestion (``suggested``) or the CUDA-graph batch size at 2x, then the one
      at 4x or twice the first, whichever is larger (the next limit, usually KV, binds at some point: the
      predictions say where); without CUDA graphs (``graphs`` false: a CPU server) 2x and 4x themselves;
    - ``token_budget``: the budget 2x and 4x;
    - ``kv_cache``: fp8 KV (2x the tokens, unless already fp8, else 2x the tokens outright), and the
      rules' smaller ``max_num_seqs`` when they suggest one (fewer preemptions);
    and, for any limit, as many replicas as the window's arrivals over what one server served would need
    (:func:`replicas_for`, filled in by the caller). ``none``: nothing to change.
    """
    batch = config.batch_limits()  # a resolved config's own limits
    seqs, budget = batch.max_num_seqs, batch.max_num_batched_tokens
    out: list[Change] = []
    if binding == "max_num_seqs":

        def size(n: int) -> int:
            return capture_sizes_around(n)[1] if graphs else n

        first = int(suggested.get("max_num_seqs") or 0)
        if first <= seqs:
            first = size(2 * seqs)
        out.append(Change.of(max_num_seqs=first))
        out.append(Change.of(max_num_seqs=size(max(4 * seqs, 2 * first))))
    elif binding == "token_budget":
        out.append(Change.of(max_num_batched_tokens=2 * budget))
        out.append(Change.of(max_num_batched_tokens=4 * budget))
    elif binding == "kv_cache":
        if str(config.kv_cache_dtype).startswith("fp8"):
            out.append(Change.of(kv_cache_tokens=2 * kv_tokens(config)))
        else:
            out.append(Change.of(kv_cache_dtype="fp8"))
        fewer = suggested.get("max_num_seqs")
        if fewer and int(fewer) < seqs:
            out.append(Change.of(max_num_seqs=int(fewer)))
        else:
            out.append(Change.of(kv_cache_tokens=4 * kv_tokens(config)))
    return out


def replicas_for(arrival_rate: float, served_rate: float) -> int | None:
    """Replicas that serve ``arrival_rate`` if each serves what one served (``served_rate``, req/s), or None."""
    if served_rate <= 0 or arrival_rate <= 0:
        return None
    return max(2, min(MAX_REPLICAS, math.ceil(arrival_rate / served_rate * 1.02)))
