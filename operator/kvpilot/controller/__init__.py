"""The VLLMServer operator: kopf handlers (thin) over pure decisions.

- :mod:`kvpilot.controller.logic` — pod → phase, status, conditions, pod actions (pure);
- :mod:`kvpilot.controller.vllm_log` — the KV-capacity line of vLLM's startup log (pure);
- :mod:`kvpilot.controller.handlers` — :func:`build_registry` (the kopf handlers),
  :func:`make_settings`;
- :mod:`kvpilot.controller.runner` — cluster configuration and running the operator
  (:func:`load_configuration`, :func:`run_operator`, :class:`OperatorThread`).
"""
