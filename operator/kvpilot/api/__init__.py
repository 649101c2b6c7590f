"""The VLLMServer API: spec/status models, defaults, validation and CRD generation.

Public surface (see docs/architecture.md):

- :class:`VLLMServerSpec`, :class:`VLLMServerStatus` (pydantic v2, camelCase aliases);
- :func:`parse_spec` (spec dict -> model) and :func:`parse_resource` (whole object), both raising
  :class:`SpecError` with the camelCase field path;
- :func:`spec_hash`; constants ``GROUP``, ``VERSION``, ``API_VERSION``, ``KIND``, ``PLURAL``;
- :func:`kvpilot.api.crd.crd_manifest` (imported lazily: ``python -m kvpilot.api.crd``).
"""

from kvpilot.api.constants import API_VERSION, CRD_NAME, GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION
from kvpilot.api.errors import SpecError
from kvpilot.api.models import (
    DEFAULT_IMAGE,
    KV_CACHE_DTYPES,
    PHASES,
    VLLM_PORT,
    Condition,
    EngineSpec,
    KVOffloadSpec,
    VLLMServerSpec,
    VLLMServerStatus,
)
from kvpilot.api.rules import check_server_name
from kvpilot.api.validation import parse_resource, parse_spec, spec_hash

__all__ = [
    "API_VERSION",
    "CRD_NAME",
    "GROUP",
    "KIND",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "VERSION",
    "SpecError",
    "DEFAULT_IMAGE",
    "KV_CACHE_DTYPES",
    "PHASES",
    "VLLM_PORT",
    "Condition",
    "EngineSpec",
    "KVOffloadSpec",
    "VLLMServerSpec",
    "VLLMServerStatus",
    "check_server_name",
    "parse_resource",
    "parse_spec",
    "spec_hash",
]
