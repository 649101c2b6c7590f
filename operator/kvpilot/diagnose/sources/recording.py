"""``--recording FILE``: replay a recording (docs/metrics.md, "Recordings") through the signal computation.

The file (OpenMetrics text, or the same gzip-compressed: recognised by its magic bytes) is read as a
stream, line by line (:class:`kvpilot.metrics.recording.RecordingReader`), and only what the signals
need is kept: the samples of the families :data:`~kvpilot.diagnose.signals.SIGNAL_DEFS` (and
:data:`~kvpilot.diagnose.signals.FIT_SIGNAL_DEFS`, for predictions) evaluates and of ``vllm:lora_requests_info``,
inside the window plus the 5-minute lookback, and the newest sample of each ``cache_config_info``
series. The window's end is ``--end``, else the newest sample of the file, which is only known at the
end: while reading, a sample older than (newest so far - horizon) can never be inside the final
window and is dropped. Memory therefore depends on the window, not on the file (a 10-pod recording of
hours keeps ~90 series a pod x the window's samples); time is linear in the file's size.

Bounds (each refused with one line naming it, exit 3 - the input cannot be diagnosed):

- :data:`~kvpilot.metrics.recording.MAX_LINE_CHARS` characters a line;
- :data:`MAX_SERIES` series of the families the signals use;
- :data:`MAX_WINDOW_SAMPLES` samples of those series kept at once (inside the window + lookback).
"""

from __future__ import annotations

import gzip
import io
import math
import os
import zlib
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, TextIO

from kvpilot.diagnose.inputs import FlagError
from kvpilot.diagnose.signals import FIT_SIGNAL_DEFS, LOOKBACK_SECONDS, LORA_INFO, OPERATOR_LIMIT_METRIC, SIGNAL_DEFS
from kvpilot.diagnose.sources import SourceError
from kvpilot.metrics.catalog import match_name
from kvpilot.metrics.exposition import ExpositionError
from kvpilot.metrics.recording import RecordingReader, SeriesRef


def check_recording_file(path: str) -> None:
    """Refuse a ``--recording`` that is not a file, before the run starts.

    Raises:
        FlagError: ``--recording 'run.om': no such file`` (or a directory).
    """
    if not os.path.isfile(path):
        what = "a directory, not a recording file" if os.path.isdir(path) else "no such file"
        raise FlagError(f"--recording {path!r}: {what}")


#: Series of the signals' families a recording may hold (any number of other series is fine): about
#: 90 a vLLM engine, so 50,000 is some 500 pods; the same bound as a scrape's lines and a Prometheus
#: answer's series (kvpilot.diagnose.sources.http).
MAX_SERIES = 50_000
#: Samples of those series kept at once (the window + lookback): e.g. 10 pods x 90 series x 300 s at
#: 1 s is 270,000; the bound keeps a diagnosis near a quarter of a GiB (the memory it was measured at:
#: docs/performance.md, "diagnose on a large recording").
MAX_WINDOW_SAMPLES = 1_000_000

_INFO = "vllm:cache_config_info"
#: the signals' families, the prediction's fit's (FIT_SIGNAL_DEFS: a few more histograms), vLLM's LoRA gauge
#: (windowed: its value changes each step) and cache_config_info
_FAMILIES = frozenset({sd.family for sd in (*SIGNAL_DEFS, *FIT_SIGNAL_DEFS)} | {LORA_INFO, _INFO})


def _wanted(name: str) -> bool:
    """Whether the signals read samples named ``name`` (any spelling; never ``_created``), or it is the
    operator's limits gauge (a limit source, kvpilot.diagnose.limits).
    """
    if name == OPERATOR_LIMIT_METRIC:
        return True
    m = match_name(name)
    return m is not None and m.canonical in _FAMILIES and m.suffix != "_created"


class WindowSample(NamedTuple):
    """A kept sample (the shape :func:`~kvpilot.diagnose.signals.compute_signals` reads); labels shared per series."""

    name: str
    labels: Mapping[str, str]
    value: float
    timestamp: float


@dataclass
class _Points:
    ref: SeriesRef
    times: array[float] = field(default_factory=lambda: array("d"))
    values: array[float] = field(default_factory=lambda: array("d"))
    start: int = 0  # times[:start] are dropped (compacted now and then)

    def __len__(self) -> int:
        return len(self.times) - self.start


@dataclass
class RecordingWindow:
    """What a recording holds for one window.

    Attributes:
        samples: the kept samples, series by series in file order, each series in file order.
        last_timestamp: the newest timestamp of any sample in the file (Unix seconds), or None.
        lines: lines read.
    """

    samples: list[WindowSample]
    last_timestamp: float | None
    lines: int


class _Window:
    """The samples of wanted series inside ``[horizon_end - horizon, horizon_end]``, bounded."""

    def __init__(self, window_seconds: float | None, end: float | None) -> None:
        self.horizon = math.inf if window_seconds is None else max(window_seconds, LOOKBACK_SECONDS)
        self.end = end
        self.newest = -math.inf  # newest timestamp seen so far (any series)
        self.series: dict[tuple[str, tuple[tuple[str, str], ...]], _Points] = {}
        self.info: dict[tuple[str, tuple[tuple[str, str], ...]], WindowSample] = {}
        self.kept = 0
        self._info_names: dict[str, bool] = {}

    def _is_info(self, name: str) -> bool:
        known = self._info_names.get(name)
        if known is None:
            m = match_name(name)
            known = self._info_names[name] = m is not None and m.canonical == _INFO
        return known

    def add(self, ref: SeriesRef, value: float, ts: float) -> None:  # noqa: C901
        if ts > self.newest:
            self.newest = ts  # of the kept samples: never past the file's newest, so nothing needed is dropped
        if self._is_info(ref.name):
            old = self.info.get(ref.key)
            if old is None or old.timestamp <= ts:
                self.info[ref.key] = WindowSample(ref.name, ref.labels, value, ts)
            return
        end = self.end if self.end is not None else self.newest
        if ts > end or ts < end - self.horizon:
            return
        points = self.series.get(ref.key)
        if points is None:
            if len(self.series) >= MAX_SERIES:
                raise SourceError(
                    f"more than {MAX_SERIES:,} series of the metrics diagnose reads (the limit for a recording); "
                    "split the recording by pod or namespace"
                )
            points = self.series[ref.key] = _Points(ref)
        times = points.times
        if self.end is None:  # the end moves with the newest sample: drop what fell out of the horizon
            start, cut = points.start, end - self.horizon
            while start < len(times) and times[start] < cut:
                start += 1
            self.kept -= start - points.start
            points.start = start
            if start > 1024 and start * 2 > len(times):
                del times[:start], points.values[:start]
                points.start = 0
        times.append(ts)
        points.values.append(value)
        self.kept += 1
        if self.kept > MAX_WINDOW_SAMPLES:
            raise SourceError(
                f"more than {MAX_WINDOW_SAMPLES:,} samples inside the window (the limit for a recording); "
                "give a shorter --window, or split the recording by pod or namespace"
            )

    def samples(self, newest: float | None) -> list[WindowSample]:
        """The kept samples inside the final window, ``newest`` the file's newest timestamp."""
        end = self.end if self.end is not None else (newest if newest is not None else self.newest)
        lo = end - self.horizon
        out: list[WindowSample] = []
        for points in self.series.values():
            name, labels = points.ref.name, points.ref.labels
            for i in range(points.start, len(points.times)):
                t = points.times[i]
                if lo <= t <= end:
                    out.append(WindowSample(name, labels, points.values[i], t))
        out.extend(self.info.values())
        return out


def _open(path: Path) -> TextIO:
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def read_window(path: str | Path, window_seconds: float | None, end: float | None = None) -> RecordingWindow:
    """Stream a recording file and keep what the signals need for one window (see the module docstring).

    Args:
        path: the file (OpenMetrics text, or gzip-compressed OpenMetrics).
        window_seconds: the window; None keeps every sample of the wanted series (still bounded).
        end: the window's end (Unix seconds); None: the newest sample of the file.

    Raises:
        SourceError: the file is missing, unreadable, not a recording, or over a bound (one line,
            naming the file and, for a bad line, its number).
    """
    window = _Window(window_seconds, end)
    reader: RecordingReader | None = None
    try:
        with _open(Path(path)) as fp:
            reader = RecordingReader(fp, keep=_wanted)
            for ref, value, ts in reader:
                window.add(ref, value, ts)
    except SourceError as exc:
        raise SourceError(f"--recording {path}: {exc}") from None
    except ExpositionError as exc:
        raise SourceError(f"--recording {path}: not a readable recording: {exc}") from None
    except UnicodeDecodeError:  # decoded a chunk at a time: the bad byte is after the lines already read
        read = reader.lines if reader is not None else 0
        where = f" after line {read:,}" if read else ""
        raise SourceError(f"--recording {path}: not UTF-8 text{where} (OpenMetrics is UTF-8)") from None
    except EOFError:  # gzip.open at the end of a stream cut before gzip's end-of-stream marker
        raise SourceError(f"--recording {path}: the gzip stream is cut short (the file is incomplete)") from None
    except (gzip.BadGzipFile, zlib.error):
        raise SourceError(f"--recording {path}: not a valid gzip stream (the file is corrupt)") from None
    except OSError as exc:
        raise SourceError(f"--recording {path}: {exc.strerror or exc}") from None
    return RecordingWindow(window.samples(reader.last_timestamp), reader.last_timestamp, reader.lines)
