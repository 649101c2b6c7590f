"""Pure pieces of Kubernetes API-server behaviour the sandbox needs (no I/O).

Each function mirrors one documented behaviour of a real API server, so the emulator in
:mod:`kvpilot.sandbox.emulator` stays a thin layer of plumbing:

- :func:`parse_api_path` — URL → (group, version, plural, namespace, name, subresource),
  including the cluster-scoped ``/api/v1/namespaces`` and ``/api/v1/namespaces/NAME`` themselves;
- :func:`parse_label_selector` / :func:`match_labels` and :func:`parse_field_selector` /
  :func:`match_fields` — the selector grammar of ``k8s.io/apimachinery/pkg/labels`` and
  ``pkg/fields`` (equality ``=``/``==``/``!=``, set-based ``in``/``notin``/``key``/``!key``);
- :func:`validate_metadata` — name, label key and label value grammar of apimachinery's
  ``validation.IsDNS1123Subdomain``, ``IsQualifiedName`` and ``IsValidLabelValue``;
- :func:`clone` — a deep copy of JSON-shaped objects (every stored and served object is one);
- :func:`merge_patch` — RFC 7386 JSON merge patch (``application/merge-patch+json``);
- :func:`prune` — structural-schema pruning of unknown fields (Kubernetes docs, "Field pruning"
  in *Extend the Kubernetes API with CustomResourceDefinitions*);
- :func:`schema_errors` — validation of a custom resource against its CRD's OpenAPI v3 schema
  (the same docs, "Validation"), with jsonschema's Draft 4 validator (OpenAPI 3.0's dialect:
  boolean ``exclusiveMinimum``).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

from kvpilot.sandbox.objects import JSONSchemaProps, StoredObject

# apimachinery/pkg/util/validation/validation.go
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_RE = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_DNS1035_LABEL_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


@dataclass(frozen=True)
class ApiPath:
    """A parsed Kubernetes API URL path. ``group`` is ``""`` for the core ``/api/v1``."""

    group: str | None = None
    version: str | None = None
    plural: str | None = None
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None

    @property
    def is_resource(self) -> bool:
        """True when the path addresses a resource (collection or object), not discovery."""
        return self.plural is not None


def parse_api_path(path: str) -> ApiPath:
    """Parse an API path such as ``/apis/kvpilot.dev/v1alpha1/namespaces/ns/vllmservers/x/status``.

    Handles the cluster-scoped ``namespaces`` resource itself: ``/api/v1/namespaces`` (list) and
    ``/api/v1/namespaces/NAME[/status|finalize]`` (one namespace), which a parser looking for the
    ``namespaces/NS/`` prefix would take for an incomplete one. Discovery paths (``/api``, ``/apis/g/v``) have
    ``plural=None``; non-API paths return an empty :class:`ApiPath`.
    """
    parts = [p for p in path.strip("/").split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    elif parts and parts[0] in ("api", "apis"):
        return ApiPath(group="" if parts[0] == "api" else (parts[1] if len(parts) > 1 else None))
    else:
        return ApiPath()
    namespace = None
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    plural = rest[0] if rest else None
    name = rest[1] if len(rest) > 1 else None
    subresource = "/".join(rest[2:]) or None
    return ApiPath(group, version, plural, namespace, name, subresource)


# ----------------------------------------------------------------------------- selectors
@dataclass(frozen=True)
class Requirement:
    """One selector requirement: ``key op values`` with op in =, !=, in, notin, exists, !exists."""

    key: str
    op: str
    values: tuple[str, ...] = ()


_SET_RE = re.compile(r"^\s*(!?)\s*([^\s!=,()]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(r"^\s*([^\s!=,()]+)\s*(==|=|!=)\s*([^\s,()]*)\s*$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses (``a in (x,y),b=c`` → two requirements)."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [p for p in (s.strip() for s in out) if p]


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse a label selector (``k8s.io/apimachinery/pkg/labels.Parse`` grammar).

    Examples: ``app=vllm``, ``tier!=web``, ``env in (a,b)``, ``env notin (c)``, ``gpu``, ``!gpu``.

    Raises:
        ValueError: naming the requirement that does not parse.
    """
    reqs: list[Requirement] = []
    for part in _split_top_level(text or ""):
        m = _EQ_RE.match(part)
        if m:
            key, op, value = m.groups()
            reqs.append(Requirement(key, "!=" if op == "!=" else "=", (value,)))
            continue
        m = _SET_RE.match(part)
        if not m:
            raise ValueError(f"unable to parse requirement: {part!r}")
        bang, key, op, values = m.groups()
        if op:
            if bang:
                raise ValueError(f"unable to parse requirement: {part!r}")
            reqs.append(Requirement(key, op, tuple(v.strip() for v in values.split(",") if v.strip())))
        else:
            reqs.append(Requirement(key, "!exists" if bang else "exists"))
    return reqs


def _matches(value: str | None, req: Requirement) -> bool:
    if req.op == "=":
        return value == req.values[0]
    if req.op == "!=":
        return value != req.values[0]
    if req.op == "in":
        return value is not None and value in req.values
    if req.op == "notin":
        return value is None or value not in req.values
    if req.op == "exists":
        return value is not None
    return value is None  # !exists


def match_labels(labels: dict[str, str] | None, requirements: list[Requirement]) -> bool:
    """True when ``labels`` satisfy every requirement (an empty selector matches everything)."""
    labels = labels or {}
    return all(_matches(labels.get(r.key), r) for r in requirements)


def parse_field_selector(text: str | None) -> list[Requirement]:
    """Parse a field selector (``pkg/fields.ParseSelector``: ``a.b=x``, ``a.b==x``, ``a.b!=x``).

    Raises:
        ValueError: naming the requirement that does not parse.
    """
    reqs = []
    for part in _split_top_level(text or ""):
        m = _EQ_RE.match(part)
        if not m:
            raise ValueError(f"invalid field selector: {part!r}")
        key, op, value = m.groups()
        reqs.append(Requirement(key, "!=" if op == "!=" else "=", (value,)))
    return reqs


def field_value(obj: StoredObject, dotted: str) -> str | None:
    """The string value of a dotted field path (``metadata.name``, ``status.phase``) or None."""
    cur: Any = obj
    for key in dotted.split("."):
        if not isinstance(cur, dict) or key not in cur:
            return None
        cur = cur[key]
    return None if cur is None or isinstance(cur, (dict, list)) else str(cur)


def match_fields(obj: StoredObject, requirements: list[Requirement]) -> bool:
    """True when ``obj`` satisfies every field requirement (missing fields compare as ``""``)."""
    return all(_matches(field_value(obj, r.key) or "", r) for r in requirements)


# ----------------------------------------------------------------------------- validation
def validate_metadata(obj: StoredObject, *, dns1035_name: bool = False) -> list[str]:
    """Validate ``metadata.name`` and ``metadata.labels`` as a real API server does.

    Args:
        obj: the object as posted.
        dns1035_name: True for Services, whose names are RFC 1035 labels
            (``ValidateServiceName``); other objects use RFC 1123 subdomains.

    Returns:
        the field errors, each ``"<field>: Invalid value: <value>: <why>"`` (empty when valid).
    """
    errors: list[str] = []
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    if dns1035_name:
        if len(name) > 63 or not _DNS1035_LABEL_RE.match(name):
            errors.append(
                f"metadata.name: Invalid value: {name!r}: a DNS-1035 label must consist of lower case "
                "alphanumeric characters or '-', start with an alphabetic character, and end with an "
                "alphanumeric character"
            )
    elif len(name) > 253 or not _DNS1123_SUBDOMAIN_RE.match(name):
        errors.append(
            f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of "
            "lower case alphanumeric characters, '-' or '.', and must start and end with an "
            "alphanumeric character"
        )
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, short = key.rpartition("/")
        if (
            (prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.match(prefix)))
            or len(short) > 63
            or not _QUALIFIED_NAME_RE.match(short)
        ):
            errors.append(
                f"metadata.labels: Invalid value: {key!r}: name part must consist of alphanumeric "
                "characters, '-', '_' or '.', and must start and end with an alphanumeric character"
            )
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE_RE.match(value):
            errors.append(f"metadata.labels: Invalid value: {value!r}: {LABEL_VALUE_MESSAGE}")
    for i, ref in enumerate(meta.get("ownerReferences") or []):
        for field in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(field):
                errors.append(f'metadata.ownerReferences[{i}].{field}: Invalid value: "": {field} must not be empty')
    return errors


# ----------------------------------------------------------------------------- copying
_T = TypeVar("_T")
_IMMUTABLE = (str, int, float, bool)


def clone(value: _T) -> _T:
    """A deep copy of JSON-shaped data (dicts, lists, strings, numbers, booleans, None): what
    ``copy.deepcopy`` returns for it, without deepcopy's memo (decoded JSON shares no parts and has
    no cycles), so faster (docs/performance.md, "What the code's choices bought"). Any other value is deep-copied.
    """
    kind = type(value)
    if kind is dict:
        return cast(_T, {key: clone(item) for key, item in cast(dict[Any, Any], value).items()})
    if kind is list:
        return cast(_T, [clone(item) for item in cast(list[Any], value)])
    if kind in _IMMUTABLE or value is None:
        return value
    return copy.deepcopy(value)


# ----------------------------------------------------------------------------- patching
def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 JSON merge patch: mappings merge recursively, ``null`` deletes a key,
    anything else (lists included) replaces. Returns a new value; inputs are not modified.
    """
    if not isinstance(patch, dict):
        return clone(patch)
    result = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ----------------------------------------------------------------------------- pruning
def prune(value: Any, schema: JSONSchemaProps | None) -> Any:
    """Drop fields a structural OpenAPI v3 schema does not declare, as the API server does for
    custom resources (``properties``, ``items``, ``additionalProperties``, and
    ``x-kubernetes-preserve-unknown-fields: true`` which keeps everything below it).

    ``schema=None`` keeps the value as is. Returns a new value.
    """
    if schema is None or schema.get("x-kubernetes-preserve-unknown-fields"):
        return clone(value)
    if isinstance(value, dict):
        props = schema.get("properties")
        additional = schema.get("additionalProperties")
        if props is None and additional is None:
            return {} if schema.get("type") == "object" else clone(value)
        out = {}
        for key, item in value.items():
            if props is not None and key in props:
                out[key] = prune(item, props[key])
            elif isinstance(additional, dict):
                out[key] = prune(item, additional)
            elif additional is True:
                out[key] = clone(item)
        return out
    if isinstance(value, list):
        return [prune(item, schema.get("items")) for item in value]
    return value


# ----------------------------------------------------------------------------- validation by schema
#: ``id(schema) -> (schema, validator)``: one jsonschema validator per CRD schema part, built on
#: first use (building one per request cost about a quarter of each custom-resource write).
_VALIDATORS: dict[int, tuple[JSONSchemaProps, Any]] = {}


def _validator(cls: Any, schema: JSONSchemaProps) -> Any:
    """``cls(schema)``, cached while ``schema`` (the same object: a CRD's registered schema) lives."""
    cached = _VALIDATORS.get(id(schema))
    if cached is None or cached[0] is not schema:
        cached = _VALIDATORS[id(schema)] = (schema, cls(schema))
    return cached[1]


#: The parts of an object a CRD's schema prunes and validates (the API server manages ``metadata`` itself).
SCHEMA_PARTS: tuple[Literal["spec", "status"], ...] = ("spec", "status")


def schema_errors(obj: StoredObject, schema: JSONSchemaProps | None) -> list[str]:
    """Errors of ``obj`` against a CRD's ``openAPIV3Schema``, as ``"<path>: Invalid value: <v>: <why>"``.

    Only ``spec`` and ``status`` are checked (the API server validates ``metadata`` itself).
    Returns [] without a schema, or when jsonschema is not installed (it is a test dependency;
    the sandbox then prunes but does not validate).
    """
    if not schema:
        return []
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - depends on the installed extras
        return []
    props = schema.get("properties") or {}
    errors = []
    for part in SCHEMA_PARTS:
        if part not in obj or part not in props:
            continue
        validator = _validator(jsonschema.Draft4Validator, props[part])
        for error in sorted(validator.iter_errors(obj[part]), key=lambda e: list(e.absolute_path)):
            path = ".".join([part, *(str(p) for p in error.absolute_path)])
            errors.append(f"{path}: Invalid value: {json.dumps(error.instance)[:80]}: {error.message[:200]}")
    return errors
