"""A Prometheus instant-vector (or range-matrix) answer decoded while it streams in, row batch by row batch (no I/O).

``/api/v1/query`` answers ``{"status":"success","data":{"resultType":"vector","result":[ROW, ...]}}``
with ``ROW = {"metric":{label: value}, "value":[t, "v"]}``
(https://prometheus.io/docs/prometheus/latest/querying/api/#instant-vectors; Thanos, Mimir and
VictoriaMetrics answer the same); ``/api/v1/query_range`` answers ``"resultType":"matrix"`` with
``ROW = {"metric":{...}, "values":[[t, "v"], ...]}`` (#range-vectors), read the same way with
``result_type="matrix"``. Decoding the whole answer at once holds the body, its text and
a dict per row together, several times the answer's size (docs/performance.md, "diagnose at
scale"). :class:`VectorReader` holds one chunk of text at a time instead: every complete
run of rows in the buffer is decoded by :func:`json.loads` in one call (C speed) and handed to
``on_rows``, which keeps what it needs (floats, interned label tuples) and drops the dicts.

Where a batch boundary is found: a row starts with ``{"metric"``; inside a JSON string every ``"``
is escaped, so that text only occurs where a row (or a label map whose first label is named
``metric``) starts. A batch that does not decode (the rare label named ``metric``, or a
malformed answer) is decoded again row by row with :meth:`json.JSONDecoder.raw_decode`. An answer
whose head is not the usual one (another key order, an error body, a scalar) is kept whole,
up to ``max_whole`` characters, and decoded at :meth:`VectorReader.close` the ordinary way.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable

_RESULT = re.compile(r'"result"\s*:\s*\[')
_SUCCESS = re.compile(r'"status"\s*:\s*"success"')
_SEPARATOR = re.compile(r"\s*,?\s*")
_DECODER = json.JSONDecoder()


class UnreadableAnswerError(ValueError):
    """The answer is not a Prometheus instant vector (the message says why, in a few words)."""


class VectorReader:
    """Feed an ``/api/v1/query`` answer's bytes; rows go to ``on_rows(list_of_row_objects)`` in batches.

    Args:
        on_rows: called with each decoded batch of rows (JSON values as :func:`json.loads` gives
            them; the callback checks their shape).
        max_row: most characters one row may take (a vLLM row is about 250).
        max_whole: most characters kept when the answer has to be decoded whole (see the module).
        result_type: the ``resultType`` expected: ``vector`` (an instant query) or ``matrix`` (a
            range query).

    Raises (from :meth:`feed` / :meth:`close`):
        UnreadableAnswerError: not UTF-8 JSON, ``status`` not ``success``, not of ``result_type``, a
            row longer than ``max_row``.
    """

    def __init__(
        self,
        on_rows: Callable[[list[object]], None],
        max_row: int = 1 << 20,
        max_whole: int = 64 << 20,
        result_type: str = "vector",
    ):
        self.on_rows = on_rows
        self.result_type = result_type
        self._type = re.compile(r'"resultType"\s*:\s*"' + re.escape(result_type) + '"')
        self.max_row = max_row
        self.max_whole = max_whole
        self._text = codecs.getincrementaldecoder("utf-8")()
        self._buf = ""
        self._parts: list[str] = []  # the answer so far, when it is decoded whole
        self._size = 0
        self._state = "head"  # head -> rows -> tail, or head -> whole

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the answer."""
        self._take(chunk, final=False)

    def close(self) -> None:
        """The answer is complete: decode what is left."""
        self._take(b"", final=True)

    def release(self) -> None:
        """Drop what is buffered (after an error: a traceback keeps this reader alive)."""
        self._buf, self._parts, self._size = "", [], 0

    def _take(self, chunk: bytes, final: bool) -> None:
        try:
            text = self._text.decode(chunk, final=final)
        except UnicodeDecodeError:
            raise UnreadableAnswerError("not UTF-8") from None
        if self._state == "whole":  # kept in parts: one string grown chunk by chunk is quadratic
            self._parts.append(text)
            self._size += len(text)
        else:
            self._buf += text
        self._advance(final)

    def _advance(self, final: bool) -> None:
        if self._state == "head":
            self._head(final)
        if self._state == "rows":
            self._rows(final)
        if self._state == "tail":
            if len(self._buf) > self.max_row:
                self._buf = self._buf[-self.max_row :]  # trailing keys ("stats", "warnings"): not read
        elif self._state == "whole":
            if self._buf:
                self._parts.append(self._buf)
                self._size += len(self._buf)
                self._buf = ""
            if self._size > self.max_whole:
                raise UnreadableAnswerError(f"answer larger than {self.max_whole:,} characters")
            if final:
                self._whole()

    def _head(self, final: bool) -> None:
        found = _RESULT.search(self._buf)
        if found is None:
            if final or len(self._buf) > self.max_row:
                self._state = "whole"
            return
        head = self._buf[: found.start()]
        if not (_SUCCESS.search(head) and self._type.search(head)):
            self._state = "whole"  # an unusual key order, an error, a scalar: decoded whole at close
            return
        self._buf = self._buf[found.end() :]
        self._state = "rows"

    def _rows(self, final: bool) -> None:  # noqa: C901
        buf = self._buf
        pos = _SEPARATOR.match(buf).end()  # type: ignore[union-attr]
        cut = buf.rfind('{"metric"', pos + 1)  # the last row's start: complete rows before it
        if cut > pos:
            try:
                rows = json.loads("[" + buf[pos:cut].rstrip().rstrip(",") + "]")
            except ValueError:
                pass  # a label named "metric" or a malformed row: decoded one by one below
            else:
                self.on_rows(rows)
                pos = cut
        while True:
            pos = _SEPARATOR.match(buf, pos).end()  # type: ignore[union-attr]
            if pos >= len(buf):
                break
            if buf[pos] == "]":
                self._buf, self._state = buf[pos + 1 :], "tail"
                return
            try:
                row, end = _DECODER.raw_decode(buf, pos)
            except ValueError:
                if final:
                    raise UnreadableAnswerError("a row is not JSON") from None
                if len(buf) - pos > self.max_row:
                    raise UnreadableAnswerError(f"a row longer than {self.max_row:,} characters") from None
                break  # the row continues in the next chunk
            self.on_rows([row])
            pos = end
        self._buf = buf[pos:]
        if final:
            raise UnreadableAnswerError("the result list does not end")

    def _whole(self) -> None:
        text, self._parts = "".join(self._parts), []
        try:
            doc = json.loads(text)
        except ValueError:
            raise UnreadableAnswerError("not JSON") from None
        del text
        if not isinstance(doc, dict) or doc.get("status") != "success" or not isinstance(doc.get("data"), dict):
            raise UnreadableAnswerError("status is not success")
        result = doc["data"].get("result")
        if doc["data"].get("resultType", self.result_type) != self.result_type or not isinstance(result, list):
            raise UnreadableAnswerError(
                "not an instant vector" if self.result_type == "vector" else "not a range matrix"
            )
        self.on_rows(result)
