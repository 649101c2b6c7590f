"""Model weight bytes from what a checkpoint publishes (pure: no I/O).

Two published figures give the same number for one checkpoint, and every caller (``kvpilot kv``
and the operator's KV pre-flight, through :func:`kvpilot.kv.hub.hub_weights_bytes`) uses them in
the same order:

1. ``metadata.total_size`` of ``model.safetensors.index.json`` (bytes of all tensors; written by
   ``huggingface_hub.split_torch_state_dict_into_shards`` / ``transformers`` ``save_pretrained``
   for sharded checkpoints);
2. the safetensors parameter counts per dtype the Hub reports for any safetensors checkpoint
   (``huggingface_hub.ModelInfo.safetensors.parameters``), times the dtype's size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Bits per element of each safetensors dtype (``Dtype::bitsize`` in huggingface/safetensors,
#: safetensors/src/tensor.rs; a BOOL is stored in one byte).
SAFETENSORS_DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
}


def weights_from_index(index: Any) -> int | None:
    """``metadata.total_size`` (bytes) of a parsed ``model.safetensors.index.json``; None when absent
    or not a positive integer.
    """
    metadata = index.get("metadata") if isinstance(index, Mapping) else None
    total = metadata.get("total_size") if isinstance(metadata, Mapping) else None
    if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        return None
    return total


def weights_from_parameters(parameters: Mapping[str, int] | None) -> int | None:
    """Bytes of the parameters ``{dtype: count}`` (safetensors dtype names), rounded up to a byte;
    None when there are none or a dtype is not in :data:`SAFETENSORS_DTYPE_BITS` (unknown size).
    """
    if not parameters:
        return None
    bits = 0
    for dtype, count in parameters.items():
        size = SAFETENSORS_DTYPE_BITS.get(str(dtype).upper())
        if size is None or not isinstance(count, int) or count < 0:
            return None
        bits += size * count
    return -(-bits // 8) if bits else None
