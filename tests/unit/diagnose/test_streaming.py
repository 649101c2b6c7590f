"""Answers decoded while they stream in, and ``-o json`` written in pieces: the same as decoding or
encoding the whole document with :mod:`json` (the standard library is the reference).
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpilot.diagnose.model import Diagnosis, Finding, Recommendation, Report
from kvpilot.diagnose.report import json_chunks
from kvpilot.diagnose.sources.vector import UnreadableAnswerError, VectorReader

_label_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
_labels = st.dictionaries(st.sampled_from(["pod", "namespace", "le", "metric", "engine", "a b"]), _label_text)
_rows = st.lists(
    st.fixed_dictionaries({"metric": _labels, "value": st.tuples(st.floats(0, 2e9), _label_text).map(list)}),
    max_size=30,
)


def _answer(rows, **dump) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": rows}}, **dump).encode()


def _streamed(body: bytes, cuts: list[int]) -> list:
    got: list = []
    reader = VectorReader(got.extend, max_row=1 << 16)
    last = 0
    for cut in sorted(set(cuts)):
        reader.feed(body[last:cut])
        last = cut
    reader.feed(body[last:])
    reader.close()
    return got


@settings(max_examples=300, deadline=None)
@given(
    rows=_rows,
    cuts=st.lists(st.integers(0, 4000), max_size=12),
    compact=st.booleans(),
    ascii_only=st.booleans(),
)
def test_rows_streamed_in_any_chunks_are_the_rows_json_loads_gives(rows, cuts, compact, ascii_only):
    # Prometheus writes no spaces (compact); Python's json.dumps, as the test fakes do, writes ", " and ": "
    body = _answer(rows, separators=(",", ":") if compact else None, ensure_ascii=ascii_only)
    assert _streamed(body, cuts) == json.loads(body)["data"]["result"]


def test_a_row_split_inside_a_multibyte_character_and_a_label_named_metric():
    rows = [{"metric": {"metric": "x", "pod": "é" * 5}, "value": [1, "2"]}] * 3
    body = _answer(rows, separators=(",", ":"), ensure_ascii=False)
    # every cut position, including the middle of each two-byte "é"
    for cut in range(1, len(body)):
        assert _streamed(body, [cut]) == rows


def test_trailing_keys_after_the_result_are_ignored():
    body = b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"3"]}]},"stats":[1]}'
    assert _streamed(body, [20, 61]) == [{"metric": {}, "value": [1, "3"]}]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"status":"error","errorType":"bad_data","error":"boom"}', "status is not success"),
        (b'{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}', "not an instant vector"),
        (b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"3"]}', "does not end"),
        (b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"val', "not JSON"),
        (b'{"status":"success","data":{"resultType":"vector","result":[\xff]}}', "not UTF-8"),
        (b"<html>proxy error</html>", "not JSON"),
    ],
)
def test_what_is_not_an_instant_vector_is_refused_with_the_reason(body, words):
    with pytest.raises(UnreadableAnswerError, match=words):
        _streamed(body, [len(body) // 2])


def test_a_row_longer_than_the_bound_is_refused_before_the_answer_ends():
    reader = VectorReader(lambda _rows: None, max_row=1000)
    reader.feed(b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"')
    with pytest.raises(UnreadableAnswerError, match="longer than 1,000"):
        reader.feed(b"x" * 2000)


def test_rows_reach_the_callback_while_the_answer_is_still_coming():
    batches: list[list] = []
    reader = VectorReader(batches.append)
    row = b'{"metric":{"pod":"p"},"value":[1,"1"]}'
    reader.feed(b'{"status":"success","data":{"resultType":"vector","result":[' + b",".join([row] * 100) + b",")
    assert sum(len(b) for b in batches) == 100  # before close(): the rows are not held until the end


# ``-o json`` in pieces


def _report(n_targets: int, text: str, number: float) -> Report:
    queries = [f"q{i} {text}" for i in range(3)]
    report = Report(source=f"prometheus {text}", window_seconds=300.0, notes=[text, "n"])
    for i in range(n_targets):
        report.targets.append(
            Diagnosis(
                "healthy" if i % 2 else "idle",
                "ok",
                0.5,
                evidence=[text, "queries"],
                recommendations=[Recommendation("--max-num-seqs", 4, number, text)],
                target={"namespace": text, "pod": f"p{i}", "server": "", "model_name": "m", "engine": "0"},
                signals={"a": number, "b": None, "queries": 1.0},
                queries=queries if i % 3 else [],
                findings=[Finding("kv_cache_exhaustion", "warning", 0.25, [text])],
            )
        )
    return report


@settings(max_examples=100, deadline=None)
@given(
    n_targets=st.integers(0, 5),
    text=st.text(max_size=20),
    number=st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**20), 10**20),
)
def test_json_in_pieces_is_json_dumps_of_the_whole_report(n_targets, text, number):
    report = _report(n_targets, text, number)
    assert "".join(json_chunks(report)) == json.dumps(report.to_json(), indent=2, allow_nan=False)


def test_json_in_pieces_refuses_nan_as_json_dumps_does():
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):  # json's wording
        "".join(json_chunks(_report(1, "x", math.nan)))
