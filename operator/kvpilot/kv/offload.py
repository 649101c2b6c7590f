"""A CPU offload tier for KV (LMCache's local CPU backend behind vLLM's KV connector): its chunking and speeds.

One home for the figures the engine's offload tier (:mod:`kvpilot.engine.offload`) and the diagnosis's
cache-turnover finding (:mod:`kvpilot.diagnose.turnover`) both use:

- LMCache saves KV in chunks of ``chunk_size`` tokens (default 256) and keeps only full chunks, so a prompt of P
  tokens is held as ``floor(P / 256) x 256`` tokens (the founding experiment: 5,011-token documents, 19 chunks
  = 4,864 tokens each, 48,640 external hits for ten);
- load and store bandwidths calibrated on that experiment (vLLM 0.29.0, Qwen2.5-1.5B-Instruct, 8 GB GPU, LMCache
  with 1.5 GB of CPU): 4,864 tokens x 28,672 B loaded in about 8.5 ms (16 GB/s) and stored for +22.3 ms of TTFT
  (6.25 GB/s).
"""

from __future__ import annotations

#: LMCache's ``chunk_size`` default (tokens): only full chunks are stored and found
OFFLOAD_CHUNK_TOKENS = 256
#: CPU -> GPU bytes/s (module docstring)
OFFLOAD_LOAD_BANDWIDTH = 16e9
#: GPU -> CPU bytes/s (module docstring)
OFFLOAD_STORE_BANDWIDTH = 6.25e9


def offloaded_tokens(prompt_tokens: float, chunk_tokens: int = OFFLOAD_CHUNK_TOKENS) -> int:
    """The tokens of a ``prompt_tokens``-token prompt an offload tier holds: its full chunks."""
    return int(max(0.0, prompt_tokens) // chunk_tokens) * chunk_tokens
