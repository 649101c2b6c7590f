"""docs/user-guide.md says the same as the code: every command's options are the tables generated from the
click commands (``make docs``), every option has a help text, and every example runs as written.

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
from kvpilot.commands._docs import BEGIN, END, missing_help, options_markdown, replace_generated
from tests.conftest import REPO

GUIDE = REPO / "docs" / "user-guide.md"
BIN = Path(sys.executable).parent


def test_the_options_tables_are_what_the_commands_say():
    """The guide's generated part equals the generator's output on today's commands (drift fails here)."""
    text = GUIDE.read_text(encoding="utf-8")
    assert replace_generated(text, options_markdown(cli)) == text, "run make docs"


def test_every_option_of_every_command_has_a_help_text():
    assert missing_help(cli) == []


def test_every_option_is_in_its_command_s_table_with_its_default():
    """Read back from the guide as a reader sees it: each command's table names every option click has,
    with the default its --help shows (an independent reading of click's own help records).
    """
    text = GUIDE.read_text(encoding="utf-8").split(BEGIN, 1)[1].split(END, 1)[0]
    tables = {
        m.group(1): m.group(2) for m in re.finditer(r"### `kvpilot ([a-z-]+)[^`]*`\n(.*?)(?=\n### |\Z)", text, re.S)
    }
    ctx = click.Context(cli, info_name="kvpilot")
    assert set(tables) == set(cli.list_commands(ctx))
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        sub = click.Context(command, info_name=name, parent=ctx)
        rows = {}
        for line in tables[name].splitlines():
            if line.startswith("| `-"):
                cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]
                for opt in re.findall(r"`(-[^`]+)`", cells[0]):
                    rows[opt] = cells[2].strip("`")
        for param in command.params:
            if not isinstance(param, click.Option) or param.hidden or param.name == "help":
                continue
            record = param.get_help_record(sub)
            shown = re.search(r"\[(?:[^\]]*?; )?default: ([^;\]]+(?:\([^)]*\))?)", record[1] if record else "")
            for opt in (*param.opts, *param.secondary_opts):
                assert opt in rows, f"kvpilot {name} {opt}: not in the guide"
                assert rows[opt] == (shown.group(1).strip() if shown else "—"), f"kvpilot {name} {opt}: default"


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


#: Words the first pages used that a newcomer cannot know: an internal nickname for the demo, the name of the
#: library behind the sandbox and its mode, the name the docs give the measured vLLM run.
JARGON = ("embedded default", "kmock", "strict", "founding")


def test_readme_guide_and_every_help_use_no_word_a_newcomer_cannot_know():
    from click.testing import CliRunner

    texts = {"README.md": (REPO / "README.md").read_text(encoding="utf-8"), "docs/user-guide.md": GUIDE.read_text()}
    for name in ["", *cli.list_commands(click.Context(cli))]:
        texts[f"kvpilot {name} --help"] = CliRunner().invoke(cli, [*name.split(), "--help"]).output
    for where, text in texts.items():
        prose = re.sub(r"\]\([^)]*\)", "]", text).lower()  # a link's target is an address, not a word to read
        for word in JARGON:
            assert word not in prose, f"{where}: {word!r}"
