"""KV cache of a speculative-decoding draft (``--speculative-config``) that shares the target's block pool.

Pure: parses vLLM's ``--speculative-config`` JSON object and says which draft layers hold KV cache and how
many bytes per token they add. Sources (vLLM 0.29.0, the installed wheel):

* ``vllm/config/speculative.py`` (``SpeculativeConfig.__post_init__``): without ``method``, ``model`` "ngram"
  means ngram, anything else a draft model, then re-detected from the draft: "eagle-" in its name -> eagle,
  "eagle3" -> eagle3, a ``medusa`` / ``mlp_speculator`` / MTP ``model_type`` -> that method. The MTP
  ``method`` aliases (``deepseek_mtp``, ``qwen3_next_mtp``, ... ``MTPModelTypes``) all become ``mtp``, whose
  draft is the target checkpoint itself (``model`` defaults to the target). The draft model is built with
  the target's ``dtype`` (``ModelConfig(dtype=target_model_config.dtype)``) and shares the one
  ``CacheConfig`` (so ``--kv-cache-dtype``); its tensor parallel size is ``draft_tensor_parallel_size``,
  default the target's, else 1 (``_verify_and_get_draft_tp``).
* Which layers get KV: ``GPUModelRunner.get_kv_cache_spec`` (``vllm/v1/worker/gpu_model_runner.py``) makes
  one spec per attention layer of *every* model in the forward context, the drafter's included; an
  EAGLE/EAGLE-3 head has the draft config's ``num_hidden_layers`` decoder layers (``llama_eagle.py``,
  ``llama_eagle3.py``: ``range(self.config.num_hidden_layers)``, usually 1) with the draft's heads and head
  size; MTP has ``num_nextn_predict_layers`` layers shaped like the target's (``deepseek_mtp.py``,
  ``qwen3_next_mtp.py``: default 1 there), which vLLM's arch-config convertor reports as the draft's layer
  count (``mtp_num_hidden_layers`` for the Qwen3.5 family). ngram, suffix, medusa and mlp_speculator drafts
  have no attention layer: no KV.
* One pool: full-attention layers of different shapes form one group (``UniformTypeKVCacheSpecs``,
  ``get_kv_cache_groups`` in ``vllm/v1/core/kv_cache_utils.py``) whose block costs the sum of every layer's
  page, so ``num_blocks = available // (block_size x (target + draft bytes per token))``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvpilot.kv.bounds import MAX_LAYERS
from kvpilot.kv.spec import FULL, KVConfigError, KVSpec, check_whole, text_config
from kvpilot.text.documents import JsonObject

#: vLLM 0.29 ``MTPModelTypes`` (vllm/config/speculative.py): every one is an alias of ``mtp``.
MTP_METHODS = frozenset(
    {
        "mtp",
        "deepseek_mtp",
        "dots3_note_mtp",
        "mimo_mtp",
        "mimo_v2_mtp",
        "glm4_moe_mtp",
        "glm4_moe_lite_mtp",
        "glm_ocr_mtp",
        "ernie_mtp",
        "nemotron_h_mtp",
        "exaone_moe_mtp",
        "exaone4_5_mtp",
        "qwen3_next_mtp",
        "qwen4_exp_mtp",
        "qwen3_5_mtp",
        "longcat_flash_mtp",
        "bailing_hybrid_v3_mtp",
        "minimax_m3_mtp",
        "bailing_hybrid_mtp",
        "kimi_k3_mtp",
        "pangu_ultra_moe_mtp",
        "step3p5_mtp",
        "hy_v3_mtp",
        "hy_v4_mtp",
        "gemma4_mtp",
        "inkling_mtp",
    }
)
#: Methods whose proposer has no attention layer, hence no KV in the pool.
NO_KV_METHODS = frozenset({"ngram", "ngram_gpu", "suffix", "medusa", "mlp_speculator"})
#: Methods modelled with a draft config: its ``num_hidden_layers`` full-attention layers.
DRAFT_CONFIG_METHODS = frozenset({"eagle", "eagle3", "draft_model"})
#: Model types of target checkpoints whose MTP layer count defaults to 1 when the config omits it
#: (``qwen3_next_mtp.py``: ``getattr(config, "num_nextn_predict_layers", 1)``).
MTP_DEFAULT_ONE = frozenset({"qwen3_next"})


@dataclass(frozen=True)
class SpeculativeSettings:
    """The parts of ``--speculative-config`` that size KV.

    Attributes:
        method: vLLM's method after its aliasing (``eagle``, ``eagle3``, ``mtp``, ``draft_model``, ``ngram`` ...).
        model: the draft's ``model`` (file, folder or Hub id), None when the method needs none (MTP: the target).
        num_speculative_tokens: draft tokens per step (does not change the pool's bytes per token), or None.
        draft_tensor_parallel_size: the draft's TP size, None = the target's.
    """

    method: str
    model: str | None
    num_speculative_tokens: int | None
    draft_tensor_parallel_size: int | None

    @property
    def needs_draft_config(self) -> bool:
        """True when the draft's own ``config.json`` decides its layers (EAGLE, EAGLE-3, draft model)."""
        return self.method in DRAFT_CONFIG_METHODS or (self.method == "mtp" and self.model is not None)


def _whole(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise KVConfigError(f"--speculative-config {name}", f"must be a whole number >= 1, got {value!r}")
    return value


def parse_speculative_config(doc: object) -> SpeculativeSettings:  # noqa: C901
    """``--speculative-config`` (a parsed JSON object) -> :class:`SpeculativeSettings`, method resolved by
    name as vLLM 0.29 does before it reads the draft (module docstring); a draft config may still turn
    ``draft_model`` into another method (:func:`resolve_method`).

    Raises:
        KVConfigError: naming ``--speculative-config`` (and the key) when it is not an object, ``method``
            or ``model`` is not a string, a count is not a whole number, or the method is not modelled.
    """
    if not isinstance(doc, dict):
        raise KVConfigError("--speculative-config", 'must be a JSON object, e.g. \'{"method": "mtp"}\'')
    method, model = doc.get("method"), doc.get("model")
    for key, value in (("method", method), ("model", model)):
        if value is not None and not isinstance(value, str):
            raise KVConfigError(f"--speculative-config {key}", f"must be a string, got {value!r}")
    if method is None:
        if model is None:
            raise KVConfigError("--speculative-config", "needs a method or a model")
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
        if method == "draft_model" and "eagle-" in model.lower():
            method = "eagle"
        elif method == "draft_model" and "eagle3" in model.lower():
            method = "eagle3"
    method = "ngram" if method == "[ngram]" else method
    if method in MTP_METHODS:
        method = "mtp"
    known = DRAFT_CONFIG_METHODS | NO_KV_METHODS | {"mtp"}
    if method not in known:
        raise KVConfigError(
            "--speculative-config method",
            f"{method!r} is not modelled (modelled: {', '.join(sorted(known))})",
        )
    if method in DRAFT_CONFIG_METHODS and model is None:
        raise KVConfigError("--speculative-config model", f"method {method!r} needs the draft's model")
    return SpeculativeSettings(
        method=method,
        model=None if method in NO_KV_METHODS else model,
        num_speculative_tokens=_whole(doc.get("num_speculative_tokens"), "num_speculative_tokens"),
        draft_tensor_parallel_size=_whole(doc.get("draft_tensor_parallel_size"), "draft_tensor_parallel_size"),
    )


def resolve_method(settings: SpeculativeSettings, draft_model_type: str | None) -> str:
    """VLLM's re-detection of a ``draft_model`` from its config's ``model_type`` (``medusa``,
    ``mlp_speculator``, an MTP type -> ``mtp``); other methods are kept.
    """
    if settings.method != "draft_model" or draft_model_type is None:
        return settings.method
    if draft_model_type in ("medusa", "mlp_speculator"):
        return draft_model_type
    return "mtp" if draft_model_type in MTP_METHODS else settings.method


@dataclass(frozen=True)
class DraftLayers:
    """The draft's KV-holding layers (all full attention) as they sit in the target's pool.

    Attributes:
        method: vLLM's method.
        num_layers: draft layers with KV cache (0 for ngram/suffix/medusa/mlp_speculator).
        spec: the spec whose layer shape the draft layers have (the draft's, or the target's for MTP), with
            the target's dtype (vLLM builds the draft in it); None without layers.
        source: where the layer count came from (for the output), e.g. ``num_nextn_predict_layers``.
    """

    method: str
    num_layers: int
    spec: KVSpec | None
    source: str


def draft_layers(
    settings: SpeculativeSettings,
    target: KVSpec,
    target_config: JsonObject,
    draft: KVSpec | None = None,
    draft_config: JsonObject | None = None,
) -> DraftLayers:
    """Which draft layers hold KV (module docstring for vLLM's rules).

    Args:
        settings: the parsed ``--speculative-config``.
        target: the target model's spec.
        target_config: the target's ``config.json`` (MTP's layer count).
        draft: the draft's spec when :attr:`SpeculativeSettings.needs_draft_config`.
        draft_config: the draft's ``config.json`` then.

    Raises:
        KVConfigError: a draft with sliding-window or Mamba layers (not modelled), or an MTP checkpoint whose
            config names no MTP layers.
    """
    method = resolve_method(settings, draft.model_type if draft else None)
    if method in NO_KV_METHODS:
        return DraftLayers(method, 0, None, f"{method} has no attention layer")
    if method == "mtp":
        base, cfg = (draft, draft_config) if draft is not None and draft_config is not None else (target, target_config)
        text, prefix = text_config(cfg)
        key = next((k for k in ("num_nextn_predict_layers", "mtp_num_hidden_layers") if text.get(k) is not None), None)
        n = text.get(key) if key else None
        if n is None and (base.model_type or "") in MTP_DEFAULT_ONE:
            n, key = 1, f"{base.model_type}'s default"
        if n is None:
            raise KVConfigError(
                f"{prefix}num_nextn_predict_layers",
                "missing: MTP needs the checkpoint's MTP layer count (this config names no MTP layers)",
            )
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise KVConfigError(
                f"{prefix}{key}", f"MTP needs the checkpoint's MTP layer count as an integer >= 1, got {n}"
            )
        n = check_whole(n, f"{prefix}{key}", upper=MAX_LAYERS)
        return DraftLayers(method, n, replace(base, model_dtype=target.model_dtype), str(key))
    if draft is None:  # pragma: no cover - parse_speculative_config requires a model for these methods
        raise KVConfigError("--speculative-config model", f"method {method!r} needs the draft's config")
    if draft.count(FULL) != draft.num_layers:
        raise KVConfigError(
            "--speculative-config model", "drafts with sliding-window or Mamba/linear layers are not modelled"
        )
    return DraftLayers(method, draft.num_layers, replace(draft, model_dtype=target.model_dtype), "num_hidden_layers")


__all__ = [
    "DRAFT_CONFIG_METHODS",
    "DraftLayers",
    "MTP_METHODS",
    "NO_KV_METHODS",
    "SpeculativeSettings",
    "draft_layers",
    "parse_speculative_config",
    "resolve_method",
]
