#!/usr/bin/env python3
"""Rewrite docs/user-guide.md's "Options of every command" from the click commands (``make docs``).

Usage: ``.venv/bin/python scripts/generate-docs.py [--check]``. ``--check`` changes nothing and exits 1 when
the guide differs from what the commands say (tests/integration/test_user_guide.py checks the same).
The generator is :mod:`kvpilot.commands._docs`; this script only hands it the ``kvpilot`` group.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kvpilot.cli import cli
from kvpilot.commands._docs import missing_help, options_markdown, replace_generated

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "user-guide.md"


def main(argv: list[str]) -> int:
    """Write (or with ``--check`` compare) the guide's generated options; 1 on drift or an option without help."""
    undocumented = missing_help(cli)
    if undocumented:
        print("options without a help text: " + ", ".join(undocumented), file=sys.stderr)
        return 1
    text = GUIDE.read_text(encoding="utf-8")
    updated = replace_generated(text, options_markdown(cli))
    if "--check" in argv:
        if updated != text:
            print(f"{GUIDE.name}: the options differ from the commands: run make docs", file=sys.stderr)
            return 1
        return 0
    if updated != text:
        GUIDE.write_text(updated, encoding="utf-8")
        print(f"rewrote the options of {GUIDE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
