"""docs/user-guide.md says the same as the code: every command's options (names and defaults) equal
click's own parameter list, and every example runs as written.

The guide's visible rule: a line of a ``sh`` block marked ``# needs …`` (a cluster, the network, a
running server) is not run; a line marked ``# exit N`` must exit N; every other line must exit 0.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click

from kvpilot.cli import cli
from tests.conftest import REPO

GUIDE = REPO / "docs" / "user-guide.md"
BIN = Path(sys.executable).parent


def _documented_options() -> dict[str, dict[str, str]]:
    """``{command: {option name: documented default}}`` from the guide's "Options of every command"."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("## Options of every command", 1)[1].split("\n## ", 1)[0]
    documented: dict[str, dict[str, str]] = {}
    command = None
    for line in section.splitlines():
        heading = re.match(r"### `kvpilot ([a-z-]+)", line)
        if heading:
            command = heading.group(1)
            documented[command] = {}
        elif command and line.startswith("| `-"):
            names_cell, default_cell = (cell.strip() for cell in line.strip("|").split("|")[:2])
            for name in re.findall(r"`(-[^`]+)`", names_cell):
                documented[command][name] = default_cell.strip("`")
    return documented


def _click_options() -> dict[str, dict[str, str]]:
    """The same shape from click: every visible option's names and the default its --help shows."""
    ctx = click.Context(cli)
    found: dict[str, dict[str, str]] = {}
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None
        sub = click.Context(command, info_name=name, parent=ctx)
        found[name] = {}
        for param in command.params:
            if not isinstance(param, click.Option) or param.hidden or param.name == "help":
                continue
            record = param.get_help_record(sub)
            shown = re.search(r"\[(?:[^\]]*?; )?default: ([^;\]]+)", record[1] if record else "")
            for opt in (*param.opts, *param.secondary_opts):
                found[name][opt] = shown.group(1).strip() if shown else "—"
    return found


def test_every_command_s_options_and_defaults_are_documented_as_click_has_them():
    documented, actual = _documented_options(), _click_options()
    assert set(documented) == set(actual), "a command without its options table in docs/user-guide.md"
    for command in actual:
        missing = set(actual[command]) - set(documented[command])
        extra = set(documented[command]) - set(actual[command])
        assert not missing and not extra, f"kvpilot {command}: undocumented {missing}, not an option {extra}"
        for opt, default in actual[command].items():
            assert documented[command][opt] == default, f"kvpilot {command} {opt}: default"


def _examples() -> list[tuple[str, int | None]]:
    """Each line of each ``sh`` block: (line, expected exit status; None = not run)."""
    lines: list[tuple[str, int | None]] = []
    for block in re.findall(r"```sh\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.S):
        for line in block.splitlines():
            if not line.strip():
                continue
            comment = line.split(" #", 1)[1] if " #" in line else ""
            expected = re.search(r"\bexit (\d+)", comment)
            lines.append((line, None if "needs " in comment else int(expected.group(1)) if expected else 0))
    return lines


def test_the_rule_marks_cluster_and_network_lines():
    examples = dict(_examples())
    assert any(line.startswith("kubectl apply") for line in examples)
    assert all(status is None for line, status in examples.items() if line.startswith(("kubectl", "make")))
    assert sum(status is not None for status in examples.values()) >= 8  # most examples run


def test_every_example_that_needs_no_cluster_runs_as_written(tmp_path):
    for folder in ("tests", "manifests"):
        (tmp_path / folder).symlink_to(REPO / folder)
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "COLUMNS": "80",
        "HF_HUB_OFFLINE": "1",  # no network: examples that need it are marked
    }
    for line, expected in _examples():
        if expected is None:
            continue
        # each example is bounded by its own arguments (--duration); the timeout only guards a hang
        result = subprocess.run(
            ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == expected, f"{line}\nexit {result.returncode}\n{result.stderr[-2000:]}"
        assert "Traceback" not in result.stderr, line


def test_no_help_shows_click_s_markers_literally():
    # click's no-rewrap marker is the character \b (U+0008); a raw docstring would print backslash-b
    from click.testing import CliRunner

    for name in cli.list_commands(click.Context(cli)):
        output = CliRunner().invoke(cli, [name, "--help"]).output
        assert "\\b" not in output, name
