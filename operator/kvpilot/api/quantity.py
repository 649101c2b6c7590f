"""Kubernetes resource quantities: validation, parsing to bytes, formatting.

Source: the grammar of ``k8s.io/apimachinery/pkg/api/resource.Quantity`` (the ``pattern`` of the
``Quantity`` type in Kubernetes' OpenAPI): a decimal number followed by a binary SI suffix
(``Ki Mi Gi Ti Pi Ei``, powers of 2), a decimal SI suffix (``n u m k M G T P E``, powers of 10)
or a decimal exponent (``e3``).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

#: Kubernetes' own Quantity pattern (apimachinery), used verbatim in the CRD.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)
#: The largest magnitude a Quantity may represent: 2^63-1 (apimachinery resource.Quantity: "No matter
#: which of the three exponent forms is used, no quantity may represent a number greater than
#: 2^63-1 in magnitude"; the API server caps larger values, kvpilot refuses them).
MAX_QUANTITY = Decimal(2**63 - 1)
_NUMBER_RE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)$")

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}


def is_quantity(text: str) -> bool:
    """True when ``text`` is a Kubernetes quantity (``6Gi``, ``1.5Gi``, ``500m``, ``8``)."""
    return bool(_QUANTITY_RE.match(text))


def parse_quantity(text: str | int) -> Decimal:
    """The value of a Kubernetes quantity as a ``Decimal`` (bytes for memory, cores for cpu).

    Examples: ``"6Gi"`` -> 6442450944, ``"1.5Gi"`` -> 1610612736, ``"500m"`` -> 0.5,
    ``"16G"`` -> 16000000000, ``2`` -> 2.

    Raises:
        ValueError: when ``text`` is not a quantity, or its magnitude exceeds :data:`MAX_QUANTITY`
            (checked before any arithmetic, so ``1e9999999`` is refused, never a ``decimal.Overflow``).
    """
    text = str(text).strip()
    match = _NUMBER_RE.match(text) if is_quantity(text) else None  # a quantity always starts with its number
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity (examples: 6Gi, 1536Mi, 16G, 500m)")
    number, suffix = match.groups()
    try:
        value = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - excluded by the pattern
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from exc
    if suffix in _BINARY:
        result = value * _BINARY[suffix]
    elif suffix in _DECIMAL:
        result = value * _DECIMAL[suffix]
    else:  # exponent form, e.g. 1e3: bound the exponent before computing 10**exponent
        exponent = Decimal(suffix[1:])
        digits = value.adjusted() if value else 0
        if value and digits + exponent > 18:  # 2^63-1 has 19 digits (adjusted exponent 18)
            raise ValueError(f"{text!r} is larger than a Kubernetes quantity may be (2^63-1)")
        if exponent != int(exponent) or exponent < -30:
            raise ValueError(f"{text!r} has an exponent kvpilot does not accept (a whole number >= -30)")
        result = value * (Decimal(10) ** int(exponent))
    if abs(result) > MAX_QUANTITY:
        raise ValueError(f"{text!r} is larger than a Kubernetes quantity may be (2^63-1)")
    return result


def format_bytes_quantity(n_bytes: int | Decimal) -> str:
    """Format a byte count as the shortest exact binary quantity: ``Gi``, ``Mi``, ``Ki`` or bytes.

    Examples: 6442450944 -> ``"6Gi"``, 8053063680 -> ``"7680Mi"``, 1000 -> ``"1000"``.
    A fractional byte count is rounded up to a whole byte (memory is never under-requested).
    """
    n = math.ceil(Decimal(n_bytes))
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def format_gib(n_bytes: int | Decimal) -> str:
    """Bytes as a plain GiB number for flags and env vars measured in GiB: 1610612736 -> ``"1.5"``.

    Rounded to 4 decimals (0.0001 GiB ≈ 107 KB), trailing zeros removed.
    """
    value = (Decimal(n_bytes) / Decimal(2**30)).quantize(Decimal("0.0001"))
    text = format(value.normalize(), "f")
    return text
