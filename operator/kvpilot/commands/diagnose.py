"""`kvpilot diagnose`: not built yet (see the open issues)."""

from __future__ import annotations

import click

from kvpilot.commands._common import fail


@click.command(name="diagnose", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def command(args: tuple[str, ...]) -> None:
    """Not built yet."""
    fail("'diagnose' is not built yet")
