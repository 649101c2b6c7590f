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

Pure logic: the only I/O is on the file object or path the caller passes.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import ALLOWUTF8
from prometheus_client.openmetrics.exposition import generate_latest as _om_generate
from prometheus_client.samples import Sample as _PCSample

from kvpilot.metrics.exposition import ExpositionError, Sample, is_openmetrics, parse_exposition

__all__ = ["write_recording", "read_recording", "recording_text"]

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


def _buffer(snapshots: Iterable[Snapshot], include_created: bool) -> list[Metric]:
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


def read_recording(path_or_text: str | os.PathLike[str]) -> list[Sample]:
    """Read a recording into samples (time order within each series, as written).

    Args:
        path_or_text: a path (``str`` without a newline, or ``PathLike``) to a recording file, or
            the recording text itself.

    Returns:
        the samples, each with its timestamp in Unix seconds.

    Raises:
        FileNotFoundError / OSError: the path cannot be read.
        ExpositionError: the text is not OpenMetrics (no ``# EOF``), a sample has no timestamp,
            or a line is unreadable.
    """
    if isinstance(path_or_text, os.PathLike) or ("\n" not in path_or_text and not path_or_text.startswith("#")):
        text = Path(path_or_text).read_text(encoding="utf-8")
    else:
        text = path_or_text
    if not is_openmetrics(text):
        raise ExpositionError(0, "a recording is OpenMetrics text ending with '# EOF'; none found")
    samples = parse_exposition(text)
    for s in samples:
        if s.timestamp is None:
            line_no = _line_of(text, s.name)
            raise ExpositionError(line_no, f"sample {s.name} has no timestamp (recordings need one per sample)")
    return samples


def _line_of(text: str, name: str) -> int:
    for i, line in enumerate(io.StringIO(text), start=1):
        if line.startswith(name):
            return i
    return 0
