"""Terminal layout that never breaks a word: tables when they fit, one record per block when not.

Rich folds a table cell mid-word when the terminal is narrower than the table (``kv_cache_exhau`` /
``stion``). The rule here is simple and checkable: a table is printed only when every cell fits on
one line at the console's width (``console.measure(table).maximum <= console.width``); otherwise each
row becomes a block — its heading columns on one line, then ``label  value`` lines whose values wrap
on spaces with a hanging indent. A word is split only if it is longer than the whole value column
(no identifier kvpilot prints is: the longest, a vLLM metric name, is under 45 characters).

Shell command lines wrap the way a shell reads them: tokens packed up to the width, a flag kept with
its value, a backslash at each break (:func:`command_lines`).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

Cell = str | Text


def _text(cell: Cell) -> Text:
    return cell if isinstance(cell, Text) else Text(str(cell))


def table_fits(console: Console, table: Table) -> bool:
    """True when ``table`` renders at ``console``'s width with no cell wrapped."""
    unbounded = console.options.update_width(10**6)  # rich clamps a measurement to the width it is given
    return console.measure(table, options=unbounded).maximum <= console.width


def records(
    console: Console,
    headers: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    *,
    title: str | None = None,
    heading_columns: int = 1,
) -> RenderableType:
    """``rows`` as a table when every cell fits on one line at ``console.width``, else as blocks.

    Args:
        console: where it will be printed (its width decides).
        headers: column headers; in blocks, the labels of the non-heading columns.
        rows: cells (plain strings are never parsed for markup; pass :class:`rich.text.Text` for style).
        title: printed above either layout.
        heading_columns: how many leading columns form a block's first line (joined by two spaces).

    Returns:
        A renderable for ``console.print``.
    """
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, header_style="bold", show_edge=False)
    for header in headers:
        table.add_column(header, no_wrap=True)
    for row in rows:
        table.add_row(*(_text(c) for c in row))
    if table_fits(console, table):
        return table
    parts: list[RenderableType] = [Text(title, style="italic")] if title else []
    labels = list(headers[heading_columns:])
    label_width = max((len(h) for h in labels), default=0)
    for row in rows:
        head = Text("  ").join(_text(c) for c in row[:heading_columns])
        head.stylize("bold", 0, len(_text(row[0])))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True, width=label_width, style="dim")
        grid.add_column(overflow="fold")  # folds only a word longer than the whole column
        for label, cell in zip(labels, row[heading_columns:], strict=True):
            if _text(cell).plain.strip() not in ("", "-"):
                grid.add_row(label, _text(cell))
        parts.append(head)
        if grid.row_count:
            parts.append(Padding(grid, (0, 0, 0, 2)))
    return Group(*parts)


def paragraph(text: Cell, indent: int = 0) -> RenderableType:
    """``text`` wrapped on spaces with every line indented by ``indent`` columns (unindented text is not
    padded to the console's width).
    """
    return Padding(_text(text), (0, 0, 0, indent), expand=False) if indent else _text(text)


def command_lines(argv: Sequence[str], width: int, indent: int = 2) -> list[str]:
    """``argv`` as shell lines of at most ``width`` columns, a backslash at each break, continuation lines
    indented two more, a ``--flag`` never separated from its value. A single token wider than the
    width gets a line of its own (never split).
    """
    groups: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("-") and "=" not in token and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            groups.append(f"{token} {argv[i + 1]}")
            i += 2
        else:
            groups.append(token)
            i += 1
    lines: list[str] = []
    current = " " * indent
    for group in groups:
        candidate = current + ("" if current.isspace() else " ") + group
        if len(candidate) + 2 > width and not current.isspace():
            lines.append(current + " \\")
            current = " " * (indent + 2) + group
        else:
            current = candidate
    lines.append(current)
    return lines
