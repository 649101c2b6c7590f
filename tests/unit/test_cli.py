"""The CLI entry point: every subcommand is listed and loads."""

import os
import subprocess
import sys

from click.testing import CliRunner

from kvpilot.cli import COMMANDS, EXIT_INTERNAL_ERROR, cli


def test_help_lists_every_subcommand():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in ["operator", "render", "kv", "simulate", "diagnose", "alert-hook", "demo"]:
        assert name in result.output
    assert set(COMMANDS) == {"operator", "render", "kv", "simulate", "diagnose", "alert-hook", "demo"}


def test_unknown_command_is_a_usage_error():
    result = CliRunner().invoke(cli, ["no-such-command"])
    assert result.exit_code == 2


def _run_with_crash(message: str, *, debug: bool = False) -> subprocess.CompletedProcess:
    """``kvpilot kv x.json`` in a child whose config loader raises an unexpected exception (a bug)."""
    code = (
        "import kvpilot.commands.kv as kv, kvpilot.cli as cli\n"
        f"def boom(source): raise RuntimeError({message!r})\n"
        "kv.load_config = boom\n"
        "import sys; sys.argv = ['kvpilot', 'kv', 'x.json']\n"
        "cli.main()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "KVPILOT_DEBUG"} | ({"KVPILOT_DEBUG": "1"} if debug else {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)


def test_unexpected_exception_is_one_line_report_this_and_exit_70():
    token = "hf_" + "Z" * 30
    result = _run_with_crash(f"boom \x1b[31mred\x1b[0m {token}")
    assert result.returncode == EXIT_INTERNAL_ERROR == 70  # EX_SOFTWARE, never a diagnose verdict (0-3)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kvpilot: internal error: RuntimeError: boom red [REDACTED]")
    assert "report this" in lines[0]
    assert "Traceback" not in result.stderr
    assert "\x1b" not in result.stderr
    assert token not in result.stderr


def test_debug_env_shows_the_traceback():
    result = _run_with_crash("boom", debug=True)
    assert result.returncode == 1
    assert "Traceback" in result.stderr
    assert "RuntimeError: boom" in result.stderr
