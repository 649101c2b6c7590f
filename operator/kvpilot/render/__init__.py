"""spec -> Pod and Service (pure; Jinja2 templates shipped as package data).

Public surface: :func:`render_objects`, :func:`pod_name`, :func:`vllm_command`, :func:`managed_labels`,
:func:`render_pod`, :func:`render_service`, and the label/annotation constants.
"""

from kvpilot.render.renderer import (
    ANNOTATION_MODEL,
    ANNOTATION_SPEC_HASH,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_SERVER,
    container_resources,
    managed_labels,
    owner_references,
    pod_name,
    render_objects,
    render_pod,
    render_service,
    vllm_command,
)

__all__ = [
    "ANNOTATION_MODEL",
    "ANNOTATION_SPEC_HASH",
    "LABEL_INSTANCE",
    "LABEL_MANAGED_BY",
    "LABEL_NAME",
    "LABEL_SERVER",
    "container_resources",
    "managed_labels",
    "owner_references",
    "pod_name",
    "render_objects",
    "render_pod",
    "render_service",
    "vllm_command",
]
