"""kvpilot.text.layout: a table only when every cell fits on one line, else one record per block;
shell lines that keep a flag with its value.
"""

from __future__ import annotations

import io

from rich.console import Console

from kvpilot.text.layout import command_lines, records

HEADERS = ["scenario", "verdict", "change"]
ROWS = [
    ["kv-exhaustion", "kv_cache_exhaustion", "--gpu-memory-utilization 0.92 -> 0.95"],
    ["prefix-thrash", "prefix_cache_ineffective", "--kv-transfer-config (KV offload to CPU) None -> enabled"],
]


def _render(width: int, **kwargs) -> list[str]:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None)
    console.print(records(console, HEADERS, ROWS, **kwargs))
    return out.getvalue().splitlines()


def test_wide_terminal_gets_one_row_per_record():
    lines = _render(200)
    # widest row: 13 + 24 + 56 characters of cells + 2 separating spaces x 2 + cell padding: well under 200
    assert any("kv-exhaustion" in line and "kv_cache_exhaustion" in line and "0.95" in line for line in lines)
    assert len(lines) == 1 + 1 + 2  # header, rule, two rows


def test_narrow_terminal_gets_blocks_and_never_splits_a_word():
    lines = _render(60, heading_columns=2)
    assert max(len(line.rstrip()) for line in lines) <= 60
    assert lines[0].strip() == "kv-exhaustion  kv_cache_exhaustion"
    assert lines[1].split() == ["change", "--gpu-memory-utilization", "0.92", "->", "0.95"]
    # 'change' label (6) + 2 spaces of indent + 2 of padding leave 50 columns: the second change wraps on a space
    words = {w for row in ROWS for cell in row for w in cell.split()}
    printed = {w for line in lines for w in line.split()}
    assert words <= printed  # every word printed whole


def test_blank_and_dash_cells_are_left_out_of_blocks():
    out = io.StringIO()
    console = Console(file=out, width=20, color_system=None)  # the table needs 28
    console.print(records(console, ["scenario", "verdict", "change"], [["healthy", "healthy", "-"]], heading_columns=2))
    assert out.getvalue().splitlines() == ["healthy  healthy"]


def test_command_lines_keep_flags_with_values_and_mark_breaks():
    argv = "vllm serve Qwen/Qwen2.5-1.5B-Instruct --gpu-memory-utilization 0.6 --max-model-len 8192 --port 8000"
    lines = command_lines(argv.split(), width=50)
    assert lines == [
        "  vllm serve Qwen/Qwen2.5-1.5B-Instruct \\",
        "    --gpu-memory-utilization 0.6 \\",
        "    --max-model-len 8192 --port 8000",
    ]
    assert all(len(line) <= 50 for line in lines)
    # the shell reads it back as the same argv
    assert " ".join(line.rstrip(" \\").strip() for line in lines).split() == argv.split()
    assert command_lines(argv.split(), width=200) == ["  " + argv]
