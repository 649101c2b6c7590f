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

import re

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
