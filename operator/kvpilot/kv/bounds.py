"""Upper bounds of every number the KV math reads or gives: config.json fields, options, results.

A config.json or an option is read from outside (a file, the Hub, a command line), so a field can hold
``1e308``, a 400-digit integer or ``2**53`` layers. Each bound is far above the largest public model, so no
real config meets it, and low enough that the arithmetic on it stays exact, fast and small: a value
above its bound is refused with one line naming the field (:class:`kvpilot.kv.spec.KVConfigError`),
before any per-layer work. docs/kv.md ("Bounds") lists them; docs/security.md and docs/reliability.md
point there.

Pure constants; :func:`kvpilot.kv.spec.check_whole` applies them. No I/O.
"""

from __future__ import annotations

from kvpilot.text.numbers import GIB

#: ``num_hidden_layers`` (and a draft's layers): the largest public decoders have about 126 (Llama-3.1-405B).
MAX_LAYERS = 4096
#: ``num_attention_heads`` and KV heads: the most in a public model is 232 (Falcon-180B).
MAX_HEADS = 4096
#: ``head_dim`` (and an MLA latent ``kv_lora_rank + qk_rope_head_dim``): public models use 64-256, MLA 576.
MAX_HEAD_DIM = 16_384
#: ``hidden_size`` and other per-layer widths: the widest public decoders are about 20,480 wide.
MAX_WIDTH = 1 << 20
#: Mamba / linear-attention shape fields (state size, conv kernel, heads, head dims, groups, expand).
MAX_STATE_FIELD = 1 << 20
#: Tokens: ``max_position_embeddings`` (and the other context keys), ``sliding_window``, ``--max-model-len``,
#: ``--max-num-batched-tokens``; the longest public context is 10,485,760 tokens (Llama 4 Scout).
MAX_TOKENS = 1 << 30
#: ``--tensor-parallel-size``, ``--pipeline-parallel-size``, ``--data-parallel-size``, ``--max-num-seqs``.
MAX_COUNT = 1 << 20
#: Any memory size (``--kv-memory``, ``--gpu-memory``, ``--weights-memory``, …): 64 TiB, 200 times the
#: largest GPU's memory (288 GB).
MAX_MEMORY_BYTES = 64 * 1024 * GIB
#: KV bytes one token adds on one GPU: above 1 GiB, a request of 288 tokens would not fit the largest GPU;
#: public models need at most a few MB (GPT-3-sized multi-head attention: 4.7 MB).
MAX_BYTES_PER_TOKEN = GIB


__all__ = [
    "MAX_BYTES_PER_TOKEN",
    "MAX_COUNT",
    "MAX_HEADS",
    "MAX_HEAD_DIM",
    "MAX_LAYERS",
    "MAX_MEMORY_BYTES",
    "MAX_STATE_FIELD",
    "MAX_TOKENS",
    "MAX_WIDTH",
]
