"""Credentials never travel in a URL kvpilot prints: kvpilot.diagnose.sources.http.split_credentials and
the redaction backstop of kvpilot.text.safe for any URL with userinfo that reaches a message.
"""

from __future__ import annotations

import base64

import pytest

from kvpilot.diagnose.sources.http import (
    basic_authorization,
    bearer_authorization,
    display_url,
    split_credentials,
)
from kvpilot.diagnose.sources.prometheus import PrometheusSource
from kvpilot.text.safe import redact


@pytest.mark.parametrize(
    ("url", "bare", "userinfo"),
    [
        ("http://alice:s3cret@prom:9090", "http://prom:9090", "alice:s3cret"),
        ("https://alice:p%40ss%3A1@prom:9090/sub?x=1", "https://prom:9090/sub?x=1", "alice:p@ss:1"),  # decoded
        ("http://tok@[::1]:9090", "http://[::1]:9090", "tok:"),  # a user name alone (a token), IPv6
        ("http://a:b@c@host", "http://host", "a:b@c"),  # the last @ ends the userinfo (RFC 3986 3.2.1)
        ("http://prom:9090", "http://prom:9090", None),
        ("http://u:p@[unclosed", "http://[unclosed", None),  # not a URL urllib reads: cut all the same
    ],
)
def test_userinfo_is_taken_out_and_becomes_basic_auth(url, bare, userinfo):
    got, authorization = split_credentials(url)
    assert got == bare
    assert display_url(url) == bare
    if userinfo is None:
        assert authorization is None
    else:
        assert authorization == "Basic " + base64.b64encode(userinfo.encode()).decode()


def test_authorization_headers():
    # RFC 7617 section 2's example: Aladdin / open sesame
    assert basic_authorization("Aladdin", "open sesame") == "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
    assert bearer_authorization("abc") == "Bearer abc"


def test_the_prometheus_source_names_its_url_without_credentials():
    source = PrometheusSource("http://alice:s3cret@127.0.0.1:9/")
    assert source.url == "http://127.0.0.1:9"
    assert source._headers == {"Authorization": basic_authorization("alice", "s3cret")}
    given = PrometheusSource("http://alice:s3cret@127.0.0.1:9", authorization="Bearer t")
    assert given._headers == {"Authorization": "Bearer t"}  # the explicit header wins


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("--prometheus http://alice:s3cret@prom:9090: refused", "--prometheus http://[REDACTED]@prom:9090: refused"),
        ("git https://ghtoken@github.com/x", "git https://[REDACTED]@github.com/x"),
        ("see https://example.com/a@b and mailto:a@b.c", "see https://example.com/a@b and mailto:a@b.c"),
        ("http://[::1]:9090/x", "http://[::1]:9090/x"),
    ],
)
def test_redact_removes_the_userinfo_of_any_url(text, expected):
    assert redact(text) == expected
