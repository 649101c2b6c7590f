"""The one number formatter of the product: every figure kvpilot prints goes through here.

Rules (docs/diagnosis.md, "Numbers"):

- thousands separators (``14,240``), a fixed number of decimals rounded half-even on the exact
  binary value (Python's ``format`` mini-language, the same rounding as :func:`round`);
- ``trim=True`` drops trailing zeros of the *fraction only* (``2.50`` -> ``2.5``, ``3.00`` -> ``3``),
  never digits of the integer part;
- a unit follows after a space (``12.5 s``, ``4.00 GiB``, ``12.3 %``); a multiple is written with
  its ``x`` glued on (``6.1x``), as vLLM's own log does ("Maximum concurrency ... 2.56x");
- ``None``, NaN and -inf print as :data:`UNKNOWN`, +inf as :data:`UNBOUNDED`: no ``None``,
  ``nan`` or Python repr ever reaches a user;
- ``-0`` prints as ``0``.

:func:`parse` reads such text back (the property test proves ``parse(number(x, d)) == round(x, d)``).
Pure functions, no I/O.
"""

from __future__ import annotations

import math
import re
from typing import TypeGuard

#: printed for a value that is not known (None, NaN, -inf)
UNKNOWN = "unknown"

#: printed for +inf (a limit that does not bind: "no limit")
UNBOUNDED = "unbounded"

GIB = 2**30


#: The largest finite float (``sys.float_info.max``).
_FLOAT_MAX = 1.7976931348623157e308


def _finite(value: float | int | None) -> TypeGuard[float | int]:
    # an int is finite however large (math.isfinite would convert it to a float: OverflowError past ~1e308)
    return value is not None and not isinstance(value, bool) and (isinstance(value, int) or math.isfinite(value))


def number(
    value: float | int | None,
    decimals: int = 0,
    unit: str = "",
    *,
    trim: bool = False,
    grouping: bool = True,
) -> str:
    """``value`` with ``decimals`` fixed decimals, thousands separators and an optional unit.

    ``trim`` drops trailing zeros of the fraction (and the point when nothing is left);
    ``grouping=False`` omits the thousands separators (for values a user types back as a flag).
    Non-finite or missing values print :data:`UNKNOWN`.
    """
    if decimals < 0:
        raise ValueError(f"decimals must be >= 0, got {decimals}")
    if not _finite(value):
        return UNBOUNDED if value == math.inf else UNKNOWN
    sep = "," if grouping else ""
    if isinstance(value, int) and (decimals == 0 or trim or abs(value) > _FLOAT_MAX):
        # an int has no fraction to show (a float of one past ~1.8e308 would be an OverflowError)
        text = f"{value:{sep}d}" + ("." + "0" * decimals if decimals and not trim else "")
    else:
        text = f"{float(value):{sep}.{decimals}f}"
    if trim and "." in text:
        text = text.rstrip("0").rstrip(".")
    if text.lstrip("-").replace(",", "").replace(".", "").strip("0") == "":
        text = text.lstrip("-")
    return f"{text} {unit}" if unit else text


def fig(value: float | int | None, max_decimals: int = 2, unit: str = "") -> str:
    """``value`` with at most ``max_decimals`` decimals: ``number(value, max_decimals, unit, trim=True)``.

    For evidence prose where whole numbers read as whole (``300 s``, ``4 of 4``) and fractions keep
    what they have (``2.5``, ``0.33``).
    """
    return number(value, max_decimals, unit, trim=True)


def plain(value: float | int | None, max_decimals: int = 6) -> str:
    """A value a user types back (a flag's value, an option's bound): at most ``max_decimals`` decimals,
    trailing zeros dropped, no thousands separators: ``1000`` -> ``1000``, ``0.90`` -> ``0.9``.
    """
    return number(value, max_decimals, trim=True, grouping=False)


def significant(value: float | int | None, digits: int = 3, unit: str = "", *, max_decimals: int = 6) -> str:
    """``value`` in fixed point with about ``digits`` significant figures, never in scientific notation.

    Whole numbers and values of 10^digits or more print with no decimals (``14,240``); smaller ones
    get the decimals their magnitude needs (``0.0123``, ``2.5``), trailing zeros dropped, at most
    ``max_decimals``.
    """
    if not _finite(value) or value == 0 or isinstance(value, int) or value.is_integer():
        return number(value, 0, unit)
    magnitude = math.floor(math.log10(abs(value)))
    decimals = min(max_decimals, max(0, digits - 1 - magnitude))
    return number(value, decimals, unit, trim=True)


def count(value: float | int | None, unit: str = "") -> str:
    """A whole quantity (tokens, requests, blocks): ``number(value, 0)``."""
    return number(value, 0, unit)


def noun(n: int, singular: str, plural: str | None = None) -> str:
    """The word for ``n`` things: ``singular`` when ``n`` is 1, else ``plural`` (default ``singular + "s"``).

    ``noun(1, "KV head")`` -> ``KV head``; ``noun(2, "uses", "use")`` -> ``use`` (a verb agreeing with ``n``).
    """
    return singular if n == 1 else (plural if plural is not None else singular + "s")


def percent(ratio: float | None, decimals: int = 1) -> str:
    """A ratio 0-1 as a percentage: ``0.1234`` -> ``12.3 %``."""
    return number(None if ratio is None else ratio * 100, decimals, "%")


def times(ratio: float | None, decimals: int = 1) -> str:
    """A multiple, written the usual way with the ``x`` glued on: ``6.1`` -> ``6.1x``."""
    text = number(ratio, decimals)
    return f"{text}x" if _finite(ratio) else text


def gib(n_bytes: float | int | None, decimals: int = 2) -> str:
    """A byte count in GiB (2^30 bytes): ``3221225472`` -> ``3.00 GiB``."""
    return number(None if n_bytes is None else n_bytes / GIB, decimals, "GiB")


_NUMBER = re.compile(r"^\s*(?P<num>-?[0-9][0-9,]*(?:\.[0-9]+)?)(?:\s+(?P<unit>\S+))?\s*$")


def parse(text: str) -> tuple[float, str]:
    """Read back text printed by :func:`number`: ``"14,240.3 s"`` -> ``(14240.3, "s")``.

    Raises ``ValueError`` on text that :func:`number` would not print (misplaced separators,
    ``unknown``, reprs).
    """
    match = _NUMBER.match(text)
    if not match:
        raise ValueError(f"not a printed number: {text!r}")
    digits = match.group("num")
    integer = digits.lstrip("-").split(".")[0]
    if "," in integer and not re.fullmatch(r"[0-9]{1,3}(,[0-9]{3})+", integer):
        raise ValueError(f"misplaced thousands separator: {text!r}")
    return float(digits.replace(",", "")), match.group("unit") or ""
