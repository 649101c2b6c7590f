"""vLLM's own interfaces, read the way vLLM writes them (pure: no I/O).

- :mod:`kvpilot.vllm.args` — a ``vllm serve`` command line as vLLM's argument parser reads it
  (the engine model's flags, the diagnoser's limits from a pod's command);
- :mod:`kvpilot.vllm.startup_log` — the limits and KV capacity vLLM prints while it starts
  (the operator's ``kvCacheTokens``, the diagnoser's limits from a pod's log).

Below both the engine model and the diagnoser, which use it without depending on each other.
"""
