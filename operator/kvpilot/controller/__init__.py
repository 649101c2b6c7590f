"""The VLLMServer operator: kopf handlers (thin) over pure decisions.

- :mod:`kvpilot.controller.logic` — pod → phase, status, conditions, pod actions (pure);
- the KV-capacity line of vLLM's startup log is parsed by :mod:`kvpilot.vllm.startup_log` (pure);
- :mod:`kvpilot.controller.handlers` — :func:`build_registry` (the kopf handlers: read, call
  :mod:`logic`, write);
- :mod:`kvpilot.controller.settings` — kopf's settings (:func:`make_settings`) and its connection
  to the cluster (:func:`connection_info`);
- :mod:`kvpilot.controller.runner` — cluster configuration and running the operator
  (:func:`load_configuration`, :func:`run_operator`, :class:`OperatorThread`).
"""
