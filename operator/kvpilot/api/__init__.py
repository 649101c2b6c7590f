"""The VLLMServer API: spec/status models, defaults, validation and CRD generation.

Public surface (see docs/architecture.md):

- :class:`VLLMServerSpec`, :class:`VLLMServerStatus` (pydantic v2, camelCase aliases);
- :func:`parse_spec` (spec dict -> model) and :func:`parse_resource` (whole object), both raising
  :class:`SpecError` with the camelCase field path;
- :func:`spec_hash`; constants ``GROUP``, ``VERSION``, ``API_VERSION``, ``KIND``, ``PLURAL``;
- :func:`kvpilot.api.crd.crd_manifest` (imported lazily: ``python -m kvpilot.api.crd``).

The names are imported on first use (PEP 562 module ``__getattr__``): ``kvpilot.api.constants``
and the other pure modules load without pydantic, whose models cost tens of milliseconds at
import (``kvpilot kv`` needs only :data:`KV_CACHE_DTYPES`; docs/performance.md, "CLI start-up").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers: the same names, explicitly re-exported
    from kvpilot.api.constants import (
        API_VERSION as API_VERSION,
    )
    from kvpilot.api.constants import (
        CRD_NAME as CRD_NAME,
    )
    from kvpilot.api.constants import (
        GROUP as GROUP,
    )
    from kvpilot.api.constants import (
        KIND as KIND,
    )
    from kvpilot.api.constants import (
        KV_CACHE_DTYPES as KV_CACHE_DTYPES,
    )
    from kvpilot.api.constants import (
        PLURAL as PLURAL,
    )
    from kvpilot.api.constants import (
        SHORT_NAMES as SHORT_NAMES,
    )
    from kvpilot.api.constants import (
        SINGULAR as SINGULAR,
    )
    from kvpilot.api.constants import (
        VERSION as VERSION,
    )
    from kvpilot.api.errors import (
        SpecError as SpecError,
    )
    from kvpilot.api.models import (
        DEFAULT_IMAGE as DEFAULT_IMAGE,
    )
    from kvpilot.api.models import (
        PHASES as PHASES,
    )
    from kvpilot.api.models import (
        VLLM_PORT as VLLM_PORT,
    )
    from kvpilot.api.models import (
        Condition as Condition,
    )
    from kvpilot.api.models import (
        EngineSpec as EngineSpec,
    )
    from kvpilot.api.models import (
        KVOffloadSpec as KVOffloadSpec,
    )
    from kvpilot.api.models import (
        VLLMServerSpec as VLLMServerSpec,
    )
    from kvpilot.api.models import (
        VLLMServerStatus as VLLMServerStatus,
    )
    from kvpilot.api.rules import (
        check_server_name as check_server_name,
    )
    from kvpilot.api.validation import (
        parse_resource as parse_resource,
    )
    from kvpilot.api.validation import (
        parse_spec as parse_spec,
    )
    from kvpilot.api.validation import (
        spec_hash as spec_hash,
    )

#: public name -> the module under kvpilot.api that defines it
_SOURCES: dict[str, str] = {
    **dict.fromkeys(
        ("API_VERSION", "CRD_NAME", "GROUP", "KIND", "KV_CACHE_DTYPES", "PLURAL", "SHORT_NAMES", "SINGULAR", "VERSION"),
        "constants",
    ),
    "SpecError": "errors",
    **dict.fromkeys(
        (
            "DEFAULT_IMAGE",
            "PHASES",
            "VLLM_PORT",
            "Condition",
            "EngineSpec",
            "KVOffloadSpec",
            "VLLMServerSpec",
            "VLLMServerStatus",
        ),
        "models",
    ),
    "check_server_name": "rules",
    **dict.fromkeys(("parse_resource", "parse_spec", "spec_hash"), "validation"),
}

__all__ = list(_SOURCES)


def __getattr__(name: str) -> Any:
    """``kvpilot.api.NAME``: imported from its module on first use, then kept as a module attribute."""
    module = _SOURCES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_SOURCES})
