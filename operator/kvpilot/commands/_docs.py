"""The user guide's "Options of every command", generated from the click commands themselves.

Each command's table lists every visible option as its ``--help`` shows it: the names, what the option
takes (click's metavar: ``DURATION``, ``[text|json]``, ``INTEGER RANGE``), the default ``--help`` prints,
and the help text with click's own notes (range, required). docs/user-guide.md holds the output between
two marker lines (:data:`BEGIN`, :data:`END`); ``make docs`` rewrites it and a test fails when it drifts,
so an option added to a command is documented by regenerating, never by hand.

The group is passed in (``kvpilot.cli.cli``): this module sits below the entry point in the layers and
never imports it. Every command is loaded, so this is for ``make docs`` and the tests, never for a
command's start-up.
"""

from __future__ import annotations

import re

import click

BEGIN = "<!-- BEGIN generated options: make docs (the click commands' own options); do not edit by hand -->"
END = "<!-- END generated options -->"

#: Markdown that would change a cell's meaning: the column separator, emphasis, code spans, and a ``<`` that
#: opens an HTML tag (``<token in FILE>``; ``0<x<=1`` is text). An underscore inside a word, as in
#: max_num_seqs, is never emphasis in GitHub-flavoured Markdown.
_MARKDOWN = re.compile(r"[\\|*`]|<(?=/|!|\?|[A-Za-z][A-Za-z0-9-]*(?:\s|/?>))")


def _cell(text: str) -> str:
    """``text`` as a Markdown table cell, read as written (GitHub-flavoured Markdown's escapes)."""
    return _MARKDOWN.sub(lambda m: "\\" + m.group(0), " ".join(text.split()))


def _code(text: str) -> str:
    """``text`` as a code span in a table cell: only the column separator needs its escape there."""
    return "`" + text.replace("|", "\\|") + "`"


def _usage(name: str, command: click.Command, ctx: click.Context) -> str:
    """``kvpilot NAME ARGS`` as the usage line shows the arguments (``[SCENARIO]`` when optional)."""
    pieces = [param.make_metavar(ctx) for param in command.params if isinstance(param, click.Argument)]
    return " ".join(["kvpilot", name, *pieces])


def _root(group: click.Group) -> click.Context:
    """The context ``kvpilot`` runs its commands in (the group's own settings: ``-h`` as well as ``--help``)."""
    return click.Context(group, info_name="kvpilot", **group.context_settings)


def _commands(group: click.Group) -> list[tuple[str, click.Command, click.Context]]:
    """``(name, command, its context)`` of every command, in the group's order."""
    root = _root(group)
    found = []
    for name in group.list_commands(root):
        command = group.get_command(root, name)
        if command is None:  # list_commands names only commands get_command loads
            raise RuntimeError(f"kvpilot {name}: listed by the group but does not load")
        found.append((name, command, click.Context(command, info_name=name, parent=root, **command.context_settings)))
    return found


def _options(command: click.Command, ctx: click.Context) -> list[click.Option]:
    """The options ``--help`` lists, without ``--help`` itself."""
    help_option = command.get_help_option(ctx)
    return [p for p in command.get_params(ctx) if isinstance(p, click.Option) and not p.hidden and p is not help_option]


def missing_help(group: click.Group) -> list[str]:
    """``kvpilot CMD --option`` of every visible option without a help text (its row would say nothing)."""
    return [
        f"kvpilot {name} {max(param.opts, key=len)}"
        for name, command, ctx in _commands(group)
        for param in _options(command, ctx)
        if not (param.help or "").strip()
    ]


def command_table(name: str, command: click.Command, ctx: click.Context) -> list[str]:
    """The Markdown lines of one command: its heading, one line of what it does, its options' table."""
    lines = [
        f"### `{_usage(name, command, ctx)}`",
        "",
        _cell(command.get_short_help_str(limit=200)),
        "",
        "| option | takes | default | what it does |",
        "|---|---|---|---|",
    ]
    for param in _options(command, ctx):
        names = ", ".join(_code(opt) for opt in (*param.opts, *param.secondary_opts))
        takes = "—" if param.is_flag or param.count else _code(param.make_metavar(ctx))
        extra = param.get_help_extra(ctx)
        default = _code(extra["default"]) if "default" in extra else "—"
        notes = [value for key, value in extra.items() if key in ("range", "required") and isinstance(value, str)]
        text = (param.help or "").strip() + (f" [{'; '.join(notes)}]" if notes else "")
        lines.append(f"| {names} | {takes} | {default} | {_cell(text)} |")
    return lines


def options_markdown(group: click.Group) -> str:
    """Every command's table, in the group's order, between :data:`BEGIN` and :data:`END`."""
    lines = [BEGIN, ""]
    for name, command, ctx in _commands(group):
        lines += [*command_table(name, command, ctx), ""]
    return "\n".join([*lines, END])


def replace_generated(text: str, generated: str) -> str:
    """``text`` with the part from :data:`BEGIN` to :data:`END` (both included) replaced by ``generated``.

    Raises:
        ValueError: the markers are missing, repeated or out of order.
    """
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"the file needs one {BEGIN!r} line and, after it, one {END!r} line")
    head, rest = text.split(BEGIN, 1)
    return head + generated + rest.split(END, 1)[1]
