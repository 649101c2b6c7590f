"""The YAML alias bomb (a billion laughs) through the real CLI, in a child process with a time budget.

857 bytes of YAML inside ``env[].valueFrom``: nine levels of nine aliases, 9^9 leaves once expanded. PyYAML
loads it at once (it shares aliased nodes); before the bound, validation walked it for 105 s and 1.96 GB
until the process aborted. Now the composer counts every alias as the nodes it repeats and stops at
100,000: one line, exit 2, in well under a second. The child is measured by ``tests/support/child.py``
(wall time, peak RSS); a budget of 30 s kills a run that hangs as before, failing the test.
"""

from __future__ import annotations

import sys

import pytest

from tests.support.child import run_measured

HEAD = "apiVersion: kvpilot.dev/v1alpha1\nkind: VLLMServer\nmetadata: {name: qwen}\n"


def _bomb(indent: str) -> str:
    levels = ["a0: &a0 [" + ",".join(['"x"'] * 9) + "]"]
    levels += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "".join(f"{indent}{line}\n" for line in levels)


@pytest.mark.parametrize(
    ("argv", "text", "words"),
    [
        (
            ["render"],
            HEAD + "spec:\n  model: m\n  env:\n  - name: X\n    valueFrom:\n" + _bomb("      "),
            ": spec.env[0].valueFrom.a5[0]: the document expands to more than 100,000 nodes here",
        ),
        (
            ["simulate", "healthy", "--scenario-file"],
            "workload:\n" + _bomb("  "),
            "--scenario-file: ",
        ),
    ],
    ids=["render", "scenario-file"],
)
def test_an_alias_bomb_is_one_line_in_a_moment(tmp_path, argv, text, words):
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    assert len(path.read_bytes()) < 1024  # the was 857 bytes
    run = run_measured([sys.executable, "-m", "kvpilot.cli", *argv, str(path)], budget=30)
    assert run.code == 2, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("kvpilot: error: "), run.stderr
    assert words in lines[0], run.stderr
    assert "the bound is 100,000" in lines[0]
    assert run.cpu_seconds < 10
    assert run.rss_kib < 200 * 1024
