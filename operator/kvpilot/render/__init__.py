"""spec -> Pod and Service (pure; Jinja2 templates shipped as package data).

Public surface: :func:`render_objects` (what the operator creates), :func:`pod_name` and
:func:`vllm_command`; the rest of :mod:`kvpilot.render.renderer` (``render_pod``, ``render_service``,
``managed_labels``, …) is imported from there. Labels and annotations: :mod:`kvpilot.api.constants`.
"""

from kvpilot.render.renderer import pod_name, render_objects, vllm_command

__all__ = ["pod_name", "render_objects", "vllm_command"]
