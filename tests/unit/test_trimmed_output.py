"""Text piped to a file or another program carries no trailing spaces (rich pads table cells to the width)."""

from __future__ import annotations

import io
from pathlib import Path

from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.commands._common import TrimmedLines

CONFIG = Path(__file__).resolve().parents[1] / "fixtures" / "hf-configs" / "Qwen__Qwen2.5-7B-Instruct.json"


def test_kv_text_piped_has_no_trailing_spaces():
    for width in ("60", "100", "200"):
        result = CliRunner().invoke(cli, ["kv", str(CONFIG), "--max-num-seqs", "64"], env={"COLUMNS": width})
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert len(lines) > 5
        assert [line for line in lines if line != line.rstrip()] == []


def test_trimmed_lines_trims_each_whole_line_and_keeps_the_rest():
    out = io.StringIO()
    stream = TrimmedLines(out)
    stream.write("a   \nb  ")
    stream.write(" c  \n\n")
    assert out.getvalue() == "a\nb   c\n\n"
    stream.write("tail")
    stream.flush()
    assert out.getvalue() == "a\nb   c\n\ntail"
