"""Every ``--help`` fits an 80-column terminal as click itself formats it: no line is longer, no example runs
past the edge, no option's help is cut short, and no flag name is broken across two lines.
"""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from kvpilot.cli import COMMANDS, HelpFormatter, cli

WIDTH = 80


def _help(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--help"], terminal_width=WIDTH, env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("args", [[], *([name] for name in COMMANDS)], ids=lambda a: " ".join(["kvpilot", *a]))
def test_help_fits_80_columns(args):
    lines = _help(*args).splitlines()
    too_long = [line for line in lines if len(line) > WIDTH]
    assert not too_long, "\n".join(too_long)


def _help_texts(name: str) -> list[tuple[str, str]]:
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    return [
        (max(p.opts, key=len), " ".join((p.help or "").split())) for p in command.params if isinstance(p, click.Option)
    ]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_option_s_help_ends_a_sentence(name):
    """A help text reads as a sentence: it ends with a full stop, never a dangling preposition before
    click's ``[default: ...]`` ("Diagnose a target once per (...)  [default: 5m]").
    """
    for opt, text in _help_texts(name):
        if opt == "--help" or not text:
            continue
        assert text.endswith((".", ".)")), f"kvpilot {name} {opt}: {text!r}"
        assert not re.search(r"\b(per|within|of|to|for|after)( \([^)]*\))?\.$", text), f"kvpilot {name} {opt}: {text!r}"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_no_flag_name_is_split_across_lines(name):
    text = _help(name)
    flags = set(re.findall(r"--[a-z][a-z0-9-]*[a-z0-9]", text))
    joined = re.sub(r"-\n\s+", "-", text)  # a line ending in "--limits-" continued by "from-cluster"
    for flag in flags:
        assert joined.count(flag) == text.count(flag), f"kvpilot {name}: {flag} is split across two lines"


@pytest.mark.parametrize("width", range(30, 61))
def test_the_help_formatter_breaks_lines_at_spaces_only(width):
    # click's own formatter breaks "--limits-from-cluster" after "--limits-" when it reaches the edge
    text = "Read limits from the VLLMServer spec with --limits-from-cluster and a well-known kube-config."
    plain = click.HelpFormatter(width=width)
    plain.write_dl([("--opt", text)])
    ours = HelpFormatter(width=width)
    ours.write_dl([("--opt", text)])
    ours.write_text(text)
    lines = ours.getvalue().splitlines()
    assert all(len(line) <= width for line in lines if " " in line.strip())
    assert not any(line.endswith("-") for line in lines), ours.getvalue()
    assert ours.getvalue().count("--limits-from-cluster") == 2
    assert "\u2011" not in ours.getvalue()
    words = " ".join(text.split())
    assert " ".join(ours.getvalue().split()).startswith("--opt " + words)  # every word, in order


def test_click_s_own_formatter_would_split_a_flag():
    """The reason for HelpFormatter: without it, some width puts a break inside a flag."""
    text = "Read limits from the VLLMServer spec with --limits-from-cluster and a well-known kube-config."
    split = []
    for width in range(30, 61):
        plain = click.HelpFormatter(width=width)
        plain.write_dl([("--opt", text)])
        split += [width] if any(line.endswith("-") for line in plain.getvalue().splitlines()) else []
    assert split
