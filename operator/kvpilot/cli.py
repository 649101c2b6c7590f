"""The one entry point: ``kvpilot <command>``.

Thin by design: each subcommand lives in its own module under :mod:`kvpilot.commands`
(one module per subcommand, as kr8s's CLI does) and is imported only when invoked, so
``kvpilot kv`` does not pay for kopf or the Kubernetes client.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from typing import cast

import click

from kvpilot import __version__

#: Exit status of an unexpected error inside kvpilot (a bug): ``EX_SOFTWARE`` of BSD's
#: ``sysexits.h``, beside diagnose's ``EX_USAGE`` (64) and never one of its verdict codes (0-3).
EXIT_INTERNAL_ERROR = 70
#: Set to 1 to see the traceback of an unexpected error instead of the one-line report.
DEBUG_ENV = "KVPILOT_DEBUG"

#: subcommand name -> (module under kvpilot.commands, attribute, one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "operator": ("operator", "command", "Run the VLLMServer operator (kopf run options pass through)."),
    "render": ("render", "command", "Print the Pod and Service a VLLMServer becomes, offline."),
    "kv": ("kv", "command", "KV bytes/token, capacity, concurrency and feasibility from config.json."),
    "simulate": ("simulate", "command", "Run the vLLM engine model: report, --serve /metrics, or --record."),
    "diagnose": ("diagnose", "command", "Read-only bottleneck diagnosis of vLLM servers."),
    "alert-hook": ("alert_hook", "command", "Webhook receiver: answers firing alerts with a diagnosis."),
    "demo": ("demo_command", "command", "Every part on this machine: operator, KV math, engine, diagnosis; no GPU."),
}


#: U+2011 NON-BREAKING HYPHEN: stands in for "-" while click wraps help text (see :class:`HelpFormatter`).
_NO_BREAK_HYPHEN = "\u2011"


class HelpFormatter(click.HelpFormatter):
    """click's help formatter, except that a line never breaks at a hyphen, only at spaces.

    click wraps help with ``textwrap``'s ``break_on_hyphens`` and offers no way to turn it off
    (pallets/click issue 3362), so a flag at the end of a line came out as ``--limits-`` / ``from-cluster``.
    The text is wrapped with each ``-`` replaced by a non-breaking hyphen of the same width, and
    :meth:`getvalue` puts the ``-`` back: the widths click computes are those of the printed text.
    """

    def write_text(self, text: str) -> None:
        """Write ``text`` wrapped (overrides ``click.HelpFormatter.write_text``), never at a hyphen."""
        super().write_text(text.replace("-", _NO_BREAK_HYPHEN))

    def write_dl(self, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        """Write the option list (overrides ``click.HelpFormatter.write_dl``); help texts never break at a hyphen."""
        super().write_dl([(term, text.replace("-", _NO_BREAK_HYPHEN)) for term, text in rows], col_max, col_spacing)

    def getvalue(self) -> str:
        """The formatted help (overrides ``click.HelpFormatter.getvalue``), with its hyphens restored."""
        return super().getvalue().replace(_NO_BREAK_HYPHEN, "-")


class HelpContext(click.Context):
    """A click context that formats ``--help`` with :class:`HelpFormatter`."""

    formatter_class = HelpFormatter


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use, each formatting its help with
    :class:`HelpFormatter`.

    Its methods override ``click.Group``'s (not marked ``@typing_extensions.override``: importing
    typing_extensions would cost every start its import; docs/performance.md, "CLI start-up").
    """

    context_class = HelpContext

    def list_commands(self, _ctx: click.Context) -> list[str]:
        """The subcommands' names, in :data:`COMMANDS`' order."""
        return list(COMMANDS)

    def get_command(self, _ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The click command named ``cmd_name``, its module imported now; None for an unknown name."""
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module, attr, _ = entry
        # each COMMANDS entry names a module's click command (tests/unit/test_cli_imports.py loads them all)
        command = cast(click.Command, getattr(importlib.import_module(f"kvpilot.commands.{module}"), attr))
        command.context_class = HelpContext  # its --help wraps as the group's does
        return command

    def format_commands(self, _ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """``--help``'s command list from :data:`COMMANDS`' one-line helps, importing no command module."""
        rows = [(name, help_) for name, (_, _, help_) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=__version__, prog_name="kvpilot")  # not package metadata: 60 fewer modules
def cli() -> None:
    """kvpilot: run vLLM on Kubernetes and see, with numbers, why it is slow.

    \b
    Start here:
      kvpilot demo                      everything, no cluster, no GPU
      kvpilot kv config.json --kv-memory 2.5GiB --max-model-len 8192
      kvpilot diagnose --prometheus http://127.0.0.1:9090
    """


def main() -> None:
    """Console-script entry point.

    Any exception a command did not turn into its own one-line error (a bug) ends here: one line
    on stderr naming the exception, "report this", and exit status :data:`EXIT_INTERNAL_ERROR`
    (70), so automation never reads a crash as a verdict. ``KVPILOT_DEBUG=1`` re-raises it.
    """
    try:
        cli(prog_name="kvpilot")
    except Exception as exc:  # the CLI boundary: every unexpected error, one line
        if os.environ.get(DEBUG_ENV) == "1":
            raise
        from kvpilot.text.safe import one_line  # here: only an error pays for its regular expressions

        detail = one_line(exc, limit=300)
        click.echo(
            f"kvpilot: internal error: {type(exc).__name__}{': ' + detail if detail else ''}"
            f" (a bug in kvpilot: please report this with the command line; {DEBUG_ENV}=1 shows the traceback)",
            err=True,
        )
        sys.exit(EXIT_INTERNAL_ERROR)


if __name__ == "__main__":  # pragma: no cover
    main()
