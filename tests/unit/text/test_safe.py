"""kvpilot.text.safe: control characters and escape sequences removed, secrets redacted, Markdown escaped."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpilot.text.safe import (
    REDACTED,
    contains_secret,
    is_secret_name,
    markdown_text,
    one_line,
    redact,
    redact_argv,
    safe,
    strip_controls,
)

HF = "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmN"  # the shape of a Hugging Face token: hf_ + 24+ letters/digits
OPENAI = "sk-" + "proj-" + "x" * 40


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a\x1b[31mred\x1b[0m b", "ared b"),  # CSI SGR removed whole, not leaving "[31m"
        ("\x1b]0;owned\x07title", "title"),  # OSC (window title) removed up to BEL
        ("\x1b]8;;http://x\x1b\\link", "link"),  # OSC 8 hyperlink up to ST
        ("x\x9b2Jy", "xy"),  # 8-bit CSI (U+009B) ED
        ("del\x7fete", "delete"),  # DEL
        ("bidi\u202eevil\u2066", "bidievil"),  # Trojan-Source overrides/isolates
        ("a\tb\rc\nd\u2028e\x85f", "a b c d e f"),  # line breaks and tabs become spaces
        ("nul\x00bell\x07", "nulbell"),
        ("plain ünïcode 中文 🙂", "plain ünïcode 中文 🙂"),  # printable text unchanged
    ],
)
def test_strip_controls(text, expected):
    assert strip_controls(text) == expected


def test_keep_newlines_keeps_only_newlines():
    assert strip_controls("a\nb\x1b[2Kc\r", keep_newlines=True) == "a\nbc "


@given(st.text())
def test_no_control_character_survives(text):
    out = safe(text)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in out)
    assert not set(out) & set("\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


@given(st.text())
def test_redact_is_idempotent(text):
    once = redact(text)
    assert redact(once) == once


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"token {HF} leaked", f"token {REDACTED} leaked"),
        (f"--api-key {OPENAI} --port 8000", f"--api-key {REDACTED} --port 8000"),
        ("--api-key=abc123", f"--api-key={REDACTED}"),
        ("HF_TOKEN=literal-value other", f"HF_TOKEN={REDACTED} other"),
        ('{"OPENAI_API_KEY": "v"}', f'{{"OPENAI_API_KEY": {REDACTED}}}'),
        ("Authorization: Bearer abc.def-ghi", f"Authorization: Bearer {REDACTED}"),
        ("ghp_" + "A" * 36, REDACTED),
        ("AKIA" + "ABCDEFGHIJKLMNOP", REDACTED),
        # prose and kvpilot's own numbers are untouched
        ("max_tokens=5 kv_cache_tokens: 123 sk-short", "max_tokens=5 kv_cache_tokens: 123 sk-short"),
    ],
)
def test_redact(text, expected):
    assert redact(text) == expected


def test_redact_argv():
    argv = ["vllm", "serve", "m", "--api-key", "s3cret", "--api-key=s3cret2", "--hf-token", HF]
    out = redact_argv(argv)
    assert out == ["vllm", "serve", "m", "--api-key", REDACTED, f"--api-key={REDACTED}", "--hf-token", REDACTED]
    assert "s3cret" not in " ".join(out)


def test_secret_names():
    for name in (
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "OPENAI_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "hf_token",
    ):
        assert is_secret_name(name), name
    for name in ("LMCACHE_CHUNK_SIZE", "KEYS", "MAX_TOKENS", "HF_HOME"):
        assert not is_secret_name(name), name
    assert contains_secret(f"x {HF}")
    assert not contains_secret("vllm serve Qwen/Qwen3-8B")


def test_one_line_and_markdown():
    assert one_line("a\n\n  b\x1b[1m c", limit=None) == "a b c"
    assert one_line("x" * 10, limit=5) == "xxxx…"
    # a newline cannot end a heading, | cannot open a table cell, [..](..) cannot become a link
    assert markdown_text("pod\n# injected | [x](http://e)") == "pod \\# injected \\| \\[x\\](http://e)"


def _reference_strip(text: str, keep_newlines: bool) -> str:
    """The module docstring's rule, one character at a time (escape sequences removed first)."""
    import unicodedata

    from kvpilot.text.safe import _ESCAPE_RE

    out = []
    for ch in _ESCAPE_RE.sub("", text):
        if ch == "\n" and keep_newlines:
            out.append(ch)
        elif ch in "\t\n\r\x0b\x0c\x85\u2028\u2029":  # line breaks and tabs: a space
            out.append(" ")
        elif not (
            unicodedata.category(ch) == "Cc"
            or "\u202a" <= ch <= "\u202e"
            or "\u2066" <= ch <= "\u2069"
            or ch in "\u00ad\u200b\u200c\u200d\u200e\u200f\u2060\u2061\u2062\u2063\u2064\ufeff"  # invisible
        ):
            out.append(ch)
    return "".join(out)


@settings(max_examples=500, deadline=None)
@given(
    text=st.text(
        alphabet=st.sampled_from(
            [chr(i) for i in range(0xA0)] + list("\u200b\u200d\u2028\u2029\u202a\u202e\u2066\u2069\ufeff\u00adé中")
        ),
        max_size=24,
    ),
    keep_newlines=st.booleans(),
)
def test_strip_controls_equals_the_per_character_rule(text, keep_newlines):
    assert strip_controls(text, keep_newlines=keep_newlines) == _reference_strip(text, keep_newlines)


_FRAGMENTS = ["--api-key", " ", "=", ": ", "HF_TOKEN", "API_KEY", "Bearer ", "bearer\t", "hf_", "sk-", "ghp_", "xoxb-"]


@settings(max_examples=500, deadline=None)
@given(parts=st.lists(st.sampled_from([*_FRAGMENTS, "a1B2c3D4e5F6g7H8i9J0kLmN", "AKIA", "eyJ", "."]), max_size=8))
def test_redact_without_a_trigger_literal_is_the_identity_and_with_one_matches_the_patterns(parts):
    """The pre-check never skips a text one of the four patterns would change."""
    from kvpilot.text import safe as module

    text = "".join(parts)
    full = strip_controls(text, keep_newlines=True)  # redaction sees the text as a terminal shows it
    for pattern in (module._API_KEY_RE, module._ASSIGN_RE, module._BEARER_RE):
        full = pattern.sub(lambda m: m.group(1) + REDACTED, full)
    full = module._TOKEN_RE.sub(REDACTED, full)
    assert redact(text) == full


@pytest.mark.parametrize(
    "text",
    [
        f"\x1b[1m{HF}\x1b[0m",  # a coloured log line: the escape touches the token
        "HF_TO\x07KEN=literal-value",  # a BEL inside the variable's name
        "HF_TOKEN=\x1b[31mliteral-value",  # an escape between the name and its value
        f"hf_\x00{HF[3:]}",  # a NUL inside the token
        f"hf_\u200b{HF[3:]}",  # a zero-width space inside the token (invisible on a terminal)
        f"{HF[:10]}\u00ad{HF[10:]}",  # a soft hyphen
        f"--api-key\x1b[0m {OPENAI}",
        f"Authorization: Bear\x7fer {OPENAI}",
        "http://user:pa\u202ess@host/x",  # a bidi override inside a URL's userinfo
        f"Model '\\x1b[1m{HF}' has no profile",  # an escape written out as text (the repr of a label)
        f"\\033[31m{HF}",
        f"\\u001b[0m{HF}",
        "Model 'HF_TO\\x07KEN=literal-value' has no engine profile",  # a BEL written out inside the name
        f"GPU 'hf_\\x00{HF[3:]}' has no profile",  # a NUL written out inside the token
        "HF_TO\\u0007KEN=literal-value",
        f"line 'model_name=\"\\x1b]8;;x\\x07{HF}\"'",  # a hyperlink (OSC 8) written out, touching the token
        f"'\\x1b]8;;http://x\\x1b\\\\{HF}'",  # the same ended by ST
    ],
)
def test_a_secret_beside_or_inside_a_control_character_is_redacted(text):
    """What a terminal shows of the text (controls and invisible characters gone) holds no secret."""
    for out in (redact(text), safe(text), one_line(text)):
        shown = strip_controls(out)
        assert REDACTED in shown, (text, out)
        for secret in ("a1B2c3D4e5F6", "literal-value", "x" * 20, "pass"):
            assert secret not in shown, out
    assert contains_secret(text)


def test_a_control_character_alone_is_no_secret():
    assert not contains_secret("pod\x1b[1m ready\x07")
    assert redact("pod\x1b[1m ready") == "pod\x1b[1m ready"  # nothing to redact: the text comes back as it was


def test_a_lone_surrogate_becomes_the_replacement_character():
    # JSON's "\ud800" and bytes decoded with surrogateescape leave lone surrogates, which no UTF-8 stream can carry
    # ('\ud800'.encode() raises): U+FFFD, as bytes.decode("utf-8", "replace") gives for a bad byte
    assert safe("model \ud800x") == "model \ufffdx"
    assert one_line("GET /\udcff from 127.0.0.1") == "GET /\ufffd from 127.0.0.1"
    safe("\udcff\ud83d").encode("utf-8")  # encodable: no UnicodeEncodeError
    # a surrogate pair written as two code points is still lone halves in a Python str
    assert safe("\ud83d\ude00") == "\ufffd\ufffd"
