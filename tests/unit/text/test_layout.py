"""kvpilot.text.layout: a table only when every cell fits on one line, else one record per block;
prose that never parts a figure from its unit; shell lines that keep a flag with its value.
"""

from __future__ import annotations

import io
import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text

from kvpilot.text.layout import UNITS, Prose, command_lines, paragraph, records, yaml_text

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


def _print(renderable, width: int, color: bool = False) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system="truecolor" if color else None, force_terminal=color).print(renderable)
    return out.getvalue()


#: a figure at the end of a line whose next line starts with a unit: the split the rule forbids
_SPLIT = re.compile(r"\d[ ]*\n[ ]*(?:" + "|".join(map(re.escape, UNITS)) + r")(?![\w%])")

SENTENCE = (
    "before vLLM started, the operator's pre-flight predicted 21,504 KV tokens from config.json, the weights "
    "and the node's GPU memory; vLLM reported 21,520 (-0.07 %)"
)


def test_rich_alone_parts_the_figure_from_its_unit_and_prose_does_not():
    # at 80 columns the line is full after "(-0.07": rich breaks at the space before "%)"
    assert _SPLIT.search(_print(Text(SENTENCE), 80))
    text = _print(Prose(SENTENCE), 80)
    assert not _SPLIT.search(text)
    assert text.splitlines()[-1] == "(-0.07 %)"
    assert " ".join(text.split()) == SENTENCE  # every word, in order, spaces restored
    assert "\ue000" not in text


def test_prose_keeps_styles_and_indents_in_paragraphs():
    styled = _print(Prose(Text(SENTENCE, style="bold")), 80, color=True)
    assert "\x1b[1m(-0.07 %)" in styled
    lines = _print(paragraph(SENTENCE, indent=2), 80).splitlines()
    assert lines[-1].rstrip() == "  (-0.07 %)"
    assert all(line.startswith("  ") for line in lines)


def test_a_unit_word_is_not_a_unit():
    # "3 seconds" and "8 GBs" are words after a number, not a unit symbol: they may part
    text = _print(Prose("x" * 70 + " 3 seconds"), 72)
    assert text.splitlines()[0].rstrip().endswith("3")


def test_prose_keeps_a_whole_phrase_on_one_line():
    # 70 x's, a space, "window: 3 s" = 82 characters: at 78 columns rich alone breaks after "window:"
    line = "x" * 70 + " window: 3 s"
    assert _print(Prose(line), 78).splitlines()[0].rstrip().endswith("window:")
    text = _print(Prose(line, whole=("window: 3 s",)), 78)
    assert text.splitlines()[-1].rstrip() == "window: 3 s"
    assert "\ue000" not in text


def test_records_values_keep_figures_with_units():
    out = io.StringIO()
    console = Console(file=out, width=40, color_system=None)
    console.print(
        records(console, ["what", "value"], [["a", "prefill takes about 66 -> 33 ms of TTFT at 8.22 ms per step"]])
    )
    assert not _SPLIT.search(out.getvalue())


_WORD = st.text(alphabet="abcdefgh-,.()", min_size=1, max_size=9)
_FIGURE = st.builds(lambda n, u: f"{n} {u}", st.integers(0, 99_999).map(lambda n: f"{n:,}"), st.sampled_from(UNITS))


@given(st.lists(st.one_of(_WORD, _FIGURE), min_size=1, max_size=40), st.integers(20, 100))
def test_prose_wraps_within_the_width_and_never_between_a_figure_and_its_unit(words, width):
    source = " ".join(words)
    text = _print(Prose(source), width)
    assert not _SPLIT.search(text)
    assert " ".join(text.split()) == " ".join(source.split())
    assert all(len(line) <= width for line in text.splitlines())


DIGEST = '{"sha256":"d7672c1393bd6aa2206d2282107e20da8c6e30fe86b41f0c2a7b0c3e1d9e8f7a6b5c4d3e2f1a0b9c8"}'


def test_yaml_text_folds_a_string_without_spaces_as_valid_yaml():
    import yaml

    status = {"status": {"kopf": {"last-handled-digest": DIGEST}, "phase": "Ready"}}
    plain = yaml.safe_dump(status, sort_keys=True, width=64)
    assert max(len(line) for line in plain.splitlines()) > 80  # PyYAML alone runs past the edge
    text = yaml_text(status, 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert yaml.safe_load(text) == status
    assert text.startswith('status:\n  kopf:\n    last-handled-digest: "')
    assert "  phase: Ready\n" in text  # everything else as PyYAML writes it


_YAML_VALUES = st.recursive(
    st.one_of(st.text(max_size=200), st.integers(), st.booleans()),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(alphabet="abc-", min_size=1), children, max_size=3)
    ),
    max_leaves=6,
)


@pytest.mark.parametrize("value", ["\x85", "a\x85b", "\u2028", "x\u2029y", "a " * 30 + "\x85"])
def test_yaml_text_keeps_unicode_line_breaks_in_a_value(value):
    # PyYAML with allow_unicode writes NEL raw into a single-quoted scalar and reads it back as a space
    import yaml

    assert yaml.safe_load(yaml_text({"status": value}, 80)) == {"status": value}


@given(_YAML_VALUES, st.integers(40, 120))
@example("\x85", 40)
def test_yaml_text_reads_back_as_the_same_value(data, width):
    import yaml

    text = yaml_text({"status": data}, width)
    assert yaml.safe_load(text) == {"status": data}


def test_command_lines_quote_tokens_and_part_a_flag_from_a_value_too_wide_to_share_a_line():
    import shlex

    path = "/opt/a clone/" + "x" * 70 + ".json"
    argv = ["kvpilot", "kv", "--config", path, "--max-model-len", "8192"]
    lines = command_lines(argv, width=80)
    # the flag cannot share a line with its 88-column value: the value stands alone, quoted for the space
    assert lines == ["  kvpilot kv --config \\", f"    '{path}' \\", "    --max-model-len 8192"]
    assert shlex.split(" ".join(line.removesuffix("\\") for line in lines)) == argv
