"""The row decoders of a Prometheus answer (kvpilot.diagnose.sources.rows): one small tuple per row of the HTTP
API's shapes (https://prometheus.io/docs/prometheus/latest/querying/api/#instant-vectors, #range-vectors), rows of
another shape skipped, a row that is not an object refused, and the bounds counted.
"""

from __future__ import annotations

import math

import pytest

from kvpilot.diagnose.sources import rows as rows_module
from kvpilot.diagnose.sources.rows import BucketRows, Interned, LabelRows, SignalRows, StepRows
from kvpilot.diagnose.sources.vector import UnreadableAnswerError

POD = {"namespace": "llm", "pod": "qwen-0", "instance": "10.0.0.7:8000", "job": "vllm"}
IDENT = ("llm", "qwen-0", "10.0.0.7:8000", "vllm", "", "")  # TARGET_LABELS order; absent labels are ""


def test_a_signal_row_keeps_target_spelling_and_value():
    decoded = SignalRows(Interned())
    decoded.keep([{"metric": {**POD, "kvpilot_name": "vllm:num_requests_running"}, "value": [1.5, "4"]}])
    assert decoded.rows == [(IDENT, "vllm:num_requests_running", 4.0)]


def test_signal_rows_skip_what_is_not_a_sample_of_a_target():
    decoded = SignalRows(Interned())
    decoded.keep(
        [
            {"metric": POD, "value": [1.5, "not a number"]},  # float() cannot read it
            {"metric": {**POD, "pod": ["a list"]}, "value": [1.5, "4"]},  # a label that is not a string
            {"metric": {**POD, "kvpilot_name": 7}, "value": [1.5, "4"]},  # a name that is not a string
            {"metric": POD, "value": [1.5, 4]},  # a value that is not text
            {"metric": "pod", "value": [1.5, "4"]},  # labels that are not a map
            {"metric": POD},  # no value
            {"metric": POD, "value": [1.5, "NaN"]},  # a number (NaN): kept
        ]
    )
    assert len(decoded.rows) == 1
    assert decoded.rows[0][:2] == (IDENT, "")
    assert math.isnan(decoded.rows[0][2])


def test_a_row_that_is_not_an_object_makes_the_answer_unreadable():
    with pytest.raises(UnreadableAnswerError, match="^not an instant vector$"):
        SignalRows(Interned()).keep([["metric", "value"]])
    with pytest.raises(UnreadableAnswerError, match="^not a range matrix$"):
        StepRows(Interned(), 0.0, 60.0, 5).keep([7])


def test_answers_of_one_source_share_each_target_tuple():
    interned = Interned()
    first, second = SignalRows(interned), BucketRows(interned)
    first.keep([{"metric": POD, "value": [1.5, "1"]}])
    second.keep([{"metric": {**POD, "le": "+Inf"}, "value": [1.5, "2"]}])
    assert first.rows[0][0] is second.rows[0][0]


def test_bucket_rows_read_each_upper_bound():
    decoded = BucketRows(Interned())
    decoded.keep(
        [
            {"metric": {**POD, "le": "0.5"}, "value": [1.5, "3"]},
            {"metric": {**POD, "le": "+Inf"}, "value": [1.5, "5"]},
            {"metric": {**POD, "le": "half"}, "value": [1.5, "5"]},  # unreadable bound: kept as None
            {"metric": POD, "value": [1.5, "5"]},  # no le: kept as None
            {"metric": {**POD, "le": 0.5}, "value": [1.5, "5"]},  # le not text: skipped
        ]
    )
    assert [(bound, value) for _ident, bound, value in decoded.rows] == [
        (0.5, 3.0),
        (math.inf, 5.0),
        (None, 5.0),
        (None, 5.0),
    ]


def test_step_rows_number_each_point_from_the_range_start():
    # start 1000 s, step 60 s: points at 1000, 1060, 1240 are steps 0, 1 and 4
    decoded = StepRows(Interned(), 1000.0, 60.0, 5)
    decoded.keep(
        [
            {"metric": POD, "values": [[1000, "1"], [1060.0, "x"], [1240, "3"], [1300, "bad pair", 1]]},
            {"metric": POD, "values": "not a list"},
        ]
    )
    assert [(j, v) for _ident, j, v in decoded.rows if not math.isnan(v)] == [(0, 1.0), (4, 3.0)]
    assert [j for _ident, j, v in decoded.rows if math.isnan(v)] == [1]  # an unreadable value reads as NaN


def test_label_rows_keep_only_rows_whose_labels_are_all_text():
    decoded = LabelRows(Interned())
    decoded.keep(
        [
            {"metric": {"pod": "qwen-0", "block_size": "16"}, "value": [1.5, "1"]},
            {"metric": {"pod": "qwen-0", "block_size": 16}, "value": [1.5, "1"]},
        ]
    )
    assert decoded.rows == [({"pod": "qwen-0", "block_size": "16"}, "1")]


def test_rows_past_the_bound_are_counted_not_kept():
    decoded = SignalRows(Interned(), max_rows=2)
    decoded.keep([{"metric": POD, "value": [1.5, "1"]}] * 2)
    assert decoded.refusal() is None
    decoded.keep([{"metric": POD, "value": [1.5, "1"]}] * 3)
    assert decoded.rows == []
    assert decoded.refusal() == (
        "answer with 5 series, more than the limit of 2: narrow the selection (--namespace, --server, --pod, "
        "--model-name)"
    )


def test_buckets_of_more_targets_than_a_signal_query_may_have_are_refused(monkeypatch):
    monkeypatch.setattr(rows_module, "MAX_PROMETHEUS_ROWS", 2)
    decoded = BucketRows(Interned())  # 2 targets x MAX_HISTOGRAM_BUCKETS rows
    decoded.keep([{"metric": {**POD, "pod": f"qwen-{i}", "le": "+Inf"}, "value": [1.5, "1"]} for i in range(3)])
    assert decoded.refusal() == (
        "answer with 3 series of more than 2 targets (the limit): narrow the selection (--namespace, --server, "
        "--pod, --model-name)"
    )
    assert decoded.rows == []
