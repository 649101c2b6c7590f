"""The API server's own checks for what kvpilot copies into a Pod, so render refuses what it would.

Each function returns the list of problems (empty when valid), in the API server's words. Sources:

- ``k8s.io/apimachinery/pkg/util/validation/validation.go``: ``IsQualifiedName`` (an optional
  DNS-1123 subdomain prefix of at most 253 characters, ``/``, and a name of at most 63 characters
  matching ``([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]``), ``IsValidLabelValue`` (at most 63,
  same pattern, may be empty), ``IsDNS1123Label`` (at most 63, ``[a-z0-9]([-a-z0-9]*[a-z0-9])?``);
- ``k8s.io/apimachinery/pkg/api/validation/objectmeta.go``: ``ValidateAnnotations`` (keys are
  qualified names checked in lower case; keys and values together at most
  ``TotalAnnotationSizeLimitB`` = 256 KiB), ``ValidateNamespaceName`` (a DNS-1123 label);
- ``k8s.io/apimachinery/pkg/apis/meta/v1/validation``: ``ValidateLabels`` (qualified-name keys,
  label values), which ``k8s.io/kubernetes/pkg/apis/core/validation`` also applies to
  ``spec.nodeSelector``;
- ``k8s.io/kubernetes/pkg/apis/core/validation/validation.go`` ``ValidateTolerations``: a
  non-empty key is a qualified name; an empty key needs operator ``Exists``; ``tolerationSeconds``
  needs effect ``NoExecute``; with ``Exists`` the value must be empty, with ``Equal`` it is a label
  value; ``tolerationSeconds`` is an int64.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Collection
from decimal import ROUND_UP, Decimal
from importlib import resources
from typing import Any

from kvpilot.api.quantity import parse_quantity

_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: ``TotalAnnotationSizeLimitB`` (objectmeta.go): 256 KiB for all keys and values together.
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * (1 << 10)
INT64_MAX = 2**63 - 1


def qualified_name_errors(key: str) -> list[str]:
    """``IsQualifiedName``: ``[prefix/]name``, prefix a DNS-1123 subdomain (<= 253), name <= 63."""
    parts = key.split("/")
    if len(parts) == 1:
        prefix, name = "", parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
        if len(prefix) > 253:
            return [f"prefix part must be no more than 253 characters (got {len(prefix)})"]
        if not _DNS_SUBDOMAIN_RE.match(prefix):
            return ["prefix part must be a lowercase RFC 1123 subdomain"]
    else:
        return ["a qualified name must consist of an optional DNS subdomain prefix, '/', and a name"]
    if not name:
        return ["name part must be non-empty"]
    if len(name) > 63:
        return [f"name part must be no more than 63 characters (got {len(name)})"]
    if not _NAME_RE.match(name):
        return [
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            "with an alphanumeric character"
        ]
    return []


def label_value_errors(value: str) -> list[str]:
    """``IsValidLabelValue``: empty, or <= 63 of ``A-Za-z0-9-_.`` starting and ending alphanumeric."""
    if len(value) > 63:
        return [f"must be no more than 63 characters (got {len(value)})"]
    if not _LABEL_VALUE_RE.match(value):
        return [
            "a valid label value must be an empty string or consist of alphanumeric characters, '-', '_' "
            "or '.', and must start and end with an alphanumeric character"
        ]
    return []


def labels_errors(labels: dict[str, str]) -> list[tuple[str, str]]:
    """``ValidateLabels``: ``[(key, problem)]`` for every invalid key or value."""
    out = [(k, e) for k in labels for e in qualified_name_errors(k)]
    out += [(k, e) for k, v in labels.items() for e in label_value_errors(v)]
    return out


def annotations_errors(annotations: dict[str, str]) -> list[tuple[str, str]]:
    """``ValidateAnnotations``: qualified-name keys (lower-cased first) and the 256 KiB total."""
    out = [(k, e) for k in annotations for e in qualified_name_errors(k.lower())]
    total = sum(len(k) + len(v) for k, v in annotations.items())
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        out.append(("", f"may not have more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes in total (got {total})"))
    return out


def dns_subdomain_errors(name: str) -> list[str]:
    """``IsDNS1123Subdomain``: at most 253 of ``a-z0-9-.``, dot-separated DNS-1123 labels."""
    if len(name) > 253:
        return [f"must be no more than 253 characters (got {len(name)})"]
    if not _DNS_SUBDOMAIN_RE.match(name):
        return ["a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"]
    return []


def namespace_errors(namespace: str) -> list[str]:
    """``ValidateNamespaceName``: a DNS-1123 label (<= 63 of ``a-z0-9-``, alphanumeric at both ends)."""
    if len(namespace) > 63:
        return [f"must be no more than 63 characters (got {len(namespace)})"]
    if not _DNS_LABEL_RE.match(namespace):
        return ["a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"]
    return []


def toleration_errors(
    key: str | None, operator: str | None, value: str | None, effect: str | None, seconds: int | None
) -> list[tuple[str, str]]:
    """``ValidateTolerations`` for one toleration: ``[(field, problem)]`` (field in camelCase)."""
    out: list[tuple[str, str]] = []
    if key:
        out += [("key", e) for e in qualified_name_errors(key)]
    elif (operator or "Equal") != "Exists":
        out.append(("operator", 'must be Exists when `key` is empty, which means "match all values and all keys"'))
    if seconds is not None:
        if effect != "NoExecute":
            out.append(("effect", "must be 'NoExecute' when `tolerationSeconds` is set"))
        if not -(2**63) <= seconds <= INT64_MAX:
            out.append(("tolerationSeconds", "must fit in a 64-bit integer"))
    if (operator or "Equal") == "Exists":
        if value:
            out.append(("value", "value must be empty when `operator` is 'Exists'"))
    else:
        out += [("value", e) for e in label_value_errors(value or "")]
    return out


# ===================================================================================== affinity
#
# ``spec.affinity`` is copied into the Pod as is, so it gets the API server's checks in two steps:
#
# 1. its shape against the Kubernetes 1.37 OpenAPI ``io.k8s.api.core.v1.Affinity`` and the
#    definitions it references (``kvpilot/data/k8s-affinity-v1.37.json``, extracted from
#    kubernetes-validate 1.37.0's strict schema): unknown fields, wrong types, missing required
#    fields. The fragment uses only ``type``/``properties``/``additionalProperties``/``items``/
#    ``required``/``$ref``/``format: int32``, which the walker below interprets (jsonschema is not
#    a runtime dependency, and its ~80 ms import would add a third to ``kvpilot render``'s start-up);
# 2. the rules of ``validateAffinity`` in ``pkg/apis/core/validation/validation.go`` (kubernetes/
#    kubernetes at commit 000f260, a Kubernetes 1.33+ tree: the MatchLabelKeysInPodAffinity gate,
#    GA in 1.33, still checked) for a Pod create (``AllowInvalidLabelValueIn*`` false):
#    - ``ValidateNodeSelector``: at least one ``nodeSelectorTerms`` entry;
#    - ``ValidateNodeSelectorRequirement``: ``In``/``NotIn`` need values, ``Exists``/``DoesNotExist``
#      forbid them, ``Gt``/``Lt`` need exactly one; any other operator is invalid; the key is a
#      qualified name; the values are label values (not checked in preferred terms, which
#      ``ValidatePreferredSchedulingTerms`` allows to be invalid);
#    - ``ValidateNodeFieldSelectorRequirement`` (``matchFields``): key ``metadata.name``, operator
#      ``In``/``NotIn`` with exactly one value, a DNS-1123 subdomain (a node name);
#    - ``ValidatePreferredSchedulingTerms`` / ``validateWeightedPodAffinityTerms``: weight 1..100;
#    - ``validatePodAffinityTerm``: ``labelSelector`` and ``namespaceSelector`` by
#      ``ValidateLabelSelector`` (apimachinery ``pkg/apis/meta/v1/validation``: matchLabels by
#      ``ValidateLabels``; each expression: In/NotIn need values, Exists/DoesNotExist forbid them, key
#      a qualified name, values label values), each of ``namespaces`` a DNS-1123 label,
#      ``topologyKey`` non-empty and a qualified name, and ``validateMatchLabelKeysAndMismatchLabelKeys``:
#      both lists need a ``labelSelector`` and hold qualified names, no key in both, and no
#      ``matchLabelKeys`` key that is also in the ``labelSelector`` once the API server has merged the
#      pod's own labels into it (``pkg/registry/core/pod/strategy.go`` ``mutatePodAffinity``: a key
#      the pod carries becomes ``key In (value)``, ``mismatchLabelKeys`` ``key NotIn (value)``).
#
# One rule is kvpilot's, not the API server's: a ``Gt``/``Lt`` value must be an integer. The API server
# accepts ``Gt: ["abc"]``, but the scheduler parses the term with ``labels.NewRequirement``
# (apimachinery ``pkg/labels/selector.go``: "for 'Gt', 'Lt' operators, the value must be an integer",
# ``strconv.ParseInt(v, 10, 64)``), fails, and the term never matches any node.
#
# A JSON ``null`` is what the API server decodes it to: the zero value (absent list, empty string).

_NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_INT64_RE = re.compile(r"^[+-]?[0-9]+$")
_PLAIN_KEY_RE = re.compile(r"^[A-Za-z0-9_.\-/]+$")

Problems = list[tuple[str, str]]


def _key(path: str, key: str) -> str:
    """``path.key``, the key JSON-quoted in brackets when it is not plain ASCII (a path stays one line)."""
    return _join(path, key) if _PLAIN_KEY_RE.match(key) else f"{path}[{json.dumps(key)}]"


def _join(path: str, child: str) -> str:
    return f"{path}.{child}" if path else child


@functools.cache
def openapi_fragment(name: str) -> dict[str, Any]:
    """A shipped OpenAPI fragment, ``kvpilot/data/k8s-<name>-v1.37.json``: ``{"root": ..., "kubernetesVersion":
    "1.37", "$defs": {...}}`` (``affinity``: ``io.k8s.api.core.v1.Affinity``; ``envvarsource``:
    ``io.k8s.api.core.v1.EnvVarSource``; written by ``python -m tests.support.k8s_schema``).
    """
    text = resources.files("kvpilot").joinpath(f"data/k8s-{name}-v1.37.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def affinity_schema() -> dict[str, Any]:
    """The shipped OpenAPI fragment of ``io.k8s.api.core.v1.Affinity``."""
    return openapi_fragment("affinity")


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def shape_errors(value: object, schema: dict[str, Any], defs: dict[str, Any], path: str) -> Problems:  # noqa: C901
    """``value`` against an OpenAPI fragment of the subset above: ``[(path, problem)]``, first problems first."""
    ref = schema.get("$ref")
    if ref is not None:
        schema = defs[ref.rsplit("/", 1)[-1]]
    if "oneOf" in schema:  # a Quantity: a string or a number (the branches are bare types)
        branches: list[dict[str, Any]] = schema["oneOf"]
        if any(not shape_errors(value, b, defs, path) for b in branches):
            return []
        allowed = [t for b in branches for t in ([b["type"]] if isinstance(b["type"], str) else b["type"])]
    else:
        allowed = schema.get("type", [])
        allowed = [allowed] if isinstance(allowed, str) else allowed
    if value is None:
        return [] if "null" in allowed or not allowed else [(path, "must not be null")]
    kind = _json_type(value)
    if allowed and kind not in allowed and not (kind == "integer" and "number" in allowed):
        want = " or ".join(dict.fromkeys(t for t in allowed if t != "null"))
        return [(path, f"must be of type {want} (got {kind})")]
    if isinstance(value, int) and schema.get("format") == "int32" and not -(2**31) <= value < 2**31:
        return [(path, "must fit in a 32-bit integer")]
    out: Problems = []
    if isinstance(value, dict):
        props: dict[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            if k in props:
                out += shape_errors(v, props[k], defs, _join(path, k))
            elif extra is False:
                out.append((_key(path, k), f"unknown field {json.dumps(k)}"))
            elif isinstance(extra, dict):
                out += shape_errors(v, extra, defs, _key(path, k))
        out += [(_join(path, r), "required field is missing") for r in schema.get("required", []) if r not in value]
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            out += shape_errors(item, schema["items"], defs, f"{path}[{i}]")
    return out


def _list(obj: dict[str, Any], name: str) -> list[Any]:
    return obj.get(name) or []


def _str(obj: dict[str, Any], name: str) -> str:
    return obj.get(name) or ""


def _values(req: dict[str, Any]) -> list[str]:
    return [v or "" for v in _list(req, "values")]


def _node_requirement(req: dict[str, Any], valid_values: bool, path: str) -> Problems:
    """``ValidateNodeSelectorRequirement`` (plus kvpilot's integer ``Gt``/``Lt`` value)."""
    out: Problems = []
    op, values = _str(req, "operator"), _values(req)
    if op in ("In", "NotIn") and not values:
        out.append((f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
    elif op in ("Exists", "DoesNotExist") and values:
        out.append((f"{path}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
    elif op in ("Gt", "Lt"):
        if len(values) != 1:
            out.append((f"{path}.values", "must be specified single value when `operator` is 'Lt' or 'Gt'"))
        elif not _INT64_RE.match(values[0]) or not -(2**63) <= int(values[0]) <= INT64_MAX:
            out.append(
                (
                    f"{path}.values[0]",
                    "must be an integer for 'Gt' and 'Lt' (the scheduler cannot parse it: the term would never match)",
                )
            )
    elif op not in _NODE_OPERATORS:
        out.append(
            (f"{path}.operator", f"{json.dumps(op)}: not a valid selector operator ({', '.join(_NODE_OPERATORS)})")
        )
    out += [(f"{path}.key", e) for e in qualified_name_errors(_str(req, "key"))]
    if valid_values:
        out += [(f"{path}.values[{i}]", e) for i, v in enumerate(values) for e in label_value_errors(v)]
    return out


def _node_field_requirement(req: dict[str, Any], path: str) -> Problems:
    """``ValidateNodeFieldSelectorRequirement``: ``metadata.name In/NotIn (one node name)``."""
    out: Problems = []
    op, values = _str(req, "operator"), _values(req)
    if op in ("In", "NotIn"):
        if len(values) != 1:
            out.append(
                (f"{path}.values", "must be only one value when `operator` is 'In' or 'NotIn' for node field selector")
            )
    else:
        out.append((f"{path}.operator", f"{json.dumps(op)}: not a valid selector operator (In, NotIn)"))
    if _str(req, "key") != "metadata.name":
        out.append((f"{path}.key", f"{json.dumps(_str(req, 'key'))}: not a valid field selector key (metadata.name)"))
    else:
        out += [(f"{path}.values[{i}]", e) for i, v in enumerate(values) for e in dns_subdomain_errors(v)]
    return out


def _node_selector_term(term: dict[str, Any], valid_values: bool, path: str) -> Problems:
    out: Problems = []
    for j, req in enumerate(_list(term, "matchExpressions")):
        out += _node_requirement(req or {}, valid_values, f"{path}.matchExpressions[{j}]")
    for j, req in enumerate(_list(term, "matchFields")):
        out += _node_field_requirement(req or {}, f"{path}.matchFields[{j}]")
    return out


def _weight(term: dict[str, Any], path: str) -> Problems:
    weight = term.get("weight") or 0
    return [] if 1 <= weight <= 100 else [(f"{path}.weight", f"{weight}: must be in the range 1-100")]


def _node_affinity(na: dict[str, Any], path: str) -> Problems:
    out: Problems = []
    required = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None:
        terms_path = f"{path}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        terms = _list(required, "nodeSelectorTerms")
        if not terms:
            out.append((terms_path, "must have at least one node selector term"))
        for i, term in enumerate(terms):
            out += _node_selector_term(term or {}, True, f"{terms_path}[{i}]")
    for i, pref in enumerate(_list(na, "preferredDuringSchedulingIgnoredDuringExecution")):
        where = f"{path}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        out += _weight(pref or {}, where)
        # "we always allow invalid label-value for preferred affinity": values unchecked
        out += _node_selector_term((pref or {}).get("preference") or {}, False, f"{where}.preference")
    return out


def label_selector_errors(selector: dict[str, Any], path: str) -> Problems:
    """``ValidateLabelSelector`` (apimachinery ``pkg/apis/meta/v1/validation``) with invalid values refused."""
    out: Problems = []
    labels = {k: v or "" for k, v in (selector.get("matchLabels") or {}).items()}
    out += [(_key(f"{path}.matchLabels", k), e) for k, e in labels_errors(labels)]
    for i, req in enumerate(_list(selector, "matchExpressions")):
        where, req = f"{path}.matchExpressions[{i}]", req or {}
        op, values = _str(req, "operator"), _values(req)
        if op in ("In", "NotIn"):
            if not values:
                out.append((f"{where}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist"):
            if values:
                out.append((f"{where}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
        else:
            out.append(
                (
                    f"{where}.operator",
                    f"{json.dumps(op)}: not a valid selector operator (In, NotIn, Exists, DoesNotExist)",
                )
            )
        out += [(f"{where}.key", e) for e in qualified_name_errors(_str(req, "key"))]
        out += [(f"{where}.values[{j}]", e) for j, v in enumerate(values) for e in label_value_errors(v)]
    return out


def _label_keys(term: dict[str, Any], pod_label_keys: Collection[str], path: str) -> Problems:
    """``validateMatchLabelKeysAndMismatchLabelKeys`` after ``mutatePodAffinity``'s merge."""
    out: Problems = []
    selector = term.get("labelSelector")
    match = [k or "" for k in _list(term, "matchLabelKeys")]
    mismatch = [k or "" for k in _list(term, "mismatchLabelKeys")]
    for name, keys in (("matchLabelKeys", match), ("mismatchLabelKeys", mismatch)):
        if keys and selector is None:
            out.append((f"{path}.{name}", "must not be specified when labelSelector is not set"))
        elif keys:
            out += [(f"{path}.{name}[{i}]", e) for i, k in enumerate(keys) for e in qualified_name_errors(k)]
    if selector is not None:
        index = {k: i for i, k in enumerate(match)}
        seen = set((selector.get("matchLabels") or {}).keys())
        merged = [_str(r or {}, "key") for r in _list(selector, "matchExpressions")]
        merged += [k for k in match + mismatch if k in pod_label_keys]  # the API server's merge, in its order
        for key in merged:
            if key in index and key in seen:
                out.append(
                    (f"{path}.matchLabelKeys[{index[key]}]", f"{key!r} exists in both matchLabelKeys and labelSelector")
                )
            seen.add(key)
    mismatch_set = set(mismatch)
    out += [
        (f"{path}.matchLabelKeys[{i}]", f"{k!r} exists in both matchLabelKeys and mismatchLabelKeys")
        for i, k in enumerate(match)
        if k in mismatch_set
    ]
    return out


def _pod_affinity_term(term: dict[str, Any], pod_label_keys: Collection[str], path: str) -> Problems:
    out: Problems = []
    for name in ("labelSelector", "namespaceSelector"):
        if term.get(name) is not None:
            out += label_selector_errors(term[name], f"{path}.{name}")
    for i, ns in enumerate(_list(term, "namespaces")):
        out += [(f"{path}.namespaces[{i}]", e) for e in namespace_errors(ns or "")]
    out += _label_keys(term, pod_label_keys, path)
    topology = _str(term, "topologyKey")
    if not topology:
        out.append((f"{path}.topologyKey", "can not be empty"))
    else:
        out += [(f"{path}.topologyKey", e) for e in qualified_name_errors(topology)]
    return out


def _pod_affinity(pa: dict[str, Any], pod_label_keys: Collection[str], path: str) -> Problems:
    out: Problems = []
    for i, term in enumerate(_list(pa, "requiredDuringSchedulingIgnoredDuringExecution")):
        out += _pod_affinity_term(
            term or {}, pod_label_keys, f"{path}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"
        )
    for i, weighted in enumerate(_list(pa, "preferredDuringSchedulingIgnoredDuringExecution")):
        where = f"{path}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        out += _weight(weighted or {}, where)
        out += _pod_affinity_term(
            (weighted or {}).get("podAffinityTerm") or {}, pod_label_keys, f"{where}.podAffinityTerm"
        )
    return out


def affinity_errors(affinity: object, pod_label_keys: Collection[str] = ()) -> Problems:
    """``spec.affinity`` as the API server checks a Pod's ``spec.affinity`` on create (see above).

    Args:
        affinity: the affinity as given (decoded JSON/YAML).
        pod_label_keys: keys of the labels the Pod will carry (for the matchLabelKeys merge).

    Returns:
        ``[(path, problem)]``, ``path`` relative to the affinity (``nodeAffinity.….values[0]``); the
        shape's problems alone when there are any, else the rules'.
    """
    schema = affinity_schema()
    shape = shape_errors(affinity, {"$ref": schema["root"]}, schema["$defs"], "")
    if shape or not isinstance(affinity, dict):
        return shape
    out: Problems = []
    if affinity.get("nodeAffinity") is not None:
        out += _node_affinity(affinity["nodeAffinity"], "nodeAffinity")
    for name in ("podAffinity", "podAntiAffinity"):
        if affinity.get(name) is not None:
            out += _pod_affinity(affinity[name], pod_label_keys, name)
    return out


# ===================================================================================== env valueFrom
#
# ``spec.env[].valueFrom`` is copied into the Pod's container as is, so it gets the API server's checks
# in two steps, as ``spec.affinity`` does:
#
# 1. its shape against the Kubernetes 1.37 OpenAPI ``io.k8s.api.core.v1.EnvVarSource`` and the
#    selectors it references (``kvpilot/data/k8s-envvarsource-v1.37.json``, from kubernetes-validate
#    1.37.0's strict schema): unknown fields, wrong types (``fieldRef: "1e-9999"``), the required
#    ``fieldRef.fieldPath``, ``resourceFieldRef.resource``, ``configMapKeyRef.key``/``secretKeyRef.key``;
# 2. ``validateEnvVarValueFrom`` in ``pkg/apis/core/validation/validation.go`` (kubernetes/kubernetes at
#    commit 000f260) for a Pod create:
#    - exactly one of ``fieldRef``, ``resourceFieldRef``, ``configMapKeyRef``, ``secretKeyRef`` (a JSON
#      null is unset), and none when ``value`` is not empty;
#    - ``fieldRef`` (``validateObjectFieldSelector``): ``apiVersion`` defaults to ``v1``
#      (``SetDefaults_ObjectFieldSelector``) and must be ``v1``; ``fieldPath`` is non-empty and converts
#      (``pkg/apis/core/pods/helpers.go`` ``ConvertDownwardAPIFieldLabel``: a subscript only on
#      ``metadata.labels``/``metadata.annotations``, ``spec.host`` read as ``spec.nodeName``, other labels
#      from its list), then is one of ``validEnvDownwardAPIFieldPathExpressions`` or a subscripted
#      ``metadata.labels['<qualified name>']`` / ``metadata.annotations['<qualified name, lower-cased>']``
#      (``pkg/fieldpath`` ``SplitMaybeSubscriptedPath``);
#    - ``resourceFieldRef`` (``validateContainerResourceFieldSelector``, ``validateContainerResourceDivisor``):
#      ``resource`` one of ``limits.cpu``, ``limits.memory``, ``limits.ephemeral-storage`` and their
#      ``requests.`` twins, or a ``requests.hugepages-``/``limits.hugepages-`` prefix; a non-zero
#      ``divisor`` whose canonical form (``Quantity.String()``) is ``1m`` or ``1`` for cpu, and ``1``,
#      ``1k`` … ``1E`` or ``1Ki`` … ``1Ei`` for memory, ephemeral storage and huge pages;
#    - ``configMapKeyRef``/``secretKeyRef`` (``validateConfigMapKeySelector``/``validateSecretKeySelector``):
#      ``name`` a DNS-1123 subdomain (so never empty), ``key`` non-empty and a config key
#      (apimachinery ``IsConfigMapKey``: at most 253 of ``-._a-zA-Z0-9``, not ``.``, ``..`` or ``..…``).
#
# Two rules are kvpilot's, not the API server's, each because the pod could not start:
# ``resourceFieldRef.containerName`` must be empty or the pod's one container (the kubelet resolves any
# other name to "container not found" and the container never starts, ``pkg/kubelet/kubelet_pods.go``);
# and ``fileKeyRef`` (the EnvFiles feature, alpha in Kubernetes 1.34) is refused: its file must be
# written into an emptyDir volume by an init container, and a kvpilot pod has neither.

#: ``validEnvDownwardAPIFieldPathExpressions`` (validation.go at 000f260).
ENV_FIELD_PATHS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
)
#: The labels ``ConvertDownwardAPIFieldLabel`` converts (``spec.host`` aside, read as ``spec.nodeName``).
_CONVERTIBLE_FIELD_LABELS = (
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.serviceAccountName",
    "spec.schedulerName",
    "status.phase",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
)
#: ``validContainerResourceFieldPathExpressions`` and the huge-page prefixes.
ENV_RESOURCES = (
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
)
_HUGEPAGES_PREFIXES = ("limits.hugepages-", "requests.hugepages-")
_CPU_DIVISORS: tuple[str, ...] = ("1m", "1")
_BYTE_DIVISORS: tuple[str, ...] = ("1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei")
_ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")
_CONFIG_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")


def config_key_errors(key: str) -> list[str]:
    """``IsConfigMapKey``: at most 253 of ``-._a-zA-Z0-9``, and not ``.``, ``..`` or starting with ``..``."""
    out = []
    if len(key) > 253:
        out.append(f"must be no more than 253 characters (got {len(key)})")
    if not _CONFIG_KEY_RE.match(key):
        out.append("a valid config key must consist of alphanumeric characters, '-', '_' or '.'")
    if key in (".", ".."):
        out.append(f"must not be '{key}'")
    elif key.startswith(".."):
        out.append("must not start with '..'")
    return out


def _split_subscript(field_path: str) -> tuple[str, str] | None:
    """``SplitMaybeSubscriptedPath``: ``metadata.labels['k']`` -> ``("metadata.labels", "k")``, else None."""
    if not field_path.endswith("']"):
        return None
    path, sep, subscript = field_path[: -len("']")].partition("['")
    return (path, subscript) if sep and path else None


def _field_ref_errors(ref: dict[str, Any], path: str) -> Problems:
    """``validateObjectFieldSelector`` with ``validEnvDownwardAPIFieldPathExpressions``."""
    version = ref.get("apiVersion") or "v1"  # SetDefaults_ObjectFieldSelector
    field_path = ref.get("fieldPath") or ""
    if not field_path:
        return [(f"{path}.fieldPath", "required value")]
    if version != "v1":
        return [(f"{path}.fieldPath", f"error converting fieldPath: unsupported pod version: {version}")]
    split = _split_subscript(field_path)
    if split is not None:
        label, subscript = split
        if label not in ("metadata.annotations", "metadata.labels"):
            return [
                (f"{path}.fieldPath", f"error converting fieldPath: field label does not support subscript: {label}")
            ]
        key = subscript.lower() if label == "metadata.annotations" else subscript
        return [(path, f"{json.dumps(subscript)}: {e}") for e in qualified_name_errors(key)]
    if field_path == "spec.host":  # old v1 clients' spelling
        field_path = "spec.nodeName"
    if field_path not in _CONVERTIBLE_FIELD_LABELS:
        return [(f"{path}.fieldPath", f"error converting fieldPath: field label not supported: {field_path}")]
    if field_path not in ENV_FIELD_PATHS:
        supported = ", ".join(json.dumps(p) for p in sorted(ENV_FIELD_PATHS))
        return [(f"{path}.fieldPath", f"Unsupported value: {json.dumps(field_path)}: supported values: {supported}")]
    return []


def canonical_unit_quantity(text: str) -> str | None:
    """The canonical form (``Quantity.String()``) of quantity ``text`` when it is ``1`` with a suffix (``1m``,
    ``1``, ``1k`` … ``1E``, ``1Ki`` … ``1Ei``), else None (its canonical form is something else).

    apimachinery ``resource.ParseQuantity`` keeps the format of the suffix (binary ``Ki``…, decimal SI, or a
    decimal exponent ``e3``) and rounds a value up to a multiple of 10^-9; ``CanonicalizeBytes`` writes a
    binary value as decimal SI when it is below 1024 in magnitude or not whole, a decimal SI value as a
    mantissa with an exponent that is a multiple of 3 (``1000`` is ``1k``, ``1024`` stays ``1024``), and a
    decimal exponent the same way with ``e<n>`` (so only the value 1 is ``1`` there: ``1e3`` stays ``1e3``).

    Raises:
        ValueError: ``text`` is not a quantity (:func:`kvpilot.api.quantity.parse_quantity`).
    """
    value = parse_quantity(text).quantize(Decimal("1e-9"), rounding=ROUND_UP)
    suffix = text.strip().lstrip("+-").lstrip("0123456789.")
    if suffix.endswith("i") and abs(value) >= 1024 and value == value.to_integral_value():
        return _BINARY_UNITS.get(value)
    if re.match(r"^[eE][+-]?[0-9.]", suffix):  # a decimal exponent (``E`` alone is exa, decimal SI)
        return "1" if value == 1 else None
    return _DECIMAL_UNITS.get(value)


_BINARY_UNITS = {Decimal(1024) ** k: f"1{s}i" for k, s in enumerate("KMGTPE", start=1)}
_DECIMAL_UNITS = {
    Decimal(1000) ** k: f"1{s}" for k, s in enumerate(["n", "u", "m", "", "k", "M", "G", "T", "P", "E"], -3)
}


def _divisor_errors(resource: str, divisor: object, path: str) -> Problems:
    """``validateContainerResourceDivisor``: a zero (unset) divisor is fine, else its canonical form is checked."""
    if divisor is None:
        return []
    text = json.dumps(divisor) if isinstance(divisor, (int, float)) else str(divisor)  # as a JSON body carries it
    try:
        if parse_quantity(text) == 0:
            return []
        canonical = canonical_unit_quantity(text)
    except ValueError as exc:
        return [(path, str(exc))]
    if resource in ("limits.cpu", "requests.cpu"):
        allowed, what = _CPU_DIVISORS, "cpu"
    elif resource in ("limits.memory", "requests.memory"):
        allowed, what = _BYTE_DIVISORS, "memory"
    elif resource in ("limits.ephemeral-storage", "requests.ephemeral-storage"):
        allowed, what = _BYTE_DIVISORS, "local ephemeral storage"
    elif resource.startswith(_HUGEPAGES_PREFIXES):
        allowed, what = _BYTE_DIVISORS, "hugepages"
    else:
        return []
    if canonical in allowed:
        return []
    values = "1m and 1" if what == "cpu" else ", ".join(allowed)
    return [(path, f"{json.dumps(text)}: only divisor's values {values} are supported with the {what} resource")]


def _resource_field_ref_errors(ref: dict[str, Any], containers: Collection[str], path: str) -> Problems:
    """``validateContainerResourceFieldSelector`` and ``validateContainerResourceDivisor``; kvpilot's container rule."""
    out: Problems = []
    resource = ref.get("resource") or ""
    if not resource:
        out.append((f"{path}.resource", "required value"))
    elif resource not in ENV_RESOURCES and not resource.startswith(_HUGEPAGES_PREFIXES):
        supported = ", ".join(json.dumps(r) for r in sorted(ENV_RESOURCES))
        out.append((f"{path}.resource", f"Unsupported value: {json.dumps(resource)}: supported values: {supported}"))
    out += _divisor_errors(resource, ref.get("divisor"), f"{path}.divisor")
    container = ref.get("containerName") or ""
    if container and container not in containers:
        out.append(
            (
                f"{path}.containerName",
                f"{json.dumps(container)}: the pod's container is {' or '.join(json.dumps(c) for c in containers)} "
                "(or leave it empty); the kubelet would not find another, and the container would never start",
            )
        )
    return out


def _key_ref_errors(ref: dict[str, Any], path: str) -> Problems:
    """``validateConfigMapKeySelector`` / ``validateSecretKeySelector``."""
    out: Problems = [(f"{path}.name", e) for e in dns_subdomain_errors(ref.get("name") or "")]
    key = ref.get("key") or ""
    if not key:
        out.append((f"{path}.key", "required value"))
    out += [(f"{path}.key", e) for e in config_key_errors(key)] if key else []
    return out


def env_var_source_errors(value_from: object, value: str | None, containers: Collection[str]) -> Problems:
    """``env[].valueFrom`` as the API server checks it on a Pod create, and kvpilot's two rules (see above).

    Args:
        value_from: the ``valueFrom`` as given (decoded JSON/YAML).
        value: the variable's ``value`` (a source is refused beside a non-empty one).
        containers: the names of the pod's containers (``resourceFieldRef.containerName``).

    Returns:
        ``[(path, problem)]``, ``path`` relative to ``valueFrom`` (``""`` for ``valueFrom`` itself,
        ``secretKeyRef.name``); the shape's problems alone when there are any, else the rules'.
    """
    if isinstance(value_from, dict) and value_from.get("fileKeyRef") is not None:
        return [
            (
                "fileKeyRef",
                "not supported: its env file must be written into an emptyDir volume by an init container, "
                "and a kvpilot pod has neither (the EnvFiles feature); use configMapKeyRef or secretKeyRef",
            )
        ]
    schema = openapi_fragment("envvarsource")
    shape = shape_errors(value_from, {"$ref": schema["root"]}, schema["$defs"], "")
    if shape or not isinstance(value_from, dict):
        return shape
    given = [s for s in _ENV_SOURCES if value_from.get(s) is not None]
    if not given:
        return [("", "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`")]
    if value:
        return [("", "may not be specified when `value` is not empty")]
    if len(given) > 1:
        return [("", f"may not have more than one field specified at a time (got {', '.join(given)})")]
    source = given[0]
    ref = value_from[source]
    if source == "fieldRef":
        return _field_ref_errors(ref, source)
    if source == "resourceFieldRef":
        return _resource_field_ref_errors(ref, containers, source)
    return _key_ref_errors(ref, source)
