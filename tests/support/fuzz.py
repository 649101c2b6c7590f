"""What the command fuzzers (render, kv, recordings) share: the example count, one CLI run, its property.

Each run gets a fresh hypothesis seed, CI included (``tests/conftest.py`` forces one, prints it in the
header and after a failure; ``--hypothesis-seed=N`` replays it). :data:`EXAMPLES` is 500 under CI and 100
locally (a developer's run of one file stays short on a shared machine); ``KVPILOT_FUZZ_EXAMPLES`` sets it.

The property every command fuzzer holds a command to: exit with one of its documented codes; a refusal is
exactly one ``kvpilot: error: …`` line on stderr (or click's usage error for a bad option, naming it);
never an exception out of the command (exit 70 for a user), never more than :data:`CPU_SECONDS_PER_EXAMPLE`
of CPU or :data:`MEMORY_BYTES_PER_EXAMPLE` of memory for one input (the bounds of ``kvpilot.text.documents``
keep every input small to work on).
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import sys
import time
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

from click.testing import CliRunner

from kvpilot.cli import cli
from tests.conftest import in_ci

#: Examples per fuzz test: at least 500 in CI.
EXAMPLES = int(os.environ.get("KVPILOT_FUZZ_EXAMPLES") or (500 if in_ci() else 100))
#: CPU seconds one input may cost a command (in process; the slowest seen is far below).
CPU_SECONDS_PER_EXAMPLE = 5.0
#: Address space one input may add to the process (the bounds keep every input far below).
MEMORY_BYTES_PER_EXAMPLE = 1024 * 2**20


#: What docs/security.md ("Terminal safety") says never reaches a terminal: control characters (category Cc),
#: line and paragraph separators, bidirectional overrides and isolates.
_UNSAFE = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def _one_safe_line(text: str) -> bool:
    return not any(unicodedata.category(c) in ("Cc", "Zl", "Zp") or c in _UNSAFE for c in text)


@dataclass
class Outcome:
    """One CLI run: exit code, stdout, stderr lines, CPU seconds."""

    code: int
    stdout: str
    errors: list[str]
    cpu: float


class _OverBudgetError(BaseException):
    """Raised inside a command that spent its CPU budget (SIGPROF): the example fails instead of hanging; a
    ``BaseException``, so no ``except Exception`` of the command swallows it.
    """


@contextlib.contextmanager
def _budget(cpu_seconds: float, memory_bytes: int) -> Iterator[None]:
    """Bound what runs inside: CPU time by ``ITIMER_PROF`` (an exception, not a hang) and address space by
    ``RLIMIT_AS`` set to the process's size now + ``memory_bytes`` (a ``MemoryError``, not the machine's RAM).
    """

    def over(_signum: int, _frame: object) -> None:
        raise _OverBudgetError(f"more than {cpu_seconds} s of CPU for one input")

    # the budget is the command's: a tracer set around it (hypothesis's explain phase traces every line of every
    # example under Python < 3.12) is off inside, or a 0.3 s input costs 20x that (a 500-deep YAML list: > 5 s)
    tracer = sys.gettrace()
    sys.settrace(None)
    previous = signal.signal(signal.SIGPROF, over)
    signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    size = _address_space()
    if size is not None:
        limit = size + memory_bytes
        resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        sys.settrace(tracer)


def _address_space() -> int | None:
    """This process's virtual size in bytes (``VmSize`` of /proc/self/status), None off Linux."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def invoke(args: list[str], results: tuple[int, ...], refusals: tuple[int, ...], stdin: bytes | None = None) -> Outcome:
    """Run ``kvpilot ARGS`` in process (click's runner) and check what every command owes any input.

    The run is bounded by :data:`CPU_SECONDS_PER_EXAMPLE` of CPU and :data:`MEMORY_BYTES_PER_EXAMPLE` more
    address space: beyond either the example fails (``_OverBudgetError``, ``MemoryError``) rather than hangs.

    Args:
        args: the command line after ``kvpilot``.
        results: exit codes of a computed answer (``render``: 0; ``kv``: 0, 1; ``diagnose``: 0-3).
        refusals: exit codes of a refusal, which must be exactly one ``kvpilot: error:`` line, or click's usage
            error whose last line names the option (``Error: Invalid value for '--kv-memory': …``); a code in
            both, such as ``diagnose``'s 3, is a refusal when stderr is not empty.
        stdin: bytes for ``-``.

    Raises:
        AssertionError: an exception escaped the command, the exit code is neither, a refusal was not one
            safe ``kvpilot: error:`` line (no control character, line separator or bidi control).
    """
    started = time.process_time()
    with _budget(CPU_SECONDS_PER_EXAMPLE, MEMORY_BYTES_PER_EXAMPLE):
        result = CliRunner().invoke(cli, args, input=stdin)
    cpu = time.process_time() - started
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}"
    )
    assert result.exit_code in results + refusals, (result.exit_code, result.output[-2000:])
    assert all(_one_safe_line(line) for line in result.stderr.splitlines()), result.stderr
    errors = result.stderr.splitlines()
    if result.exit_code in refusals and (result.exit_code not in results or result.stderr):
        if errors and errors[0].startswith("Usage: "):  # click's usage error: its last line names the option
            assert errors[-1].startswith("Error: "), result.stderr
            assert "'-" in errors[-1] or "'CONFIG'" in errors[-1], result.stderr
            errors = [errors[-1]]
        else:
            assert len(errors) == 1, result.stderr
            assert errors[0].startswith("kvpilot: error: "), result.stderr
    return Outcome(result.exit_code, result.stdout, errors, cpu)
