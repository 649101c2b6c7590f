"""The rows of a Prometheus answer as they stream in, one decoder per answer shape (no I/O).

:class:`~kvpilot.diagnose.sources.vector.VectorReader` hands each batch of decoded JSON rows to a decoder's
:meth:`Rows.keep`, which keeps one small tuple per row (shared label tuples and floats) and drops the dicts:

- :class:`SignalRows`: an instant vector of one signal, ``(target labels, kvpilot_name, value)``;
- :class:`BucketRows`: an instant vector of histogram buckets, ``(target labels, upper bound or None, value)``;
- :class:`StepRows`: a range matrix, ``(target labels, step index 0 = oldest, value)``, one per step;
- :class:`LabelRows`: an instant vector read for its labels, ``(label mapping, value text)``.

A row whose shape is not the HTTP API's (https://prometheus.io/docs/prometheus/latest/querying/api/
#instant-vectors, #range-vectors) or whose value is not a number is skipped, as :func:`float` decides (a
range step's NaN is kept as NaN); a row that is not a JSON object makes the whole answer unreadable. Rows
past a decoder's bound are counted, not kept, so the error can say how many there were.
"""

from __future__ import annotations

import math
from typing import Any, Generic, TypeGuard, TypeVar

from kvpilot.diagnose import promql
from kvpilot.diagnose.signals import TARGET_LABELS
from kvpilot.diagnose.sources.http import MAX_HISTOGRAM_BUCKETS, MAX_PROMETHEUS_ROWS
from kvpilot.diagnose.sources.vector import UnreadableAnswerError

#: the label that tells which spelling (or which quantity) supplied a row
NAME_LABEL = "kvpilot_name"
_NO_LABELS = ("",) * len(TARGET_LABELS)  # the value of each target label a row does not have

#: a target's labels (:data:`~kvpilot.diagnose.signals.TARGET_LABELS`), one shared tuple per target
Ident = tuple[str, ...]
SignalRow = tuple[Ident, str, float]
BucketRow = tuple[Ident, float | None, float]
StepRow = tuple[Ident, int, float]
LabelRow = tuple[dict[str, str], str]

R = TypeVar("R")


class Interned:
    """What the answers of one source share: target label tuples, ``kvpilot_name`` values and ``le`` bounds, each
    held once however many rows carry it.
    """

    def __init__(self) -> None:
        self.keys: dict[Ident, Ident] = {}
        self.names: dict[str, str] = {}
        self.les: dict[str | None, float | None] = {}

    def target(self, metric: dict[Any, Any]) -> Ident | None:
        """The row's target labels, interned; None when one is not a string.

        Only what is read is checked, and a label tuple once: a check of every label of every row took half of
        the decoding's time at 10,000 targets.
        """
        ident = tuple(map(metric.get, TARGET_LABELS, _NO_LABELS))
        try:
            known = self.keys.get(ident)
        except TypeError:  # a list or a map as a label value
            return None
        if known is None:
            if not all(type(v) is str for v in ident):
                return None
            known = self.keys.setdefault(ident, ident)
        return known

    def bound(self, le: str | None) -> float | None:
        """A bucket's upper bound (``"+Inf"``, ``"0.5"``), None when unreadable; read once per text."""
        les = self.les
        if le not in les:
            try:
                les[le] = promql.parse_le(le or "")
            except ValueError:
                les[le] = None
        return les[le]


class Rows(Generic[R]):
    """One answer's rows: :meth:`keep` takes each batch; at most :attr:`max_rows` are kept.

    Attributes:
        rows: the rows kept (emptied once the answer has more than ``max_rows``).
        seen: the rows the answer held so far.
        max_rows / bytes_scale: the bounds on rows, and on bytes as a multiple of the one-row-a-target bound.
        result_type: the ``resultType`` the answer must have (``vector`` or ``matrix``).
    """

    result_type = "vector"
    shape = "an instant vector"

    def __init__(self, interned: Interned, max_rows: int = MAX_PROMETHEUS_ROWS, bytes_scale: int = 1) -> None:
        self.interned = interned
        self.rows: list[R] = []
        self.seen = 0
        self.max_rows = max_rows
        self.bytes_scale = bytes_scale

    def keep(self, batch: list[object]) -> None:
        """Take one batch of rows (JSON values as :func:`json.loads` gives them)."""
        self.seen += len(batch)
        if self.seen > self.max_rows:
            self.rows.clear()  # counted to the end for the message, no longer kept
            return
        self.take(batch)

    def take(self, batch: list[object]) -> None:
        """Decode ``batch`` into :attr:`rows` (each shape its own)."""
        raise NotImplementedError

    def unreadable(self) -> UnreadableAnswerError:
        """The error of a row that is not a JSON object."""
        return UnreadableAnswerError(f"not {self.shape}")

    def refusal(self) -> str | None:
        """Why the whole answer is refused (too many rows), or None; the rows are dropped when it is."""
        if self.seen > self.max_rows:
            return f"answer with {self.seen:,} series, more than the limit of {self.max_rows:,}: {NARROW}"
        return None


#: how a refusal ends
NARROW = "narrow the selection (--namespace, --server, --pod, --model-name)"


class SignalRows(Rows[SignalRow]):
    """A signal query's rows: ``(target labels, kvpilot_name, value)``, one per target (and spelling)."""

    def take(self, batch: list[object]) -> None:
        """Keep each row with a target, a number and a string ``kvpilot_name`` (absent: ``""``)."""
        rows, target, names = self.rows, self.interned.target, self.interned.names
        for row in batch:
            if type(row) is not dict:
                raise self.unreadable()
            metric, value = row.get("metric"), row.get("value")
            if type(metric) is not dict or not _point(value):
                continue
            ident = target(metric)
            if ident is None:
                continue
            try:
                number = float(value[1])
            except ValueError:
                continue
            name = metric.get(NAME_LABEL, "")
            if type(name) is str:
                rows.append((ident, names.setdefault(name, name), number))


class BucketRows(Rows[BucketRow]):
    """A bucket query's rows: ``(target labels, upper bound or None, value)``, one per target and ``le``.

    Bounded at :data:`~kvpilot.diagnose.sources.http.MAX_HISTOGRAM_BUCKETS` rows a target, for as many targets
    as a signal query (:meth:`refusal` also refuses more targets than that).
    """

    def __init__(self, interned: Interned) -> None:
        super().__init__(interned, MAX_PROMETHEUS_ROWS * MAX_HISTOGRAM_BUCKETS, MAX_HISTOGRAM_BUCKETS)

    def take(self, batch: list[object]) -> None:
        """Keep each row with a target, a number and an ``le`` that is a string or absent."""
        rows, target, bound = self.rows, self.interned.target, self.interned.bound
        for row in batch:
            if type(row) is not dict:
                raise self.unreadable()
            metric, value = row.get("metric"), row.get("value")
            if type(metric) is not dict or not _point(value):
                continue
            ident = target(metric)
            if ident is None:
                continue
            try:
                number = float(value[1])
            except ValueError:
                continue
            le = metric.get("le")
            if le is None or type(le) is str:
                rows.append((ident, bound(le), number))

    def refusal(self) -> str | None:
        """Also refused: rows within the bound that are of more targets than a signal query may have."""
        if self.seen <= self.max_rows and len({row[0] for row in self.rows}) > MAX_PROMETHEUS_ROWS:
            self.rows.clear()
            return (
                f"answer with {self.seen:,} series of more than {MAX_PROMETHEUS_ROWS:,} targets (the limit): {NARROW}"
            )
        return super().refusal()


class StepRows(Rows[StepRow]):
    """A range query's rows: ``(target labels, step index, value)``, one per step of each target.

    Args:
        start / step: the range query's first evaluation time and step (seconds): a point at ``t`` is step
            ``round((t - start) / step)``.
        points: the range's points (the byte bound is that many times a signal query's).
    """

    result_type = "matrix"
    shape = "a range matrix"

    def __init__(self, interned: Interned, start: float, step: float, points: int) -> None:
        super().__init__(interned, MAX_PROMETHEUS_ROWS, points)
        self.start, self.step = start, step

    def take(self, batch: list[object]) -> None:
        """Keep each ``[t, "v"]`` point of each row with a target (an unreadable value as NaN)."""
        rows, target, start, step = self.rows, self.interned.target, self.start, self.step
        for row in batch:
            if type(row) is not dict:
                raise self.unreadable()
            metric, points = row.get("metric"), row.get("values")
            if type(metric) is not dict or type(points) is not list:
                continue
            ident = target(metric)
            if ident is None:
                continue
            for point in points:
                if _point(point):
                    rows.append((ident, round((point[0] - start) / step), sample_value(point[1])))


class LabelRows(Rows[LabelRow]):
    """An info query's rows (``cache_config_info``, ``lora_requests_info``, the operator's limits): each row's
    label mapping and value text, for a row whose labels are all strings.
    """

    def take(self, batch: list[object]) -> None:
        """Keep each well-formed row (:func:`well_formed`)."""
        rows = self.rows
        for row in batch:
            if type(row) is not dict:
                raise self.unreadable()
            metric, value = row.get("metric"), row.get("value")
            if type(metric) is dict and _point(value) and well_formed(row):
                rows.append((metric, value[1]))


def well_formed(row: object) -> bool:
    """True for an instant-vector row of the Prometheus HTTP API: ``metric`` a mapping of string labels to string
    values, ``value`` a ``[time, "number"]`` pair (prometheus.io/docs/prometheus/latest/querying/api/
    #instant-vectors). Other rows are skipped, never a crash.
    """
    if not isinstance(row, dict):
        return False
    metric = row.get("metric")
    return (
        isinstance(metric, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in metric.items())
        and _point(row.get("value"))
    )


def _point(value: object) -> TypeGuard[list[Any]]:
    """True for a ``[time, "number"]`` pair of the HTTP API."""
    return (
        isinstance(value, list) and len(value) == 2 and isinstance(value[0], (int, float)) and isinstance(value[1], str)
    )


def sample_value(text: str) -> float:
    """A sample value of the HTTP API (``"4"``, ``"NaN"``, ``"+Inf"``) as a float; NaN when unreadable."""
    try:
        return float(text)
    except ValueError:
        return math.nan
