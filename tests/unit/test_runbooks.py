"""Every runbook opens with what to do: its decision table first, then how to confirm, then why the alert fires."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

RUNBOOKS = sorted((Path(__file__).resolve().parents[2] / "docs" / "runbooks").glob("*.md"))


@pytest.mark.parametrize("path", RUNBOOKS, ids=lambda p: p.stem)
def test_a_runbook_opens_with_its_decision_table(path):
    lines = path.read_text().splitlines()
    assert lines[0].startswith(f"# {path.stem} ")
    body = [line for line in lines[1:] if line.strip()]
    assert body[0] == "## Decision table"
    assert body[1].startswith("| ")  # the table itself
    assert body[2].startswith("|---")
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[:3] == ["## Decision table", "## Confirm", "## Why it fires"]
    # no formula before the table: the reasoning (thresholds, dips, noise) comes under "Why it fires"
    before = "\n".join(lines[: lines.index("## Decision table")])
    assert not re.search(r"[<>=+]|\bx\b", before.split("\n", 1)[1] if "\n" in before else "")


def test_there_are_runbooks():
    assert len(RUNBOOKS) >= 8
