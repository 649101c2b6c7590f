"""The real-server tier's table: each load's truth against each source's verdict, with and without flags.

    python -m tests.realserver.table BASETEMP/realserver-table.json

The tier writes that file at the end of its session (``test_real_server.py``); this prints it as Markdown.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLUMNS = ("metrics-url +flags", "metrics-url", "prometheus +flags", "prometheus", "recording +flags", "recording")


def markdown(doc: dict[str, dict]) -> str:
    head = ["server / load", "scheduler's truth (queued share)", *COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in doc.items():
        truth = row["truth"]
        expected = row["expected"]
        cells = []
        for col in COLUMNS:
            got = row["verdicts"].get(col, {}).get("verdict")
            cells.append(f"{got}" if got in expected else f"**{got}** (miss)")
        share = f"{truth['limit']} ({truth['queued_share']:.2f})"
        lines.append(f"| {name} | {share} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.realserver.table realserver-table.json")
    print(markdown(json.loads(Path(sys.argv[1]).read_text())))
