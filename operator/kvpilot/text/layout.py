"""Terminal layout that never breaks a word: tables when they fit, one record per block when not.

Rich folds a table cell mid-word when the terminal is narrower than the table (``kv_cache_exhau`` /
``stion``). The rule here is simple and checkable: a table is printed only when every cell fits on
one line at the console's width (``console.measure(table).maximum <= console.width``); otherwise each
row becomes a block — its heading columns on one line, then ``label  value`` lines whose values wrap
on spaces with a hanging indent. A word is split only if it is longer than the whole value column
(no identifier kvpilot prints is: the longest, a vLLM metric name, is under 45 characters).

Prose wraps on spaces too, but never between a figure and its unit: ``-0.07 %`` and ``3 s`` stay on
one line (:class:`Prose`; rich alone breaks at any space), nor inside a phrase it is told to keep whole (a label
and its value: ``window: 3 s``).

Shell command lines wrap the way a shell reads them: tokens packed up to the width, a flag kept with
its value, a backslash at each break (:func:`command_lines`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Sequence

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

Cell = str | Text

#: The units :mod:`kvpilot.text.numbers` writes after a figure, a space between (``12.5 s``, ``-0.07 %``,
#: ``0.57 GiB``): seconds, percent, bytes in IEC and SI multiples.
UNITS = ("%", "s", "ms", "B", "KiB", "MiB", "GiB", "TiB", "kB", "MB", "GB", "TB")
#: A space between a figure and one of :data:`UNITS` standing alone (``3 s``, not ``3 seconds``).
_FIGURE_UNIT_SPACE = re.compile(r"(?<=\d) (?=(?:" + "|".join(map(re.escape, UNITS)) + r")(?![\w%]))")
#: Stands in for such a space while rich wraps: one cell wide, not whitespace, never printed (a private-use
#: character, which no text kvpilot prints contains).
_GLUE = "\ue000"


class Prose:
    """Text (a string as written, or a :class:`rich.text.Text` with its styles) that wraps on spaces except
    between a figure and its unit.

    Rich breaks a line at any whitespace, so ``(-0.07 %)`` could end one line with ``(-0.07`` and start
    the next with ``%)``. Rich wraps (and measures) a copy in which each such space is a one-cell
    character that is not whitespace; the printed segments have their spaces back.
    """

    def __init__(self, text: Cell, whole: Sequence[str] = ()) -> None:
        """``whole``: phrases kept on one line wherever they occur (a label with its value, ``window: 3 s``)."""
        self.text = text if isinstance(text, Text) else Text(str(text))
        self.whole = tuple(phrase for phrase in whole if " " in phrase)

    def _glued(self) -> Text:
        glued = self.text.copy()
        plain = self.text.plain
        for phrase in self.whole:
            plain = plain.replace(phrase, phrase.replace(" ", _GLUE))
        glued.plain = _FIGURE_UNIT_SPACE.sub(_GLUE, plain)  # the same length: every span keeps its place
        return glued

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        for segment in console.render(self._glued(), options):
            yield Segment(segment.text.replace(_GLUE, " "), segment.style, segment.control)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self._glued())


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
                grid.add_row(label, Prose(cell))
        parts.append(head)
        if grid.row_count:
            parts.append(Padding(grid, (0, 0, 0, 2)))
    return Group(*parts)


def paragraph(text: Cell, indent: int = 0) -> RenderableType:
    """``text`` wrapped on spaces (never between a figure and its unit: :class:`Prose`) with every line
    indented by ``indent`` columns (unindented text is not padded to the console's width).
    """
    return Padding(Prose(text), (0, 0, 0, indent), expand=False) if indent else Prose(text)


def command_lines(argv: Sequence[str], width: int, indent: int = 2) -> list[str]:
    """``argv`` as shell lines of at most ``width`` columns, a backslash at each break, continuation lines
    indented two more, a ``--flag`` kept with its value while the two fit on a line. Each token is quoted
    for the shell (:func:`shlex.quote`), so the lines pasted into a shell give back ``argv``. A single
    token wider than the width gets a line of its own (never split): print the lines uncropped.
    """
    quoted = [shlex.quote(token) for token in argv]
    groups: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        pair = token.startswith("-") and "=" not in token and i + 1 < len(argv) and not argv[i + 1].startswith("-")
        if pair and indent + 2 + len(quoted[i]) + 1 + len(quoted[i + 1]) + 2 <= width:
            groups.append(f"{quoted[i]} {quoted[i + 1]}")
            i += 2
        else:
            groups.append(quoted[i])
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


def print_command(console: Console, argv: Sequence[str], indent: int = 2, style: str = "") -> None:
    """Print ``argv`` as :func:`command_lines` at the console's width, every line whole: a token wider than
    the console runs past its edge rather than being cut (Rich crops a ``no_wrap`` line to the width unless
    its overflow is ``ignore``), so the command can be pasted.
    """
    for line in command_lines(argv, console.width, indent=indent):
        console.print(Text(line, style=style), no_wrap=True, crop=False, overflow="ignore")


#: One atom of a double-quoted YAML scalar, never split across lines: an escape (``\"``, ``\\``, ``\x01``,
#: ``\u2028``, ``\U0001f600``) or one character.
_YAML_ATOM = re.compile(r"\\(?:x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)|.", re.S)


def _folded_double_quoted(value: str, first: int, rest: int) -> list[str]:
    """``value`` as a YAML double-quoted scalar in lines of at most ``first`` (then ``rest``) characters, each
    but the last ending in an escaped line break (``\\``; YAML 1.2 section 7.3.1: the break and the next line's
    leading spaces are not part of the value). A line never ends inside an escape, and a continuation never
    starts with a space (it would be dropped): so a line may run longer only for one escape that is longer.
    """
    import yaml

    quoted: str = yaml.safe_dump(value, default_style='"', width=10**9, allow_unicode=True).rstrip("\n")
    atoms = _YAML_ATOM.findall(quoted)
    lines: list[str] = []
    current = ""
    for i, atom in enumerate(atoms):
        limit = (first if not lines else rest) - 1  # room for the trailing backslash
        if current and len(current) + len(atom) > limit and atom != " " and i + 1 < len(atoms):
            lines.append(current + "\\")
            current = ""
        current += atom
    return [*lines, current]


#: line breaks YAML 1.1 reads beside ``\n`` and ``\r`` (NEL, LS, PS): PyYAML writes them raw into a plain or
#: single-quoted scalar when ``allow_unicode`` is on, and reads them back as line folds (``"\x85"`` came back
#: as ``" "``); in a double-quoted scalar they are escapes (``\N``, ``\L``, ``\P``)
_UNICODE_BREAKS = re.compile("[\x85\u2028\u2029]")


def yaml_text(data: object, width: int) -> str:
    """``data`` as block YAML (PyYAML, keys sorted, as ``kubectl get -o yaml`` prints it) in lines of at most
    ``width`` characters.

    PyYAML folds a string only at its spaces, so a long string without one (kopf's JSON digest, a URL) would
    run past the edge and a terminal would cut or wrap it. Such a string is written double-quoted and
    continued over lines with escaped line breaks instead: the YAML reads back as the same value. So is a
    string holding a Unicode line break (:data:`_UNICODE_BREAKS`).
    """
    import yaml

    long_values: dict[str, str] = {}

    def collect(node: object) -> object:
        if isinstance(node, dict):
            return {key: collect(value) for key, value in node.items()}
        if isinstance(node, list):
            return [collect(value) for value in node]
        if isinstance(node, str) and (
            any(len(word) > width // 2 for word in node.split()) or _UNICODE_BREAKS.search(node)
        ):
            key = f"KVPILOTFOLDED{len(long_values)}X"
            long_values[key] = node
            return key
        return node

    text: str = yaml.safe_dump(collect(data), sort_keys=True, width=max(20, width - 16), allow_unicode=True)
    out = []
    for line in text.splitlines():
        found = re.search(r"KVPILOTFOLDED\d+X", line)
        if not found:
            out.append(line)
            continue
        start = found.start()
        indent = len(line) - len(line.lstrip()) + 2
        pieces = _folded_double_quoted(long_values[found.group(0)], width - start, width - indent)
        out.append(line[:start] + pieces[0])
        out += [" " * indent + piece for piece in pieces[1:]]
    return "\n".join(out) + "\n"
