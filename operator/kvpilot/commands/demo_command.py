"""The ``kvpilot demo`` click command: its options and ``--help``, nothing the demo itself needs.

The demo (:mod:`kvpilot.commands.demo`: rich, PyYAML, the sandbox, its sections) is imported when
the command runs, so ``kvpilot demo --help`` starts as fast as ``kvpilot --help``
(docs/performance.md, "CLI start-up").
"""

from __future__ import annotations

import time

import click

from kvpilot.commands._common import fail, trimmed_stdout


@click.command(name="demo")
@click.option("-v", "--verbose", is_flag=True, help="Print each section's detail, not its summary.")
def command(verbose: bool) -> None:
    """Every part of kvpilot on this machine: a VLLMServer becomes a pod, end to end, no cluster, no GPU.

    Starts a stand-in Kubernetes API server on 127.0.0.1 (kvpilot's sandbox), installs the CRD,
    applies the packaged experiment example, runs the real operator, plays the node openly (there
    is no GPU), then shows the KV math, the engine model against a measured vLLM run, a diagnosis
    of each engine scenario and one alert from rule to diagnosis. About 120 lines at 80 columns
    (--verbose: every section's detail); prints its run time last (docs/user-guide.md has
    measured times); leaves nothing behind.
    """
    from rich.console import Console
    from rich.text import Text

    from kvpilot.commands.demo import run
    from kvpilot.text.numbers import number

    try:
        import kmock  # noqa: F401
    except ImportError:
        fail("kvpilot demo needs kmock: pip install 'kvpilot[demo]'")
    # a terminal's width; piped: $COLUMNS, else 80 (rich's rule); lines without the spaces rich pads them with
    console = Console(file=trimmed_stdout())
    started = time.monotonic()
    try:
        run(console, verbose=verbose)
    except RuntimeError as exc:
        fail(f"demo failed: {exc}", code=1)
    console.print(Text(f"demo finished in {number(time.monotonic() - started, 1, 's')}", style="green"))
