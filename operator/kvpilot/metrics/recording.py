"""Recordings: timelines of metrics as OpenMetrics text with timestamps (docs/metrics.md, "Recordings").

A recording is an OpenMetrics 1.0 exposition whose samples carry timestamps (Unix seconds, as
OpenMetrics specifies), several samples per series in time order, ending with ``# EOF``: the
format ``promtool tsdb create-blocks-from openmetrics FILE DIR`` backfills into a Prometheus TSDB.
Example (one gauge, one counter, two instants)::

    # HELP vllm:num_requests_running Number of requests in model execution batches.
    # TYPE vllm:num_requests_running gauge
    vllm:num_requests_running{engine="0",model_name="m"} 3.0 1764500000.0
    vllm:num_requests_running{engine="0",model_name="m"} 4.0 1764500001.0
    # HELP vllm:num_preemptions Cumulative number of preemptions.
    # TYPE vllm:num_preemptions counter
    vllm:num_preemptions_total{engine="0",model_name="m"} 0.0 1764500000.0
    vllm:num_preemptions_total{engine="0",model_name="m"} 2.0 1764500001.0
    # EOF

OpenMetrics requires all samples of one family to be contiguous and each series (a histogram's
buckets, ``_count`` and ``_sum`` together) to be contiguous within it, so :func:`write_recording`
buffers the snapshots and emits family by family, series by series, time by time. Names keep
their colon (``escaping=allow-utf-8``: colons are valid in legacy metric names, so nothing is
quoted or escaped). The text itself is produced by ``prometheus_client``'s OpenMetrics exposition.

``_created`` samples are left out by default: Prometheus 2.42's ``promtool`` stores them as
ordinary series (``..._created``), which only adds noise to a backfilled TSDB; pass
``include_created=True`` to keep them.

Reading is a stream (:class:`RecordingReader`): one line at a time, each line parsed alone by
``prometheus_client``'s OpenMetrics parser, memory independent of the file's size (see the class).

Pure logic: the only I/O is on the file object or path the caller passes.
"""

from __future__ import annotations

import io
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TextIO

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import ALLOWUTF8
from prometheus_client.openmetrics.exposition import generate_latest as _om_generate
from prometheus_client.openmetrics.parser import text_string_to_metric_families as _om_families
from prometheus_client.parser import text_string_to_metric_families as _text_families
from prometheus_client.samples import Sample as _PCSample

from kvpilot.metrics.exposition import ExpositionError, Sample, is_openmetrics
from kvpilot.text.safe import one_line

__all__ = [
    "write_recording",
    "read_recording",
    "recording_text",
    "scrapes_recording_text",
    "RecordingReader",
    "SeriesRef",
    "MAX_LINE_CHARS",
]

Snapshot = tuple[float, Iterable[Metric]]


class _Families:
    """Adapter so ``prometheus_client``'s exposition can render buffered families (it calls ``collect()``)."""

    def __init__(self, families: list[Metric]):
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def _group_key(family: Metric, sample: _PCSample) -> tuple[tuple[str, str], ...]:
    labels = dict(sample.labels)
    if family.type in ("histogram", "gaugehistogram") and sample.name == family.name + "_bucket":
        labels.pop("le", None)
    return tuple(sorted(labels.items()))


def _round_ts(timestamp: float) -> float:
    # Prometheus stores milliseconds; rounding here keeps the text short and the values exact.
    return round(float(timestamp), 3)


def _buffer(snapshots: Iterable[Snapshot], include_created: bool) -> list[Metric]:  # noqa: C901
    """Regroup snapshots into one Metric per family, samples ordered series by series, then by time."""
    meta: dict[str, Metric] = {}
    # family name -> group key -> timestamp -> samples (insertion order kept at every level)
    grouped: dict[str, dict[tuple[tuple[str, str], ...], dict[float, list[_PCSample]]]] = {}
    last_ts: float | None = None
    for timestamp, families in snapshots:
        ts = _round_ts(timestamp)
        if last_ts is not None and ts < last_ts:
            raise ValueError(f"snapshots out of time order: {ts} after {last_ts}")
        last_ts = ts
        for family in families:
            if family.name not in meta:
                meta[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                grouped[family.name] = {}
            groups = grouped[family.name]
            for s in family.samples:
                if not include_created and s.name == family.name + "_created":
                    continue
                at = groups.setdefault(_group_key(family, s), {}).setdefault(ts, [])
                at.append(_PCSample(s.name, dict(s.labels), s.value, ts))
    out: list[Metric] = []
    for name, family in meta.items():
        for by_time in grouped[name].values():
            for samples in by_time.values():
                family.samples.extend(samples)
        if family.samples:
            out.append(family)
    return out


def recording_text(snapshots: Iterable[Snapshot], include_created: bool = False) -> str:
    """The recording for ``snapshots`` as a string; see :func:`write_recording`."""
    families = _buffer(snapshots, include_created)
    text: bytes = _om_generate(_Families(families), escaping=ALLOWUTF8)
    return text.decode("utf-8")


def scrapes_recording_text(scrapes: Iterable[tuple[float, str]]) -> str:
    """The recording of a live server's scrapes: each ``/metrics`` body stamped with its scrape's time.

    Args:
        scrapes: ``(Unix seconds, body)`` in time order; a body is Prometheus text 0.0.4 or OpenMetrics, as
            the server answered it. Families keep their type, help and unit.

    Raises:
        ExpositionError: a body the ``prometheus_client`` parser of its format cannot read whole.
    """

    def families(body: str) -> list[Metric]:
        try:
            return list(_om_families(body) if is_openmetrics(body) else _text_families(body))
        except ValueError as exc:  # prometheus_client raises ValueError (sometimes without a message)
            raise ExpositionError(0, f"a scrape the recording cannot hold ({exc or 'syntax'})") from None

    return recording_text((ts, families(body)) for ts, body in scrapes)


def write_recording(
    snapshots: Iterable[Snapshot], fp: TextIO | str | os.PathLike[str], include_created: bool = False
) -> int:
    """Write a recording (OpenMetrics with timestamps, ending ``# EOF``).

    Args:
        snapshots: ``(timestamp, families)`` pairs in non-decreasing time order; ``timestamp`` in
            Unix seconds (rounded to milliseconds, Prometheus's resolution); ``families`` the
            output of ``CollectorRegistry.collect()`` at that instant (``prometheus_client``
            ``Metric`` objects: counters with ``_total`` samples, histograms with
            ``_bucket``/``_count``/``_sum``, gauges, info).
        fp: a text file object, or a path to create.
        include_created: keep ``_created`` samples (default False; see the module docstring).

    Returns:
        the number of sample lines written.

    Raises:
        ValueError: snapshots out of time order.

    Source: OpenMetrics 1.0 spec (timestamps in seconds, families contiguous, ``# EOF``);
    ``promtool tsdb create-blocks-from openmetrics`` (Prometheus 2.42) as the consumer.
    """
    text = recording_text(snapshots, include_created)
    if isinstance(fp, (str, os.PathLike)):
        Path(fp).write_text(text, encoding="utf-8")
    else:
        fp.write(text)
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


#: Longest line a recording may have (characters). A vLLM sample line is a few hundred; the bound keeps
#: a file without line breaks (a gzip bomb of zeros, a binary file) from being read whole.
MAX_LINE_CHARS = 1 << 20

#: OpenMetrics numbers as ``prometheus_client``'s writer spells them (``floatToGoString``: ``1.0``,
#: ``1.5e-05``, ``+Inf``, ``-Inf``, ``NaN``); anything else goes through the full parser.
_REAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_SPECIAL = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}
_EOF_LINE = re.compile(r"# EOF\s*\Z")
#: Series texts whose parse is remembered (about 1 KiB each, so 16 MiB at most). A recording writes
#: each series' lines together (a histogram's buckets interleaved by instant); even concatenated
#: scrapes of ~180 pods (90 series each) fit. Past it the memo starts over: slower, never wrong.
_PARSE_CACHE_SIZE = 16_384


@dataclass(frozen=True, eq=False)
class SeriesRef:
    """One series of a recording, shared by all its samples.

    Attributes:
        name: the sample name as written (``vllm:num_preemptions_total``).
        labels: label name -> value (read-only).
        key: ``(name, sorted label items)``, the series identity.
        kept: whether the reader's ``keep`` accepted ``name`` (its samples are yielded).
    """

    name: str
    labels: Mapping[str, str]
    key: tuple[str, tuple[tuple[str, str], ...]]
    kept: bool


def _real(token: str) -> float | None:
    """A finite number as OpenMetrics writes it, or None when only the full parser may judge ``token``."""
    if not _REAL.match(token):
        return None
    value = float(token)
    return None if math.isinf(value) else value  # 1e400 or 400 digits: the parser decides


def _number(token: str) -> float | None:
    """A sample value as OpenMetrics writes it (also ``+Inf``, ``-Inf``, ``NaN``), or None (see :func:`_real`)."""
    special = _SPECIAL.get(token)
    return special if special is not None else _real(token)


class RecordingReader:
    """Stream the samples of a recording: memory bounded independently of the file's size.

    Each line is read alone (at most :data:`MAX_LINE_CHARS` characters). The first line of a series
    is parsed by ``prometheus_client``'s OpenMetrics parser (``line + "# EOF"``, the line on its own,
    as :func:`kvpilot.metrics.exposition.parse_exposition` falls back to); once it agreed that the
    line is ``<series> <value> <timestamp>``, later lines with the same ``<series>`` text and numbers
    spelled as OpenMetrics writes them reuse that parse and only convert the two numbers (the grammar
    is the same, so the parser would accept them too). Anything else is parsed in full. That keeps
    most lines at the cost of converting two numbers, not a full parse (docs/performance.md, "diagnose
    on a large recording"), and every line is still checked. Nothing may follow ``# EOF`` but blank lines.

    Why not ``prometheus_client``'s own streaming (``text_fd_to_metric_families`` reads a file object
    family by family): it holds a whole family - every pod, every instant - before it yields it, so
    memory grows with the file; and in 0.26 its "timestamp truncation" de-duplication drops a
    histogram's later instants and raises "+Inf bucket missing" on any histogram with more than one
    (see :mod:`kvpilot.metrics.exposition`), which every recording has.

    Args:
        fp: the text, line by line (a text file, ``io.StringIO``, a gzip text stream).
        keep: ``keep(name)`` -> whether the samples of that name are yielded (default all); lines of
            other names are still checked, and their timestamps count in :attr:`last_timestamp`.
        max_line_chars: the line-length bound.

    Iterating yields ``(series, value, timestamp)``: :class:`SeriesRef` (one object per series text
    while it is remembered), the value and the timestamp (Unix seconds), in file order.

    Raises (while iterating):
        ExpositionError: an unreadable line, a line over the bound, a sample without a timestamp, a
            value outside float64, no ``# EOF`` at the end (line 0), or data after it, with the 1-based line
            number.

    Attributes (after iterating): ``lines`` read, ``samples`` seen, ``last_timestamp`` (newest of
    any sample, or None).
    """

    def __init__(
        self, fp: TextIO, keep: Callable[[str], bool] | None = None, max_line_chars: int = MAX_LINE_CHARS
    ) -> None:
        self._fp = fp
        self._keep = keep
        self._max = max_line_chars
        self._cache: dict[str, SeriesRef] = {}
        self.lines = 0
        self.samples = 0
        self.last_timestamp: float | None = None

    def _ref(self, name: str, labels: Mapping[str, str]) -> SeriesRef:
        frozen = MappingProxyType(dict(labels))
        return SeriesRef(name, frozen, (name, tuple(sorted(frozen.items()))), self._keep is None or self._keep(name))

    def _parse(self, line: str, parts: list[str]) -> list[tuple[SeriesRef, float, float]]:
        """The full parse of one sample line; remembers its series text when the split agrees."""
        try:
            families = list(_om_families(line + "\n# EOF\n"))
        except ValueError as exc:  # prometheus_client raises ValueError (sometimes without a message)
            reason = one_line(exc, 160) or "syntax"  # the parser's message quotes the line as it is
            raise ExpositionError(self.lines, f"unreadable sample line {line[:120]!r} ({reason})") from None
        out: list[tuple[SeriesRef, float, float]] = []
        for family in families:
            for s in family.samples:
                if s.timestamp is None:
                    raise ExpositionError(
                        self.lines, f"sample {s.name} has no timestamp (recordings need one per sample)"
                    )
                try:
                    value = float(s.value)
                except OverflowError:  # a 400-digit integer: outside float64, as Prometheus refuses it
                    raise ExpositionError(self.lines, f"sample {s.name}: value outside the float64 range") from None
                out.append((self._ref(s.name, s.labels), value, float(s.timestamp)))
        if len(out) == 1 and len(parts) == 3 and families[0].samples[0].exemplar is None:
            ref, value, ts = out[0]
            v, t = _number(parts[1]), _real(parts[2])
            same_value = v is not None and (v == value or (math.isnan(v) and math.isnan(value)))
            if same_value and t == ts:
                if len(self._cache) >= _PARSE_CACHE_SIZE:
                    self._cache.clear()
                self._cache[parts[0]] = ref
        return out

    def _refuse_data_after_eof(self, readline: Callable[[int], str], limit: int) -> None:
        """Read on after ``# EOF``: blank lines are allowed, anything else is refused at its line.

        ``# EOF`` ends an OpenMetrics exposition (OpenMetrics 1.0, "ABNF": ``exposition = metricset HASH SP
        eof [ LF ]``); ``prometheus_client``'s parser (0.26, ``openmetrics/parser.py``) raises "Received
        line after # EOF" even for a blank one, which is let through here. Ignoring the rest would
        diagnose the first of two concatenated recordings alone, without a word.
        """
        while raw := readline(limit + 1):
            self.lines += 1
            if raw.strip():
                raise ExpositionError(
                    self.lines, "data after '# EOF' (a recording ends there; two recordings concatenated?)"
                )

    def __iter__(self) -> Iterator[tuple[SeriesRef, float, float]]:  # noqa: C901
        readline, limit = self._fp.readline, self._max
        saw_eof = False
        last = -math.inf
        while True:
            raw = readline(limit + 1)
            if not raw:
                break
            self.lines += 1
            if len(raw) > limit and not raw.endswith("\n"):
                raise ExpositionError(self.lines, f"line longer than {limit:,} characters (the limit for a recording)")
            line = raw.strip()
            if not line:
                continue
            if line[0] == "#":
                if _EOF_LINE.match(line):
                    saw_eof = True
                    self._refuse_data_after_eof(readline, limit)
                    break
                continue  # HELP/TYPE/UNIT: no samples; each sample line is read alone
            parts = line.rsplit(" ", 2)
            ref = self._cache.get(parts[0]) if len(parts) == 3 else None
            if ref is not None:
                value, ts = _number(parts[1]), _real(parts[2])
                found = [(ref, value, ts)] if value is not None and ts is not None else self._parse(line, parts)
            else:
                found = self._parse(line, parts)
            for ref, value, ts in found:
                self.samples += 1
                if ts > last:
                    last = ts
                if ref.kept:
                    yield ref, value, ts
        if self.samples:
            self.last_timestamp = last
        if not saw_eof:
            raise ExpositionError(0, "a recording is OpenMetrics text ending with '# EOF'; none found")


def read_recording(path_or_text: str | os.PathLike[str]) -> list[Sample]:
    """Read a recording into samples (time order within each series, as written).

    Args:
        path_or_text: a path (``str`` without a newline, or ``PathLike``) to a recording file, or
            the recording text itself.

    Returns:
        the samples, each with its timestamp in Unix seconds (read by :class:`RecordingReader`).

    Raises:
        FileNotFoundError / OSError: the path cannot be read.
        ExpositionError: the text is not OpenMetrics (no ``# EOF``), a sample has no timestamp,
            or a line is unreadable.
    """
    if isinstance(path_or_text, os.PathLike) or ("\n" not in path_or_text and not path_or_text.startswith("#")):
        with open(path_or_text, encoding="utf-8") as fp:
            return [Sample(ref.name, ref.labels, value, ts) for ref, value, ts in RecordingReader(fp)]
    if not is_openmetrics(path_or_text):
        raise ExpositionError(0, "a recording is OpenMetrics text ending with '# EOF'; none found")
    return [Sample(ref.name, ref.labels, value, ts) for ref, value, ts in RecordingReader(io.StringIO(path_or_text))]
