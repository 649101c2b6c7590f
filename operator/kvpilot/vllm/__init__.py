"""vLLM's own interfaces, read the way vLLM writes them (pure: no I/O).

- :mod:`kvpilot.vllm.args` — a ``vllm serve`` command line as vLLM's argument parser reads it
  (the engine model's flags, the diagnoser's limits from a pod's command);
- :mod:`kvpilot.vllm.startup_log` — the limits and KV capacity vLLM prints while it starts
  (the operator's ``kvCacheTokens``, the diagnoser's limits from a pod's log);
- :mod:`kvpilot.vllm.defaults` — vLLM's defaults and fixed numbers (block size, utilization, the GPU tiers of
  the batch defaults, the null block, the keys of ``max_model_len``), each defined once with its vLLM source.

Below the KV math, the engine model and the diagnoser (it imports only :mod:`kvpilot.text`), which all
derive their vLLM numbers from it.
"""
