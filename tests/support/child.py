"""Run a command in a child process and measure it: exit code, output, wall time and peak RSS.

Peak RSS is measured by a small trampoline process that starts the command and reaps it with
``os.wait4``. Reaping the command directly would not do: Linux keeps a process's ``ru_maxrss`` across
``execve`` from the memory it had before, and a child forked from a large test process starts with
that process's resident size (a pytest process of 450 MiB made a 60 MiB ``kvpilot diagnose`` read as
456 MiB). The trampoline is a fresh interpreter: what it forks starts from its ~10 MiB.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

# argv: write-fd, command...; runs the command with the inherited stdio, writes "maxrss_kib cpu_s" to
# write-fd, exits with the command's exit code
_TRAMPOLINE = """import os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
os.write(int(sys.argv[1]), f"{usage.ru_maxrss} {usage.ru_utime + usage.ru_stime}".encode())
sys.exit(os.waitstatus_to_exitcode(status))
"""


@dataclass
class ChildRun:
    """What :func:`run_measured` saw: ``rss_kib`` is the command's ``ru_maxrss`` (KiB on Linux),
    ``cpu_seconds`` its user + system time.
    """

    code: int
    stdout: str
    stderr: str
    seconds: float
    rss_kib: int
    cpu_seconds: float


def run_measured(argv: list[str], budget: float) -> ChildRun:
    """Run ``argv``; it is killed (and the caller's assertion fails) when it outlives ``budget`` seconds.

    Both pipes are drained by threads; the trampoline and the command share a new process group,
    killed together on the budget.
    """
    started = time.monotonic()
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", _TRAMPOLINE, str(write_end), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        pass_fds=(write_end,),
        start_new_session=True,
    )
    os.close(write_end)
    out: dict[str, str] = {}
    readers = [
        threading.Thread(target=lambda n=n, f=f: out.__setitem__(n, f.read()), daemon=True)
        for n, f in (("stdout", proc.stdout), ("stderr", proc.stderr))
    ]
    for r in readers:
        r.start()
    killer = threading.Timer(budget, lambda: os.killpg(proc.pid, signal.SIGKILL))
    killer.start()
    try:
        code = proc.wait()
        measured = os.read(read_end, 128).decode().split()
    finally:
        killer.cancel()
        os.close(read_end)
    for r in readers:
        r.join(timeout=budget)
    elapsed = time.monotonic() - started
    assert elapsed < budget, f"{argv[:4]} still running after {budget} s (killed)"
    assert len(measured) == 2, f"{argv[:4]}: no measurement (exit {code})"
    return ChildRun(code, out.get("stdout", ""), out.get("stderr", ""), elapsed, int(measured[0]), float(measured[1]))
