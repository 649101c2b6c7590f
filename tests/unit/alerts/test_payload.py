"""kvpilot.alerts.payload: bodies that are not JSON, JSON of the wrong shape, too many alerts, labels that
name no target. Each bad body is one error naming what is wrong, never an exception of another type.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvpilot.alerts.payload import (
    BodyError,
    PayloadShapeError,
    TargetError,
    TooManyAlertsError,
    decode_body,
    parse_notification,
    target_of,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "webhooks"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"[" * 1000 + b"]" * 1000, "nested too deeply"),  # 2 KB: json.loads raises RecursionError
        (b"[" * 100_000, "nested too deeply"),
        (b'{"version": ' + b"9" * 5000 + b"}", "number too long"),  # past Python's 4,300-digit limit
        (b'{"version": "4", "alerts": [], "x": NaN}', "NaN is not a JSON number"),
        (b'{"x": -Infinity}', "-Infinity is not a JSON number"),
        (b"\xff\xfe{}", "not UTF-8 (byte 0)"),
        ('{"a": 1}'.encode("utf-16"), "not UTF-8"),  # JSON between systems is UTF-8 (RFC 8259 section 8.1)
        (b"{not json", "not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
        (b"", "not JSON (Expecting value at line 1 column 1)"),
        (b"\xef\xbb\xbf{}", "not JSON"),  # a byte order mark: RFC 8259 forbids adding one
    ],
)
def test_bodies_that_are_not_json_are_one_body_error(raw, reason):
    with pytest.raises(BodyError) as err:
        decode_body(raw)
    assert str(err.value).startswith("body: ")
    assert reason in str(err.value)
    assert "9999" not in str(err.value)  # the message never quotes the body


def test_a_number_of_4300_digits_is_read_and_one_more_is_not():
    # Python's limit (sys.get_int_max_str_digits, 4300 by default): at it the body is JSON, past it not
    assert decode_body(b"[" + b"9" * 4300 + b"]") == [int("9" * 4300)]
    with pytest.raises(BodyError, match="number too long"):
        decode_body(b"[" + b"9" * 4301 + b"]")


def test_nesting_python_reads_is_json_of_the_wrong_shape_not_a_crash():
    body = decode_body(b'{"version": "4", "alerts": [' + b"[" * 500 + b"]" * 500 + b"]}")
    with pytest.raises(PayloadShapeError, match=r"^alerts\[0\]: expected an object$"):
        parse_notification(body)
    body = decode_body(b'{"version": ' + b"[" * 500 + b"]" * 500 + b', "alerts": []}')
    with pytest.raises(PayloadShapeError, match="got list$"):  # named by type: a 500-deep str() is not made
        parse_notification(body)


def _alert(**over):
    alert = {"status": "firing", "labels": {"alertname": "A", "namespace": "llm", "pod": "qwen-7f3a2"}}
    alert.update(over)
    return alert


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "body: expected a JSON object"),
        ({"version": 4, "alerts": []}, "version: expected '4' (Alertmanager) or '1' (Grafana), got int"),
        ({"version": "\x1b[31m5", "alerts": []}, "got '5'"),  # quoted safely: escape removed
        ({"version": "4"}, "alerts: expected a list"),
        ({"version": "4", "alerts": [_alert(status="pending")]}, "alerts[0].status: expected 'firing' or 'resolved'"),
        ({"version": "4", "alerts": [_alert(labels={"pod": 7})]}, "alerts[0].labels.pod: expected a string"),
        ({"version": "4", "alerts": [_alert(labels=["a"])]}, "alerts[0].labels: expected an object of strings"),
        ({"version": "4", "alerts": [_alert(fingerprint=12)]}, "alerts[0].fingerprint: expected a string"),
        ({"version": "4", "alerts": [_alert(startsAt={"a": 1})]}, "alerts[0].startsAt: expected a string"),
        ({"version": "4", "alerts": [], "receiver": ["x"]}, "receiver: expected a string"),
        ({"version": "4", "alerts": [], "groupKey": 1}, "groupKey: expected a string"),
        ({"version": "4", "alerts": [], "externalURL": {}}, "externalURL: expected a string"),
        (
            {"version": "4", "alerts": [_alert(labels={"HF_TOKEN=hf_" + "a" * 30: 1})]},
            "alerts[0].labels.HF_TOKEN=[REDACTED]: expected a string",  # a key is quoted redacted
        ),
    ],
)
def test_json_of_the_wrong_shape_names_the_field(body, message):
    with pytest.raises(PayloadShapeError) as err:
        parse_notification(body)
    assert not isinstance(err.value, TooManyAlertsError)
    assert message in str(err.value)


def test_null_optional_fields_are_empty():
    got = parse_notification({"version": "1", "alerts": [_alert(fingerprint=None, startsAt=None)], "receiver": None})
    assert got.sender == "grafana"
    assert got.receiver == ""
    assert got.alerts[0].starts_at == ""
    assert len(got.alerts[0].fingerprint) == 16  # the stand-in fingerprint


def test_the_alert_limit_holds_at_its_value_and_refuses_one_more():
    body = {"version": "4", "alerts": [_alert() for _ in range(100)]}
    assert len(parse_notification(body, max_alerts=100).alerts) == 100
    body["alerts"].append(_alert())
    with pytest.raises(TooManyAlertsError) as err:
        parse_notification(body, max_alerts=100)
    assert str(err.value).startswith("alerts: 101 alerts, more than the 100 this receiver takes")
    assert len(parse_notification(body).alerts) == 101  # no limit given: all of them


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.json")))
def test_every_fixture_parses(name):
    raw = (FIXTURES / name).read_bytes()
    got = parse_notification(decode_body(raw), max_alerts=100)
    assert len(got.alerts) == len(json.loads(raw)["alerts"])
    assert got.sender in ("alertmanager", "grafana")


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ({"namespace": "llm", "model_name": "Qwen\u202e"}, "label model_name: contains control or format characters"),
        ({"namespace": "llm", "model_name": "a\x85b"}, "label model_name: contains control or format characters"),
        ({"namespace": "llm", "model_name": "\ud800"}, "label model_name: contains control or format characters"),
        ({"namespace": "llm", "pod": "qwen\x1b"}, "label pod: contains control or format characters"),
        ({"namespace": "Kube-System"}, "label namespace: not a Kubernetes namespace name"),
        ({"pod": "a" * 254}, "label pod: longer than 253 characters"),
        ({"alertname": "x"}, "labels: no namespace, pod or server label names a target"),
    ],
)
def test_labels_that_name_no_target(labels, message):
    with pytest.raises(TargetError) as err:
        target_of(parse_notification({"version": "4", "alerts": [_alert(labels=labels)]}).alerts[0])
    assert str(err.value) == message


def test_a_printable_model_name_is_taken_as_it_is():
    labels = {"namespace": "llm", "pod": "qwen-7f3a2", "model_name": "Qwen/Qwen2.5 7B (ünï)"}
    target = target_of(parse_notification({"version": "4", "alerts": [_alert(labels=labels)]}).alerts[0])
    assert (target.server, target.model_name) == ("qwen", "Qwen/Qwen2.5 7B (ünï)")
