"""The CLI entry point: every subcommand is listed and loads."""

from click.testing import CliRunner

from kvpilot.cli import COMMANDS, cli


def test_help_lists_every_subcommand():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in ["operator", "render", "kv", "simulate", "diagnose", "alert-hook", "demo"]:
        assert name in result.output
    assert set(COMMANDS) == {"operator", "render", "kv", "simulate", "diagnose", "alert-hook", "demo"}


def test_unknown_command_is_a_usage_error():
    result = CliRunner().invoke(cli, ["no-such-command"])
    assert result.exit_code == 2
