"""`kvpilot demo` read as a user reads it: at 80 and 200 columns, nothing split mid-word, the summary
within its line budget, the detail behind --verbose.
"""

from __future__ import annotations

import io
import re
import subprocess

import pytest
from rich.console import Console

from kvpilot.commands import demo, demo_analysis
from tests.integration.diagnose.scenario_flags import EXPECTED

#: The demo's budget at 80 columns (about 120 lines, room left for sections added later).
BUDGET_80 = 120
#: What must never be split across lines: every verdict the demo shows (the one each scenario is built
#: to produce, shared with the diagnose tests) and every vLLM flag it prints.
VERDICTS = tuple(EXPECTED[name] for name in demo_analysis.DIAGNOSED)


def _run(width: int, verbose: bool = False) -> list[str]:
    out = io.StringIO()
    demo.run(Console(file=out, width=width, color_system=None), verbose=verbose)
    return out.getvalue().splitlines()


@pytest.fixture(scope="module")
def outputs() -> dict[tuple[int, bool], list[str]]:
    return {(w, v): _run(w, v) for w, v in ((80, False), (200, False), (80, True))}


def _flags(lines: list[str]) -> set[str]:
    return set(re.findall(r"--[a-z][a-z0-9-]*[a-z0-9]", "\n".join(lines)))


@pytest.mark.parametrize("key", [(80, False), (200, False), (80, True)], ids=["80", "200", "80-verbose"])
def test_no_verdict_or_flag_is_split(outputs, key):
    lines = outputs[key]
    width = key[0]
    assert max(len(line.rstrip()) for line in lines) <= width
    joined = "".join(line.strip().removesuffix("\\").strip() for line in lines)
    # every flag name seen whole somewhere must not also occur split: joining lines adds no occurrence
    must = {"--gpu-memory-utilization", "--max-num-batched-tokens", "--kv-transfer-config", "--max-num-seqs"}
    for word in (*VERDICTS, *must):  # whole on some line (a table cell folded mid-word never is)
        assert sum(line.count(word) for line in lines) >= 1, word
    for word in (*VERDICTS, *_flags(lines), *must):
        assert joined.count(word) == sum(line.strip().count(word) for line in lines), word


def test_summary_fits_the_budget_at_80_columns(outputs):
    lines = outputs[(80, False)]
    assert len(lines) <= BUDGET_80, len(lines)
    text = "\n".join(lines)
    # the detail is a flag away and says so, with a command per part
    assert "kvpilot demo --verbose" in text
    assert "kvpilot simulate seed-lru --kv-offload-cpu 1.5GiB" in text
    # kubectl's table does not fit 80 columns: one column per line, NAME first, every printer column
    assert "qwen-experiment\n  MODEL            Qwen/Qwen2.5-1.5B-Instruct" in text


def test_wide_terminal_shows_kubectl_s_table_row(outputs):
    lines = outputs[(200, False)]
    row = next(line for line in lines if line.strip().startswith("qwen-experiment "))
    assert row.split()[:5] == ["qwen-experiment", "Qwen/Qwen2.5-1.5B-Instruct", "Ready", "21520", "2.63"]
    # one row per scenario: verdict and change on the scenario's line
    cap = next(line for line in lines if line.strip().startswith("max-num-seqs-cap "))
    assert cap.split()[1:3] == ["max_num_seqs_cap", "critical"]
    assert "--max-num-seqs 4 -> 16" in cap


def test_verbose_shows_evidence_and_the_status_as_yaml(outputs):
    text = "\n".join(outputs[(80, True)])
    assert "-o yaml" in text
    assert "\nstatus:\n" in text
    assert "  kvCacheTokens: 21520" in text
    assert "evidence" in text
    # prose wraps at any space between words ("Little's" / "law)" at 80 columns): read it as words
    assert "Little's law" in " ".join(text.split())
    summary = "\n".join(outputs[(80, False)])
    assert "-o yaml" not in summary
    assert "Little's law" not in " ".join(summary.split())


def _status_yaml(lines: list[str]) -> str:
    """The verbose status section: from ``status:`` to the next section's rule."""
    start = lines.index("status:")
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("─"))
    return "\n".join(lines[start:end])


def test_verbose_status_is_yaml_that_reads_back_whole(outputs):
    import json

    import yaml

    status = yaml.safe_load(_status_yaml(outputs[(80, True)]))["status"]
    assert status["phase"] == "Ready"
    assert status["kvCacheTokens"] == 21520
    # kopf's record is a JSON string with no space: folded over lines, never cut at the edge
    digest = json.loads(status["kopf"]["last-handled-digest"])
    assert set(digest) == {"sha256"}
    assert len(digest["sha256"]) == 64


#: a line ending in a figure and the next starting with its unit ("(-0.07" / "%)")
_FIGURE_UNIT_SPLIT = re.compile(r"\d[ ]*\n[ ]*(?:%|s|ms|B|KiB|MiB|GiB|GB)(?![\w%])")


@pytest.mark.parametrize("key", [(80, False), (80, True)], ids=["80", "80-verbose"])
def test_no_figure_is_parted_from_its_unit(outputs, key):
    text = "\n".join(outputs[key])
    assert not _FIGURE_UNIT_SPLIT.search(text), _FIGURE_UNIT_SPLIT.search(text)


@pytest.mark.parametrize("key", [(80, False), (80, True)], ids=["80", "80-verbose"])
def test_no_word_a_newcomer_cannot_know(outputs, key):
    text = " ".join("\n".join(outputs[key]).lower().split())  # a name wrapped over two lines is one name
    for jargon in ("kmock", "strict", "embedded default"):
        assert jargon not in text, jargon
    # the measured run is described; its name appears only as the title of the docs section it points to
    assert "founding" not in text.replace('docs/engine.md, "the founding measurement"', "")


#: a clone path long enough that the packaged config.json is wider than 80 columns, with a space to quote
LONG_CONFIG = "/tmp/review.Te3l/my clones/kvpilot/operator/kvpilot/data/Qwen2.5-1.5B-Instruct.config.json"


def test_the_closing_commands_paste_whole_with_a_long_clone_path():
    import shlex

    def section(ctx: demo.DemoContext) -> None:
        ctx.more.append(("KV math", f"kvpilot kv {shlex.quote(LONG_CONFIG)} --kv-memory 1GiB --max-model-len 8192"))

    out = io.StringIO()
    demo.run(Console(file=out, width=80, color_system=None), sections=[("kv", section)])
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "KV math:") + 1
    command = lines[start:]
    assert len(command) > 1  # it is continued, not cut
    assert any(LONG_CONFIG in line for line in command)  # the path is whole on its own line
    # every break is a backslash and the shell reads the lines back as the command
    assert all(line.endswith(" \\") for line in command[:-1])
    argv = ["kvpilot", "kv", LONG_CONFIG, "--kv-memory", "1GiB", "--max-model-len", "8192"]
    assert shlex.split(" ".join(line.removesuffix("\\") for line in command)) == argv
    # pasted as is into a POSIX shell (backslash-newline continues the line), it is the same argv
    script = "set -- " + "\n".join(command).lstrip() + '\nprintf "%s\\0" "$@"'
    shell = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=10, check=True)
    assert shell.stdout.split("\0")[:-1] == argv
    # only the token wider than the terminal runs past it
    assert all(len(line) <= 80 for line in command if LONG_CONFIG not in line)
