"""Fuzzed webhook bodies through kvpilot.alerts.payload (hypothesis, 600 examples each): every body is
either a Notification whose alerts each name a checked target or carry a TargetError, or exactly one of
BodyError (400) / PayloadShapeError (422) / TooManyAlertsError (413), with a one-line, printable message
holding no secret and no more than a short quote of what was sent. Never another exception.

The seed is fresh on every run (tests/conftest.py prints it; ``--hypothesis-seed=N`` replays a run).
Run with ``--hypothesis-show-statistics`` to see how many examples ended in each outcome.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from kvpilot.alerts.payload import (
    MAX_LABEL_CHARS,
    BodyError,
    PayloadShapeError,
    TargetError,
    TooManyAlertsError,
    decode_body,
    parse_notification,
    target_of,
)
from kvpilot.text.safe import redact, strip_controls

MAX_ALERTS = 20
HF = "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmN"
#: strings a sender could put anywhere: terminal escapes, bidi overrides, line separators, NUL, lone
#: surrogates (JSON's \ud800 escapes decode to them), token shapes, PromQL injections, long runs
HOSTILE = st.sampled_from(
    [
        "\x1b[31mred\x1b[0m",
        "\x1b]0;pwned\x07",
        "a\u202eb",
        "a\u2028b",
        "nul\x00",
        "\ud800",
        "\udfff x",
        f"HF_TOKEN={HF}",
        "x --api-key sk-live-" + "k" * 24,
        "Bearer abc.def.ghi",
        'qwen"} or {__name__=~".+',
        "\\",
        "x" * 300,
        "",
    ]
)
NAMES = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
TEXT = st.one_of(HOSTILE, NAMES, st.text(max_size=12))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), TEXT)
JSON = st.recursive(SCALARS, lambda c: st.lists(c, max_size=3) | st.dictionaries(TEXT, c, max_size=3), max_leaves=6)
LABEL_KEYS = st.one_of(st.sampled_from(["alertname", "namespace", "pod", "server", "model_name", "job"]), TEXT)


def _mostly(common: st.SearchStrategy, rare: st.SearchStrategy) -> st.SearchStrategy:
    """``common`` nine times in ten, ``rare`` once."""
    return st.integers(0, 9).flatmap(lambda i: rare if i == 0 else common)  # one_of would weigh them alike


@st.composite
def target_labels(draw: st.DrawFn) -> dict[str, object]:
    labels: dict[str, object] = {"alertname": draw(TEXT)}
    for key in ("namespace", "pod", "server", "model_name"):
        if draw(st.booleans()):
            labels[key] = draw(_mostly(NAMES, TEXT))
    labels.update(draw(st.dictionaries(LABEL_KEYS, _mostly(TEXT, JSON), max_size=2)))
    return labels


@st.composite
def alerts(draw: st.DrawFn) -> object:
    alert = {
        "status": draw(_mostly(st.sampled_from(["firing", "resolved"]), JSON)),
        "labels": draw(_mostly(target_labels(), JSON)),
        "annotations": draw(_mostly(st.dictionaries(TEXT, TEXT, max_size=2), JSON)),
    }
    for key in ("fingerprint", "startsAt"):
        if draw(st.booleans()):
            alert[key] = draw(_mostly(TEXT, JSON))
    return draw(_mostly(st.just(alert), JSON))


@st.composite
def bodies(draw: st.DrawFn) -> object:
    many = st.lists(st.just({"status": "resolved"}), min_size=MAX_ALERTS - 1, max_size=MAX_ALERTS + 2)
    body = {
        "version": draw(_mostly(st.sampled_from(["4", "1"]), JSON)),
        "alerts": draw(_mostly(st.lists(alerts(), min_size=1, max_size=4), st.one_of(st.just([]), many, JSON))),
    }
    for key in ("receiver", "status", "groupKey", "externalURL", "commonLabels", "extra"):
        if draw(st.booleans()):
            body[key] = draw(_mostly(TEXT, JSON))
    return draw(_mostly(st.just(body), JSON))


def _encoded(draw: st.DrawFn, body: object) -> bytes:
    text = json.dumps(body, ensure_ascii=draw(st.booleans()))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: only the escaped form is UTF-8
        return json.dumps(body).encode("utf-8")


@st.composite
def raw_bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["json"] * 6 + ["cut", "mutated", "bytes", "deep", "digits", "constant"]))
    event(f"input: {kind}")
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "deep":
        n = draw(st.integers(1, 3000))
        return b'{"version": "4", "alerts": ' + b"[" * n + b"]" * n + b"}"
    if kind == "digits":
        return b'{"version": "4", "alerts": [], "x": ' + b"9" * draw(st.integers(4000, 6000)) + b"}"
    if kind == "constant":
        return (
            b'{"version": "4", "alerts": [], "x": ' + draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity"])) + b"}"
        )
    raw = _encoded(draw, draw(bodies()))
    if kind == "cut":
        return raw[: draw(st.integers(0, len(raw)))]
    if kind == "mutated":
        i = draw(st.integers(0, max(0, len(raw) - 1)))
        return raw[:i] + draw(st.binary(min_size=1, max_size=3)) + raw[i + 1 :]
    return raw


def _clean_message(message: str, prefix: str = "") -> None:
    assert message.startswith(prefix), message
    assert strip_controls(message) == message, repr(message)  # one line, no control or bidi character
    assert redact(message) == message, message  # nothing secret-shaped is quoted
    assert len(message) < 400, message


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


@pytest.mark.slow  # make test-unit skips it, make test runs it
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(raw=raw_bodies())
@example(raw=b"[" * 1000 + b"]" * 1000)  # was RecursionError: HTTP 500
@example(raw=b'{"version": ' + b"9" * 5000 + b"}")  # was ValueError (int digits): HTTP 500
@example(raw=b'{"version": "4", "alerts": [{"status": "firing", "labels": {"namespace": "a"}, "startsAt": [[[]]]}]}')
def test_every_body_is_a_notification_or_one_refusal(raw):
    try:
        body = decode_body(raw)
    except BodyError as exc:
        event("outcome: 400 not JSON")
        _clean_message(str(exc), prefix="body: ")
        return
    try:
        notification = parse_notification(body, max_alerts=MAX_ALERTS)
    except TooManyAlertsError as exc:
        event("outcome: 413 too many alerts")
        _clean_message(str(exc), prefix=f"alerts: {len(body['alerts'])} alerts, more than the {MAX_ALERTS}")
        return
    except PayloadShapeError as exc:
        event("outcome: 422 wrong shape")
        _clean_message(str(exc))
        return
    event("outcome: 200 notification")
    assert notification.sender in ("alertmanager", "grafana")
    assert len(notification.alerts) == len(body["alerts"]) <= MAX_ALERTS
    for alert in notification.alerts:
        assert alert.status in ("firing", "resolved")
        assert alert.fingerprint
        try:
            target = target_of(alert)
        except TargetError as exc:
            event("alert: refused target")
            _clean_message(str(exc), prefix="label")
            continue
        event("alert: target")
        assert not target.namespace or _DNS_LABEL.fullmatch(target.namespace)
        assert not target.pod or _DNS_SUBDOMAIN.fullmatch(target.pod)
        assert not target.server or _DNS_SUBDOMAIN.fullmatch(target.server)
        assert target.model_name.isprintable()
        assert len(target.model_name) <= MAX_LABEL_CHARS
        assert target.namespace or target.pod or target.server


@st.composite
def valid_bodies(draw: st.DrawFn) -> dict:
    n = draw(st.integers(0, 6))
    alerts = []
    for _ in range(n):
        labels = draw(st.dictionaries(LABEL_KEYS, TEXT, max_size=4))
        alerts.append(
            {
                "status": draw(st.sampled_from(["firing", "resolved"])),
                "labels": labels,
                "annotations": draw(st.dictionaries(TEXT, TEXT, max_size=2)),
                "fingerprint": draw(st.one_of(st.none(), st.from_regex(r"[0-9a-f]{16}", fullmatch=True))),
            }
        )
    return {"version": draw(st.sampled_from(["4", "1"])), "alerts": alerts, "receiver": draw(TEXT)}


@pytest.mark.slow  # make test-unit skips it, make test runs it
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=valid_bodies())
def test_a_well_formed_body_keeps_every_alert_and_label_as_sent(body):
    got = parse_notification(decode_body(json.dumps(body).encode()), max_alerts=MAX_ALERTS)
    assert got.receiver == body["receiver"]
    assert [dict(a.labels) for a in got.alerts] == [a["labels"] for a in body["alerts"]]
    assert [a.status for a in got.alerts] == [a["status"] for a in body["alerts"]]
    for alert, sent in zip(got.alerts, body["alerts"], strict=True):
        assert alert.fingerprint == (sent["fingerprint"] or alert.fingerprint)
        assert len(alert.fingerprint) == 16
