"""Read the KV-relevant facts of a Hugging Face ``config.json`` into a :class:`KVSpec`.

Pure: takes the parsed JSON (a ``dict``), does no I/O. Every rule names its source:

* vLLM ``vllm/config/model.py`` (stored copy of vLLM main, the v0.3x line):
  ``get_head_size`` = ``head_dim`` when set (and not null), else ``hidden_size // num_attention_heads``;
  MLA models use ``kv_lora_rank + qk_rope_head_dim``; ``get_total_num_kv_heads`` tries ``n_head_kv``,
  ``num_kv_heads``, ``num_key_value_heads``, ``multi_query_group_num`` and falls back to
  ``num_attention_heads``; both read ``hf_text_config`` (the nested ``text_config`` of multimodal configs).
* transformers' configuration classes for defaults and layer patterns: ``LlamaConfig`` defaults
  (32 layers, 32 heads, hidden 4096, ``num_key_value_heads`` = heads) for a ``text_config`` that
  omits them (llava); ``Gemma2Config`` (even layers sliding), ``Gemma3TextConfig``
  (``sliding_window_pattern`` 6: every 6th layer full), ``Qwen2Config``/``Qwen3Config``
  (``sliding_window`` ignored unless ``use_sliding_window``; layers ``>= max_window_layers`` slide),
  ``Qwen3NextConfig`` (``full_attention_interval``: every n-th layer full, the rest Gated DeltaNet),
  ``JambaConfig`` (attention where ``i % attn_layer_period == attn_layer_offset``, Mamba elsewhere),
  ``NemotronHConfig`` (``hybrid_override_pattern``: ``M`` Mamba2, ``*`` attention, ``-``/``E`` MLP/MoE).
* A model-level ``sliding_window`` with no per-layer pattern applies to every layer: vLLM's ``Attention``
  layer falls back to ``CacheConfig.sliding_window`` when the model passes no ``per_layer_sliding_window``
  (vllm/attention/layer.py), as for Phi-3-mini-4k (window 2047, vLLM PR #4380).
* The model's context (:func:`context_length`): vLLM 0.29.0's ``max_model_len`` derivation
  (``derive_max_model_len_and_key`` in vllm/transformers_utils/model_arch_config_convertor.py,
  ``_get_and_verify_max_len`` in vllm/config/model.py; the keys and RoPE rules live in
  :mod:`kvpilot.vllm.defaults`).

Every number is bounded (:mod:`kvpilot.kv.bounds`) before it is used, and layer patterns are counted by
arithmetic, never by a list of one entry per layer, so no config costs more than a few microseconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from kvpilot.kv.bounds import (
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_STATE_FIELD,
    MAX_TOKENS,
    MAX_WIDTH,
)
from kvpilot.text.documents import JsonObject
from kvpilot.text.errors import InvalidValueError
from kvpilot.text.numbers import count as fmt_count
from kvpilot.text.numbers import significant
from kvpilot.vllm.defaults import (
    LEGACY_ROPE_TYPES,
    MAX_MODEL_LEN_KEYS,
    ROPE_PRESCALED_MODEL_TYPES,
    ROPE_TYPES_WITHOUT_CONTEXT_FACTOR,
)

FULL = "full_attention"
SLIDING = "sliding_attention"
MAMBA = "mamba"
LINEAR = "linear_attention"
NONE = "none"

#: Bytes per element of the dtype names found in config.json (``torch_dtype``/``dtype``).
DTYPE_BYTES = {"float16": 2, "half": 2, "bfloat16": 2, "float32": 4, "float": 4, "float64": 8}

#: transformers ``LlamaConfig`` defaults (configuration_llama.py), used for a nested ``text_config``
#: that omits core fields, as llava-hf/llava-1.5-7b-hf does. Mistral/Qwen2 defaults likewise.
MODEL_TYPE_DEFAULTS: dict[str, dict[str, int | None]] = {
    "llama": {"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096, "num_key_value_heads": None},
    "mistral": {"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096, "num_key_value_heads": 8},
    "qwen2": {"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096, "num_key_value_heads": 32},
    # transformers Gemma3TextConfig: max_position_embeddings 131072 (gemma-3-27b-it's text_config omits it)
    "gemma3_text": {"max_position_embeddings": 131072},
}


class KVConfigError(InvalidValueError):
    """A config.json (or an option) that cannot give KV numbers (an :class:`~kvpilot.text.errors.InputError`
    and a ``ValueError``).

    Attributes:
        field: the config field or option at fault (e.g. ``num_attention_heads``, ``--kv-cache-dtype``).
        message: one line saying what is wrong.
    """


@dataclass(frozen=True)
class StateSpec:
    """The fixed per-request recurrent state of one Mamba / linear-attention layer.

    ``kind`` is ``mamba1`` (Jamba), ``mamba2`` (Nemotron-H) or ``gated_delta_net`` (Qwen3-Next);
    ``params`` holds the config fields the shapes come from (see :func:`kvpilot.kv.size.state_bytes_per_layer`);
    ``conv_dtype``/``ssm_dtype`` are dtype names (the SSM state may be float32 when the config says
    ``mamba_ssm_cache_dtype``).
    """

    kind: str
    params: dict[str, int]
    conv_dtype: str
    ssm_dtype: str


@dataclass(frozen=True)
class KVSpec:
    """KV-relevant facts of one model, independent of parallelism and KV dtype.

    Attributes:
        model_type: ``model_type`` of the (text) config.
        num_layers: decoder layers (``num_hidden_layers``).
        num_attention_heads: query heads (total).
        num_kv_heads: KV heads (total, before tensor parallel); 1 for MLA (one shared latent).
        head_dim: elements per head per K or V (for MLA: the latent width ``kv_lora_rank + qk_rope_head_dim``).
        model_dtype: the checkpoint dtype name vLLM serves with ``--dtype auto`` (float32 → bfloat16).
        is_mla: Multi-head Latent Attention (DeepSeek-V2/V3): one latent per token per layer, no K/V pair.
        layer_counts: ``(kind, layers)`` pairs, each kind once: ``full_attention``, ``sliding_attention``,
            ``mamba``, ``linear_attention``, ``none`` (layers of a kind that is absent are left out).
        sliding_window: window in tokens of the sliding layers, or None.
        state: recurrent state of the ``mamba``/``linear_attention`` layers, or None.
        max_position_embeddings: the config's ``max_position_embeddings`` as written, or None.
        context: the model's context as vLLM derives it (:class:`ContextLength`), or None when the config
            names none of vLLM's keys.
        defaults_used: config fields filled from transformers defaults (e.g. llava's text_config).
        notes: human-readable remarks (which rule decided the layer pattern, …).
    """

    model_type: str | None
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    model_dtype: str
    is_mla: bool
    layer_counts: tuple[tuple[str, int], ...]
    sliding_window: int | None = None
    state: StateSpec | None = None
    max_position_embeddings: int | None = None
    context: ContextLength | None = None
    defaults_used: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def count(self, kind: str) -> int:
        """Number of layers of ``kind`` (e.g. ``full_attention``)."""
        return dict(self.layer_counts).get(kind, 0)

    @property
    def attention(self) -> str:
        """``mla``, ``mqa`` (one KV head), ``mha`` (KV heads = query heads) or ``gqa``."""
        if self.is_mla:
            return "mla"
        if self.num_kv_heads == 1:
            return "mqa"
        if self.num_kv_heads == self.num_attention_heads:
            return "mha"
        return "gqa"

    @property
    def is_hybrid(self) -> bool:
        """True when some layers keep no per-token KV for the whole context (sliding, Mamba, linear)."""
        return any(self.count(kind) for kind in (SLIDING, MAMBA, LINEAR))


@dataclass(frozen=True)
class ContextLength:
    """The model's context, as vLLM 0.29.0 derives ``max_model_len`` from the config (tokens).

    Attributes:
        default: what vLLM uses without ``--max-model-len``.
        limit: the largest ``--max-model-len`` vLLM accepts; above it vLLM refuses to start ("User-specified
            max_model_len … is greater than the derived max_model_len") unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``.
            Equal to ``default`` except for LongRoPE models, which default to ``original_max_position_embeddings``.
        source: how it was derived, e.g. ``max_position_embeddings`` or
            ``original_max_position_embeddings 4,096 x yarn factor 40``.
    """

    default: int
    limit: int
    source: str


def kinds_from_counts(counts: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    """``(kind, layers)`` pairs without the kinds that have no layer, in the order given."""
    return tuple((kind, n) for kind, n in counts if n)


def check_whole(value: object, label: str, *, lower: int = 1, upper: int) -> int:
    """``value`` as an int when it is a whole number (an int, or a float without fraction) in ``[lower, upper]``.

    The bounds are compared before any conversion, so a 400-digit integer or ``1e308`` costs nothing and
    overflows nothing.

    Raises:
        KVConfigError: naming ``label``: not a whole number (a bool, a string, NaN, a fraction), below ``lower``,
            or above ``upper`` (kvpilot's bound, :mod:`kvpilot.kv.bounds`).
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, float) and not (math.isfinite(value) and value.is_integer()))
    ):
        raise KVConfigError(label, f"must be a whole number, got {_short(value)}")
    if value < lower:
        raise KVConfigError(label, f"must be {'> 0' if lower == 1 else f'>= {lower}'}, got {_short(value)}")
    if value > upper:
        raise KVConfigError(
            label, f"{_short(value)} is above {fmt_count(upper)}, kvpilot's bound for it (docs/kv.md, Bounds)"
        )
    return int(value)


def _short(value: object) -> str:
    """``value`` as a message quotes it: a long integer as ``1e+399 (a 400-digit number)``, never its digits."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        digits = len(str(abs(value)))
        return f"{'-' if value < 0 else ''}{str(abs(value))[0]}e+{digits - 1} (a {digits}-digit number)"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _positive_int(cfg: JsonObject, name: str, *, where: str = "", upper: int = MAX_WIDTH) -> int:
    """``cfg[name]`` as a whole number in ``[1, upper]`` (:func:`check_whole`); missing is an error too."""
    value = cfg.get(name)
    if value is None:
        raise KVConfigError(f"{where}{name}", "missing from config.json")
    return check_whole(value, f"{where}{name}", upper=upper)


def _whole_number(cfg: JsonObject, name: str, default: int, *, where: str = "", upper: int = MAX_LAYERS) -> int:
    """``cfg[name]`` as a whole number in ``[0, upper]``, ``default`` when absent or null (:func:`check_whole`)."""
    value = cfg.get(name)
    return default if value is None else check_whole(value, f"{where}{name}", lower=0, upper=upper)


def text_config(config: JsonObject) -> tuple[JsonObject, str]:
    """The language-model part of ``config``: its ``text_config`` when present (multimodal), else itself.

    Returns ``(text_cfg, prefix)`` where ``prefix`` is ``"text_config."`` or ``""`` (for error messages).
    Mirrors vLLM's ``hf_text_config`` (vllm/transformers_utils/config.py ``get_hf_text_config``).

    Raises:
        KVConfigError: when ``config`` is not a JSON object, or ``text_config`` is not one.
    """
    if not isinstance(config, dict):
        raise KVConfigError("config.json", "must be a JSON object")
    inner = config.get("text_config")
    if inner is None:
        return config, ""
    if not isinstance(inner, dict):
        raise KVConfigError("text_config", "must be a JSON object")
    return inner, "text_config."


def model_dtype(config: JsonObject) -> str:
    """The dtype name vLLM serves the model in with ``--dtype auto``.

    Reads ``torch_dtype`` (or transformers v5's ``dtype``) of the text config, then of the top level.
    Missing or float32 → ``bfloat16``: vLLM's ``_get_and_verify_dtype`` (vllm/config/model.py) serves
    float32 checkpoints in 16-bit on GPUs by default; a config without a dtype counts as float32.

    Raises:
        KVConfigError: naming ``torch_dtype`` when the value is not a known dtype.
    """
    text, prefix = text_config(config)
    for cfg, where in ((text, prefix), (config, "")):
        for key in ("torch_dtype", "dtype"):
            value = cfg.get(key)
            if value is None:
                continue
            name = str(value).removeprefix("torch.").lower()
            if name not in DTYPE_BYTES:
                raise KVConfigError(f"{where}{key}", f"unknown dtype {value!r} (known: {', '.join(DTYPE_BYTES)})")
            return "bfloat16" if DTYPE_BYTES[name] > 2 else {"half": "float16"}.get(name, name)
    return "bfloat16"


def _layer_counts(  # noqa: C901
    cfg: JsonObject, prefix: str, n: int, max_pos: object = None
) -> tuple[tuple[tuple[str, int], ...], int | None, list[str]]:
    """Layers of each kind, the sliding window and notes, from explicit or implicit layer patterns
    (``max_pos``: the model's ``max_position_embeddings`` as :func:`kv_spec_from_config` reads it). Each
    pattern is counted by arithmetic on ``n`` (the layer count, already bounded), not layer by layer.
    """
    model_type = str(cfg.get("model_type") or "")
    window = cfg.get("sliding_window")
    notes: list[str] = []
    types = cfg.get("layer_types")
    if isinstance(types, list):
        if len(types) != n:
            raise KVConfigError(f"{prefix}layer_types", f"has {len(types)} entries for {n} layers")
        mapping = {
            "full_attention": FULL,
            "sliding_attention": SLIDING,
            "linear_attention": LINEAR,
            "mamba": MAMBA,
            "chunked_attention": FULL,
        }
        kinds = [mapping.get(str(t), FULL) for t in types]
        counts = kinds_from_counts((kind, kinds.count(kind)) for kind in (FULL, SLIDING, MAMBA, LINEAR))
        notes.append("layer pattern from layer_types")
        if SLIDING not in kinds or window is None:
            return counts, None, notes
        return counts, _positive_int(cfg, "sliding_window", where=prefix, upper=MAX_TOKENS), notes
    if model_type == "qwen3_next":
        interval = _positive_int(cfg, "full_attention_interval", where=prefix, upper=MAX_LAYERS)
        notes.append(f"Qwen3-Next: every {interval}th layer full attention, others Gated DeltaNet")
        full = n // interval  # layers i with (i + 1) % interval == 0
        return kinds_from_counts(((FULL, full), (LINEAR, n - full))), None, notes
    if model_type == "jamba":
        period = _positive_int(cfg, "attn_layer_period", where=prefix, upper=MAX_LAYERS)
        offset = _whole_number(cfg, "attn_layer_offset", 0, where=prefix)
        notes.append(f"Jamba: attention where layer % {period} == {offset}, Mamba elsewhere")
        full = (n - 1 - offset) // period + 1 if offset < min(period, n) else 0  # i = offset, offset + period, …
        return kinds_from_counts(((FULL, full), (MAMBA, n - full))), None, notes
    hybrid = cfg.get("hybrid_override_pattern")
    if model_type == "nemotron_h" and isinstance(hybrid, str):
        if len(hybrid) != n:
            raise KVConfigError(f"{prefix}hybrid_override_pattern", f"has {len(hybrid)} characters for {n} layers")
        notes.append("Nemotron-H: hybrid_override_pattern (M Mamba2, * attention, -/E no cache)")
        mamba, full = hybrid.count("M"), hybrid.count("*")
        return kinds_from_counts(((FULL, full), (MAMBA, mamba), (NONE, n - mamba - full))), None, notes
    if window is None:
        return ((FULL, n),), None, notes
    window = _positive_int(cfg, "sliding_window", where=prefix, upper=MAX_TOKENS)
    if cfg.get("use_sliding_window") is False:
        notes.append("sliding_window ignored: use_sliding_window is false")
        return ((FULL, n),), None, notes
    if model_type == "gemma2":
        notes.append("Gemma-2: even layers sliding, odd layers full (transformers Gemma2Config)")
        return kinds_from_counts(((FULL, n // 2), (SLIDING, n - n // 2))), window, notes
    if model_type in ("gemma3", "gemma3_text"):
        pattern = _whole_number(cfg, "sliding_window_pattern", 6, where=prefix) or 6
        notes.append(f"Gemma-3: every {pattern}th layer full, others sliding (sliding_window_pattern)")
        return kinds_from_counts(((FULL, n // pattern), (SLIDING, n - n // pattern))), window, notes
    if cfg.get("use_sliding_window") is True and cfg.get("max_window_layers") is not None:
        first = min(n, _whole_number(cfg, "max_window_layers", 0, where=prefix))
        notes.append(f"layers >= max_window_layers ({first}) slide")
        return kinds_from_counts(((FULL, first), (SLIDING, n - first))), window, notes
    if isinstance(max_pos, int) and window >= max_pos:
        notes.append("sliding_window >= max_position_embeddings: every layer sees the whole context")
        return ((FULL, n),), None, notes
    notes.append("sliding_window without a layer pattern applies to every layer (Mistral/Phi-3 convention)")
    return ((SLIDING, n),), window, notes


def _state_spec(cfg: JsonObject, prefix: str, counts: dict[str, int], dtype: str) -> StateSpec | None:
    if not counts.get(MAMBA) and not counts.get(LINEAR):
        return None
    model_type = str(cfg.get("model_type") or "")
    ssm_name = cfg.get("mamba_ssm_cache_dtype")
    ssm_dtype = str(ssm_name) if ssm_name in DTYPE_BYTES else dtype

    def g(name: str) -> int:
        return _positive_int(cfg, name, where=prefix, upper=MAX_STATE_FIELD)

    if model_type == "qwen3_next" or counts.get(LINEAR):
        params = {
            "num_k_heads": g("linear_num_key_heads"),
            "num_v_heads": g("linear_num_value_heads"),
            "head_k_dim": g("linear_key_head_dim"),
            "head_v_dim": g("linear_value_head_dim"),
            "conv_kernel": g("linear_conv_kernel_dim"),
        }
        return StateSpec("gated_delta_net", params, dtype, ssm_dtype)
    if model_type == "jamba":
        params = {
            "intermediate_size": g("mamba_expand") * _positive_int(cfg, "hidden_size", where=prefix),
            "state_size": g("mamba_d_state"),
            "conv_kernel": g("mamba_d_conv"),
        }
        return StateSpec("mamba1", params, dtype, ssm_dtype)
    if model_type == "nemotron_h":
        params = {
            "num_heads": g("mamba_num_heads"),
            "head_dim": g("mamba_head_dim"),
            "n_groups": g("n_groups"),
            "state_size": g("ssm_state_size"),
            "conv_kernel": g("conv_kernel"),
        }
        params["intermediate_size"] = params["num_heads"] * params["head_dim"]
        return StateSpec("mamba2", params, dtype, ssm_dtype)
    raise KVConfigError(f"{prefix}model_type", f"Mamba/linear-attention layers of {model_type!r} are not modelled")


def _rope_parameters(cfg: JsonObject, prefix: str) -> tuple[list[JsonObject], str]:
    """The RoPE parameter sets of the text config: transformers v5's ``rope_parameters`` (one set, or one per
    layer type when nested) or v4's ``rope_scaling``; ``[]`` when there are none.
    """
    for key in ("rope_parameters", "rope_scaling"):
        rope = cfg.get(key)
        if rope is None:
            continue
        if not isinstance(rope, dict):
            raise KVConfigError(f"{prefix}{key}", "must be a JSON object")
        sets = [v for v in rope.values() if isinstance(v, dict)]
        nested = bool(rope) and len(sets) == len(rope)
        return (sets if nested else [rope]), f"{prefix}{key}"
    return [], ""


def context_length(config: JsonObject) -> ContextLength | None:  # noqa: C901
    """The model's context as vLLM 0.29.0 derives ``max_model_len`` from ``config`` (tokens), or None when the
    config names none of :data:`~kvpilot.vllm.defaults.MAX_MODEL_LEN_KEYS`.

    vLLM's rules (``derive_max_model_len_and_key``, ``_get_and_verify_max_len``): the smallest of the text
    config's length keys, a truthy ``model_max_length`` overriding them; then, unless the model type is
    Gemma-3 (already scaled), each RoPE set's ``factor`` multiplies it, except for ``su``/``longrope``/``llama3``,
    and ``yarn`` starts from ``original_max_position_embeddings``; a LongRoPE model defaults to
    ``original_max_position_embeddings`` but accepts up to the derived length. A nested ``text_config``
    without any key falls back to the top level (vLLM would take the transformers class default, which a
    config alone does not tell). E.g. Qwen2.5-7B with ``{"type": "yarn", "factor": 4,
    "original_max_position_embeddings": 32768}``: 131,072.

    Raises:
        KVConfigError: naming the field when a length or factor is not a number, or the result is above
            :data:`~kvpilot.kv.bounds.MAX_TOKENS`.
    """
    text, prefix = text_config(config)
    model_type = str(text.get("model_type") or "")
    defaults = MODEL_TYPE_DEFAULTS.get(model_type, {}) if prefix else {}
    for cfg, where in (({**defaults, **{k: v for k, v in text.items() if v is not None}}, prefix), (config, "")):
        found = {
            key: check_whole(cfg[key], f"{where}{key}", upper=MAX_TOKENS)
            for key in MAX_MODEL_LEN_KEYS
            if cfg.get(key) is not None
        }
        if found:
            break
    else:
        return None
    key = min(found, key=lambda k: found[k])  # the first of the smallest, as vLLM's strict "<" keeps it
    derived: float = found[key]
    if found.get("model_max_length"):
        key = "model_max_length"
        derived = found[key]
    source = f"{where}{key}"
    rope, rope_key = _rope_parameters(cfg, where)
    longrope = False
    if rope and not any(name in model_type for name in ROPE_PRESCALED_MODEL_TYPES):
        factor: float = 1.0
        for params in rope:
            kind = str(params.get("rope_type", params.get("type", "default")))
            kind = LEGACY_ROPE_TYPES.get(kind, kind)
            longrope = longrope or kind == "longrope"
            if kind in ROPE_TYPES_WITHOUT_CONTEXT_FACTOR:
                continue
            value = params.get("factor", factor)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_TOKENS:
                    raise KVConfigError(
                        f"{rope_key}.factor", f"must be a number in (0, {MAX_TOKENS}], got {_short(value)}"
                    )
                factor = float(value)
            if kind == "yarn" and params.get("original_max_position_embeddings") is not None:
                derived = check_whole(
                    params["original_max_position_embeddings"],
                    f"{rope_key}.original_max_position_embeddings",
                    upper=MAX_TOKENS,
                )
                source = f"{rope_key}.original_max_position_embeddings {fmt_count(int(derived))}"
        if factor != 1.0:
            source = f"{source} x {kind} factor {significant(factor, 6)}"
            derived *= factor
    if derived > MAX_TOKENS:
        raise KVConfigError(
            rope_key or source,
            f"gives a context of {_short(int(derived))} tokens, above {fmt_count(MAX_TOKENS)}, kvpilot's bound",
        )
    limit = int(derived)
    default = limit
    original = cfg.get("original_max_position_embeddings")
    if longrope and original is not None:
        default = check_whole(original, f"{where}original_max_position_embeddings", upper=MAX_TOKENS)
        source = f"{where}original_max_position_embeddings (LongRoPE's default; up to {fmt_count(limit)})"
    return ContextLength(default=default, limit=limit, source=source)


def kv_spec_from_config(config: JsonObject) -> KVSpec:
    """Parse a Hugging Face ``config.json`` (as a dict) into a :class:`KVSpec`.

    Handles dense MHA/GQA/MQA, explicit ``head_dim``, MLA (``kv_lora_rank`` + ``qk_rope_head_dim``),
    nested ``text_config`` (with transformers defaults by ``model_type`` for missing core fields),
    sliding-window and hybrid Mamba / linear-attention layer patterns (see the module docstring
    for the source of each rule). Every number is checked against its bound (:mod:`kvpilot.kv.bounds`)
    before it is used.

    Raises:
        KVConfigError: naming the field when a needed field is missing, zero, negative, not a number or
            above its bound, or when the dtype or layer pattern is not understood.
    """
    text, prefix = text_config(config)
    model_type = text.get("model_type")
    defaults = MODEL_TYPE_DEFAULTS.get(str(model_type), {}) if prefix else {}
    defaults_used = [f"{prefix}{k}" for k, v in defaults.items() if text.get(k) is None and v is not None]
    cfg: JsonObject = {
        **{k: v for k, v in defaults.items() if v is not None},
        **{k: v for k, v in text.items() if v is not None},
    }
    if cfg.get("num_key_value_heads") is None and "num_key_value_heads" in defaults:
        defaults_used.append(f"{prefix}num_key_value_heads")

    layers = _positive_int(cfg, "num_hidden_layers", where=prefix, upper=MAX_LAYERS)
    heads = _positive_int(cfg, "num_attention_heads", where=prefix, upper=MAX_HEADS)
    dtype = model_dtype(config)
    is_mla = cfg.get("kv_lora_rank") is not None
    if is_mla:
        head_dim = _positive_int(cfg, "kv_lora_rank", where=prefix, upper=MAX_HEAD_DIM) + _positive_int(
            cfg, "qk_rope_head_dim", where=prefix, upper=MAX_HEAD_DIM
        )
        kv_heads = 1
    else:
        kv_heads = heads
        for name in ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num"):
            if cfg.get(name) is not None:
                kv_heads = _positive_int(cfg, name, where=prefix, upper=MAX_HEADS)
                break
        if cfg.get("head_dim") is not None:
            head_dim = _positive_int(cfg, "head_dim", where=prefix, upper=MAX_HEAD_DIM)
        else:
            hidden = _positive_int(cfg, "hidden_size", where=prefix, upper=MAX_WIDTH)
            head_dim = hidden // heads
            if head_dim <= 0:
                raise KVConfigError(f"{prefix}hidden_size", f"{hidden} is smaller than num_attention_heads {heads}")
            if head_dim > MAX_HEAD_DIM:
                raise KVConfigError(
                    f"{prefix}hidden_size",
                    f"{hidden} / {heads} heads = head size {fmt_count(head_dim)}, above {fmt_count(MAX_HEAD_DIM)}, "
                    "kvpilot's bound for it (docs/kv.md, Bounds)",
                )
    # max_position_embeddings for the layer patterns: the top-level config first, then the text config
    max_pos = config.get("max_position_embeddings") if prefix else None
    where = "" if max_pos is not None else prefix
    max_pos = cfg.get("max_position_embeddings") if max_pos is None else max_pos
    if max_pos is not None:
        max_pos = check_whole(max_pos, f"{where}max_position_embeddings", upper=MAX_TOKENS)
    counts, window, notes = _layer_counts(cfg, prefix, layers, max_pos)
    by_kind = dict(counts)
    if not by_kind.get(FULL) and not by_kind.get(SLIDING):
        raise KVConfigError(f"{prefix}num_hidden_layers", "no attention layer found: no KV cache to size")
    return KVSpec(
        model_type=None if model_type is None else str(model_type),
        num_layers=layers,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        model_dtype=dtype,
        is_mla=is_mla,
        layer_counts=counts,
        sliding_window=window,
        state=_state_spec(cfg, prefix, by_kind, dtype),
        max_position_embeddings=max_pos,
        context=context_length(config),
        defaults_used=tuple(defaults_used),
        notes=tuple(
            notes
            + ([f"defaults from transformers {model_type} config: {', '.join(defaults_used)}"] if defaults_used else [])
        ),
    )


@dataclass(frozen=True)
class ModelConfig:
    """A served model's ``config.json``, read once where it enters (``--model-config``).

    Attributes:
        document: the JSON object as given (the engine's own profile counts parameters from it).
        spec: its :class:`KVSpec`, None when :func:`kv_spec_from_config` refuses it.
        dtype: the dtype vLLM serves it in (:func:`model_dtype`), None when the dtype is not understood.
    """

    document: JsonObject
    spec: KVSpec | None
    dtype: str | None

    @classmethod
    def read(cls, document: JsonObject) -> ModelConfig:
        """Parse ``document`` once; a field that cannot be read leaves ``spec`` (or ``dtype``) None."""
        try:
            spec: KVSpec | None = kv_spec_from_config(document)
        except (KVConfigError, KeyError, ValueError, TypeError):
            spec = None
        try:
            dtype: str | None = model_dtype(document)
        except (KVConfigError, KeyError):
            dtype = None
        return cls(document, spec, dtype)


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for non-negative integers (vLLM's ``cdiv``)."""
    return -(-a // b)


__all__ = [
    "DTYPE_BYTES",
    "FULL",
    "KVConfigError",
    "KVSpec",
    "LINEAR",
    "MAMBA",
    "ModelConfig",
    "NONE",
    "SLIDING",
    "StateSpec",
    "ceil_div",
    "kv_spec_from_config",
    "model_dtype",
    "text_config",
]
