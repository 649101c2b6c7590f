"""`kvpilot diagnose` refuses times and windows that are not finite, and credential files it cannot use,
at parse time (exit 64, one line naming the option); a password in a URL is never printed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli

RECORDING = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "scenario_idle.om"


def invoke(*args):
    return CliRunner().invoke(cli, ["diagnose", "--no-kube", "--no-what-if", *args])


@pytest.mark.parametrize("end", ["nan", "NaN", "inf", "-inf", "1e400", "9" * 400])
def test_an_end_that_is_not_a_finite_time_is_a_usage_error(end):
    # float() reads every one of these; nan used to reach the query as time=nan and end in
    # "internal error: ValueError: cannot convert float NaN to integer"
    result = invoke("--recording", str(RECORDING), "--end", end)
    assert result.exit_code == 64, result.output
    assert "--end" in result.output
    assert "not a finite time" in result.output
    assert "Traceback" not in result.output


def test_a_finite_end_is_taken():
    result = invoke("--recording", str(RECORDING), "--end", "1764600000", "-o", "json")
    assert result.exit_code in (0, 1, 2), result.output


@pytest.mark.parametrize("window", ["9" * 400, "9" * 400 + "d"])
def test_a_window_that_overflows_is_a_usage_error(window):
    result = invoke("--recording", str(RECORDING), "--window", window)
    assert result.exit_code == 64
    assert "--window" in result.output
    assert "not a finite duration" in result.output


def test_the_longest_finite_window_is_taken():
    # 1e308 s is finite: the window is read as written (and covers the whole recording)
    result = invoke("--recording", str(RECORDING), "--window", "1" + "0" * 308, "-o", "json")
    assert result.exit_code in (0, 1, 2, 3)
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--prometheus-bearer-token-file", "{missing}"), "--prometheus-bearer-token-file: cannot read"),
        (("--prometheus-bearer-token-file", "{empty}"), "is empty"),
        (("--prometheus-basic-auth-file", "{token}"), "must hold USER:PASSWORD"),
        (("--prometheus-basic-auth-file", "{basic}", "--prometheus-bearer-token-file", "{token}"), "not both"),
    ],
)
def test_credential_files_it_cannot_use_are_usage_errors(tmp_path, args, needle):
    files = {name: tmp_path / name for name in ("missing", "empty", "token", "basic")}
    files["empty"].write_text("\n")
    files["token"].write_text("s3cret-token\n")
    files["basic"].write_text("alice:s3cret\n")
    argv = [a.format(**files) for a in args]
    result = invoke("--prometheus", "http://127.0.0.1:9", *argv)
    assert result.exit_code == 64, result.output
    assert needle in result.output, result.output
    assert "s3cret" not in result.output


def test_a_credential_file_without_prometheus_is_a_usage_error(tmp_path):
    token = tmp_path / "t"
    token.write_text("x")
    result = invoke("--recording", str(RECORDING), "--prometheus-bearer-token-file", str(token))
    assert result.exit_code == 64
    assert "works with --prometheus only" in result.output


def test_a_password_in_the_url_is_never_printed():
    from tests.support.prom import free_port

    port = free_port()
    result = invoke("--prometheus", f"http://alice:s3cret@127.0.0.1:{port}", "-n", "llm", "--timeout", "2s")
    assert result.exit_code == 3
    assert f"kvpilot: error: --prometheus http://127.0.0.1:{port}: connection refused" in result.output
    assert "s3cret" not in result.output
    assert "alice" not in result.output
    bad = invoke("--prometheus", "ftp://alice:s3cret@host")
    assert bad.exit_code == 64
    assert "s3cret" not in bad.output
    assert "ftp://host" in bad.output
    bad = invoke("--metrics-url", "http://alice:s3cret@host:8000")
    assert bad.exit_code == 64
    assert "s3cret" not in bad.output
    assert "http://host:8000/metrics" in bad.output
