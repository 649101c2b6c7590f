"""Fuzzed requests against the hook's HTTP endpoint (hypothesis, 500 examples): the hook on 127.0.0.1 (in a
thread of the test process, its diagnosis a stub that echoes the target so no Prometheus is needed)
gets bodies and headers built to break it. Every answer is one of the documented statuses, never a 500
(a header aiohttp's own parser refuses is its text/plain 400; every other answer is JSON);
a 200 carries one result per alert; every string of every answer is one safe line (no control or bidi
character, nothing a redaction would change); the hook's log holds no traceback, and every line of it can be
written as UTF-8.

The seed is fresh on every run (tests/conftest.py prints it; ``--hypothesis-seed=N`` replays a run).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import threading

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from kvpilot.alerts.hook import AlertHook, HookConfig, serve
from kvpilot.diagnose.model import Diagnosis, Report
from kvpilot.text.safe import redact, strip_controls
from tests.unit.alerts.test_payload_properties import JSON, bodies, valid_bodies

TOKEN = "fuzz-token"
STATUSES = {200, 400, 401, 408, 413, 422, 429}


def _echo(opts) -> Report:
    """A diagnosis that echoes its selectors (hostile ones included) into every string field."""
    target = {"namespace": opts.namespace, "pod": opts.pod, "server": opts.server, "model_name": opts.model_name}
    return Report(
        source=f"prometheus {opts.prometheus}",
        window_seconds=opts.window_seconds,
        notes=[f"model {opts.model_name}"],
        targets=[
            Diagnosis(
                verdict="healthy",
                severity="ok",
                confidence=1.0,
                target={**target, "engine": ""},
                evidence=[f"echo {opts.model_name}"],
                queries=[f'x{{model_name="{opts.model_name}"}}'],
            )
        ],
    )


class _Kept(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        LOGGED.append(record)


LOGGED: list[logging.LogRecord] = []


@pytest.fixture(scope="module")
def endpoint():
    logger = logging.getLogger("kvpilot.alert_hook")
    kept, level = _Kept(), logger.level
    logger.addHandler(kept)
    logger.setLevel(logging.INFO)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    state: dict = {}
    config = HookConfig(
        prometheus="http://alice:pw@127.0.0.1:9",
        bearer_token=TOKEN,
        max_body_bytes=64 * 1024,
        max_alerts=20,
        cache_seconds=0,
        max_diagnoses_per_minute=100_000,
        body_timeout_seconds=5,
        header_timeout_seconds=5,
    )

    async def start() -> None:
        state["server"] = await serve(AlertHook(config, diagnose=_echo), "127.0.0.1", 0)
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    assert ready.wait(30)
    yield state["server"].addresses[0][:2]
    asyncio.run_coroutine_threadsafe(state["server"].cleanup(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    logger.removeHandler(kept)
    logger.setLevel(level)


_AUTH = st.sampled_from(
    [f"Bearer {TOKEN}".encode()] * 6
    + [
        b"Bearer wrong",
        b"Bearer \xff\xfe",
        b"Basic \x00\x01",
        b"bearer " + TOKEN.encode(),
        b"",
        None,
    ]
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[bytes, bytes | None, str]:
    kind = draw(st.sampled_from(["valid", "valid", "body", "body", "json", "bytes"]))
    if kind == "valid":
        raw = json.dumps(draw(valid_bodies())).encode()
    elif kind == "bytes":
        raw = draw(st.binary(max_size=300))
    elif kind == "json":
        raw = json.dumps(draw(JSON)).encode()
    else:
        body = draw(bodies())
        raw = json.dumps(body).encode("utf-8", "surrogatepass") if draw(st.booleans()) else json.dumps(body).encode()
    content_type = st.sampled_from(["application/json"] * 8 + ["text/plain", "", "application/json; x=\x7f"])
    return raw, draw(_AUTH), draw(content_type)


def _safe_strings(value, where="answer"):
    if isinstance(value, str):
        assert strip_controls(value) == value, (where, value)
        assert redact(value) == value, (where, value)
    elif isinstance(value, dict):
        for k, v in value.items():
            _safe_strings(k, where)
            _safe_strings(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _safe_strings(v, f"{where}[{i}]")


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(req=requests())
@example(req=(b"[" * 1000 + b"]" * 1000, f"Bearer {TOKEN}".encode(), "application/json"))
@example(req=(b'{"version": ' + b"9" * 5000 + b"}", f"Bearer {TOKEN}".encode(), "application/json"))
@example(req=(b"{}", b"Bearer \xff\xfe", "application/json"))
def test_every_request_gets_a_documented_status_and_a_safe_answer(endpoint, req):
    raw, auth, content_type = req
    host, port = endpoint
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.putrequest("POST", "/alerts")
        if auth is not None:
            conn.putheader("Authorization", auth)
        if content_type:
            conn.putheader("Content-Type", content_type)
        conn.putheader("Content-Length", str(len(raw)))
        conn.endheaders(raw)
        resp = conn.getresponse()
        status, text, kind = resp.status, resp.read(), resp.getheader("Content-Type", "")
    finally:
        conn.close()
    event(f"status {status}")
    assert status in STATUSES, (status, text[:300])
    if not kind.startswith("application/json"):
        # a request line or header aiohttp's parser refuses: its own 400 (text/plain) to the sender
        event("status 400 from aiohttp's parser")
        assert status == 400, (status, kind, text[:300])
        assert kind.startswith("text/plain"), (status, kind, text[:300])
        return
    answer = json.loads(text)
    _safe_strings(answer)
    if status == 200:
        sent = json.loads(raw)
        assert len(answer["results"]) == len(sent["alerts"])
        for result in answer["results"]:
            assert (result["diagnosis"] is None) or (result["error"] is None)
    else:
        assert set(answer) == {"error"}
    assert not [r.getMessage() for r in LOGGED if r.exc_info or r.levelno >= logging.ERROR]
    # every log line can be written to a UTF-8 stream: no lone surrogate from the request survives into it
    assert not [m for m in (r.getMessage() for r in LOGGED) if not _utf8(m)]


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
