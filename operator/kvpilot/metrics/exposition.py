"""Parse any vLLM ``/metrics`` text into flat samples.

Both wire formats a vLLM server (or a Prometheus federation endpoint) may answer with are
handled by ``prometheus_client``'s own parsers:

- the Prometheus text format 0.0.4 (``text/plain; version=0.0.4``; timestamps in milliseconds),
  parsed with :func:`prometheus_client.parser.text_string_to_metric_families`;
- OpenMetrics 1.0 (``application/openmetrics-text``; ends with ``# EOF``; timestamps in
  seconds), parsed with :func:`prometheus_client.openmetrics.parser.text_string_to_metric_families`.

The format is picked by the ``# EOF`` line (OpenMetrics requires it, 0.0.4 never has it).

Real-world input the strict parsers refuse, and how it is handled (see :func:`parse_exposition`):

- OpenMetrics bodies with several timestamps per histogram series (every recording): in
  ``prometheus_client`` 0.26 the parser's de-duplication of "timestamp truncation" keeps the
  series ids of a histogram group across timestamps, drops the second instant's buckets and then
  raises "+Inf bucket missing"; the line-wise fallback reads them all (its cost a sample:
  docs/performance.md, "diagnose on a large recording").
- OpenMetrics bodies with duplicate series, interleaved series of one family, ``NaN`` in a
  counter, blank lines or trailing text: the OpenMetrics parser raises ``ValueError`` on the
  whole body, so parsing falls back to one line at a time (each sample line parsed alone by the
  same parser); every sample is kept, in input order.
- 0.0.4 bodies with a malformed ``# TYPE``/``# HELP`` line (e.g. a fragment cut inside a comment
  in an issue): the text parser raises on the comment, so the fallback parses each sample line
  alone and ignores unreadable comment lines (they carry no samples).
- Names whose colon was escaped to ``_`` by ``prometheus_client`` >= 0.22 answering an
  OpenMetrics request (``vllm_num_requests_running`` under ``# TYPE vllm:num_requests_running``)
  parse as families of their own; the sample keeps the name as written.
- The 0.0.4 parser renames samples of a ``counter`` declared without ``_total`` (``foo`` becomes
  ``foo_total``); that munging is undone so ``Sample.name`` is always the exposed name.

Pure functions, no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as _om_families
from prometheus_client.parser import text_string_to_metric_families as _text_families

__all__ = ["Sample", "ExpositionError", "parse_exposition", "is_openmetrics", "series_key"]

_EOF_RE = re.compile(r"^# EOF\s*$", re.MULTILINE)
_COUNTER_TYPE_RE = re.compile(r"^#\s*TYPE\s+(\S+)\s+counter\s*$", re.MULTILINE)


def _freeze(labels: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(sorted(labels.items())))


@dataclass(frozen=True)
class Sample:
    """One exposed sample.

    Attributes:
        name: the sample name exactly as exposed (``vllm:num_preemptions_total``,
            ``vllm_num_requests_running``, ``..._bucket``), colon or not.
        labels: label name -> value, read-only (``le`` kept as the string written, e.g. ``"+Inf"``).
        value: the sample value (``nan``/``inf`` allowed).
        timestamp: Unix seconds, or ``None`` when the exposition carried none and no default was given.
    """

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    value: float = 0.0
    timestamp: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", _freeze(self.labels))
        object.__setattr__(self, "value", float(self.value))
        if self.timestamp is not None:
            object.__setattr__(self, "timestamp", float(self.timestamp))

    def __hash__(self) -> int:
        return hash((self.name, tuple(self.labels.items()), self.value, self.timestamp))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sample):
            return NotImplemented
        same_value = self.value == other.value or (math.isnan(self.value) and math.isnan(other.value))
        return (self.name, dict(self.labels), self.timestamp) == (
            other.name,
            dict(other.labels),
            other.timestamp,
        ) and same_value

    @property
    def key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """The series identity: ``(name, sorted label items)``."""
        return series_key(self.name, self.labels)


def series_key(name: str, labels: Mapping[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``(name, sorted label items)``: a hashable series identity."""
    return name, tuple(sorted(labels.items()))


class ExpositionError(ValueError):
    """Input that is not Prometheus text or OpenMetrics, even one line at a time.

    Attributes:
        line_no: 1-based line number of the first unreadable line (0 when the body as a whole is wrong).
        message: what was wrong, with the offending text.
    """

    def __init__(self, line_no: int, message: str):
        super().__init__(f"line {line_no}: {message}")
        self.line_no = line_no
        self.message = message


def is_openmetrics(text: str) -> bool:
    """True when ``text`` is OpenMetrics (it has a ``# EOF`` line, which 0.0.4 never has)."""
    return bool(_EOF_RE.search(text))


def _to_seconds(ts: Any) -> float | None:
    return None if ts is None else float(ts)


def _samples_from_families(
    families: Iterable[Metric], openmetrics: bool, counters_without_total: set[str], default_timestamp: float | None
) -> list[Sample]:
    out: list[Sample] = []
    for family in families:
        munged = not openmetrics and family.type == "counter" and family.name in counters_without_total
        for s in family.samples:
            name = s.name
            if munged and name == family.name + "_total":
                name = family.name
            ts = _to_seconds(s.timestamp)
            try:
                out.append(Sample(name, s.labels, s.value, default_timestamp if ts is None else ts))
            except OverflowError:  # a 400-digit integer: outside float64, as Prometheus' own parser refuses
                raise ExpositionError(0, f"sample {name}: value outside the float64 range") from None
    return out


def _parse_linewise(text: str, openmetrics: bool, default_timestamp: float | None) -> list[Sample]:
    """Parse each sample line on its own with the format's ``prometheus_client`` parser."""
    out: list[Sample] = []
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            families = list(_om_families(line + "\n# EOF\n")) if openmetrics else list(_text_families(line + "\n"))
        except ValueError as exc:  # prometheus_client raises ValueError (sometimes without a message)
            raise ExpositionError(line_no, f"unreadable sample line {line[:120]!r} ({exc or 'syntax'})") from None
        out.extend(_samples_from_families(families, openmetrics, set(), default_timestamp))
    return out


def parse_exposition(text: str, default_timestamp: float | None = None) -> list[Sample]:
    """Parse a ``/metrics`` body (Prometheus text 0.0.4 or OpenMetrics 1.0) into samples.

    Args:
        text: the body. OpenMetrics is detected by its ``# EOF`` line.
        default_timestamp: Unix seconds given to samples that carry no timestamp (e.g. the scrape
            time); ``None`` leaves them without one.

    Returns:
        every sample in input order, names as exposed (colon or escaped ``_``; suffixes
        ``_total``/``_bucket``/``_sum``/``_count``/``_created`` kept). Duplicate series are kept
        as they appear; ``NaN``/``+Inf`` values are floats. Timestamps are Unix seconds (0.0.4
        milliseconds are converted by the parser).

    Raises:
        ExpositionError: a sample line that neither the whole-body parse nor the line-wise
            fallback can read (e.g. a line cut inside its label set), with its 1-based number.

    Source: format rules from the Prometheus exposition-format docs (0.0.4) and the OpenMetrics
    1.0 spec; the tolerance cases from real vLLM captures (tests/fixtures/metrics/).
    """
    if not isinstance(text, str):
        raise ExpositionError(0, f"expected text, got {type(text).__name__}")
    eof = _EOF_RE.search(text)
    if eof is not None:  # OpenMetrics: nothing after "# EOF" is part of the exposition
        text = text[: eof.end()] + "\n"
    openmetrics = eof is not None
    counters_without_total = {n for n in _COUNTER_TYPE_RE.findall(text) if not n.endswith("_total")}
    try:
        families = list(_om_families(text) if openmetrics else _text_families(text))
    except ValueError:
        # The strict parser rejected the body as a whole (see module docstring): retry line by line.
        return _parse_linewise(text, openmetrics, default_timestamp)
    return _samples_from_families(families, openmetrics, counters_without_total, default_timestamp)
