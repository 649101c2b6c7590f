"""Turn a VLLMServer body into a validated spec, or a :class:`SpecError` naming the field."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from kvpilot.api import k8s_validation
from kvpilot.api.constants import API_VERSION, KIND
from kvpilot.api.errors import SpecError
from kvpilot.api.models import VLLMServerSpec
from kvpilot.api.rules import check_server_name
from kvpilot.text.documents import DocumentError, check_bounds

__all__ = ["SpecError", "parse_spec", "parse_resource", "spec_hash", "field_path"]


def field_path(loc: tuple[Any, ...], root: str = "spec") -> str:
    """A pydantic error location as a camelCase field path.

    ``('engine', 'maxNumSeqs')`` -> ``spec.engine.maxNumSeqs``; list indexes in brackets:
    ``spec.engine.extraArgs[2]``; map keys after a dot: ``spec.podLabels.team``. (Locations use the
    aliases, which are camelCase.)
    """
    path = root
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _shown(value: Any) -> str:
    """A given value as the error message shows it: JSON for scalars, else its shape."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return json.dumps(value)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"{type(value).__name__} {value}"  # e.g. a YAML date


def _message(error: ErrorDetails) -> str:
    kind, msg, value = error.get("type", ""), error.get("msg", "invalid"), error.get("input")
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind in {"model_type", "model_attributes_type", "dict_type"}:
        return f"must be a mapping (got {_shown(value)})"
    if kind == "value_error":
        return str(msg[len("Value error, ") :] if msg.startswith("Value error, ") else msg)
    return f"{msg} (got {_shown(value)})"


def parse_spec(body: object) -> VLLMServerSpec:
    """Validate a VLLMServer ``spec`` (the dict under ``spec``, camelCase keys) with its defaults.

    Args:
        body: the spec as served or loaded, e.g. kopf's ``spec`` or ``yaml.safe_load(...)["spec"]``
            (anything: what is not a mapping is refused, naming ``spec``).

    Returns:
        the validated :class:`VLLMServerSpec` (defaults applied: ttlSeconds 3600, image, probes …).

    Raises:
        SpecError: the first problem, with the camelCase field path (``spec.engine.maxNumSeqs``)
            and a one-line message; covers the bounds of any document (:func:`kvpilot.text.documents.check_bounds`:
            nesting, integer digits, nodes), types, bounds, enums, unknown fields and the cross-field
            rules of :func:`kvpilot.api.rules.check_cross_field_rules`.
    """
    if body is None:
        raise SpecError("spec", "required field is missing")
    if not isinstance(body, dict):
        raise SpecError("spec", f"must be a mapping, got {type(body).__name__}")
    try:  # depth, integer size, node count: the bounds of every document kvpilot reads
        check_bounds(body, "spec")
    except DocumentError as exc:
        raise SpecError(exc.path, exc.message) from None
    try:
        return VLLMServerSpec.model_validate(dict(body))
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise SpecError(field_path(tuple(first["loc"])), _message(first)) from None


def parse_resource(obj: Any) -> tuple[str, str | None, VLLMServerSpec]:
    """Validate a whole VLLMServer object: ``apiVersion``, ``kind``, ``metadata.name``, ``spec``.

    Returns:
        ``(name, namespace or None, spec)``.

    Raises:
        SpecError: naming ``apiVersion``, ``kind``, ``metadata.name`` or the spec field.
    """
    if not isinstance(obj, dict):
        raise SpecError("(document)", f"a VLLMServer must be a mapping, got {type(obj).__name__}")
    if obj.get("kind") != KIND:
        raise SpecError("kind", f"expected {KIND}, got {obj.get('kind')!r}")
    if obj.get("apiVersion") != API_VERSION:
        raise SpecError("apiVersion", f"expected {API_VERSION}, got {obj.get('apiVersion')!r}")
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        raise SpecError("metadata", "required mapping is missing")
    name = metadata.get("name")
    if name is None:
        raise SpecError("metadata.name", "required field is missing")
    if not isinstance(name, str):
        raise SpecError("metadata.name", f"must be a string (got {_shown(name)})")
    check_server_name(name)
    namespace = metadata.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise SpecError("metadata.namespace", "must be a string")
    for problem in k8s_validation.namespace_errors(namespace) if namespace is not None else []:
        raise SpecError("metadata.namespace", f"{namespace!r}: {problem}")
    return name, namespace, parse_spec(obj.get("spec"))


def spec_hash(spec: VLLMServerSpec) -> str:
    """A short stable hash (16 hex chars of SHA-256) of what a person set in the spec.

    Hashes ``model_dump(by_alias=True, exclude_unset=True)`` with sorted keys, so a changed
    kvpilot default (e.g. the default image) does not replace running pods; only a spec edit
    does. The renderer stores it in the pod annotation ``kvpilot.dev/spec-hash``.
    """
    data = spec.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
