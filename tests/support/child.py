"""Run a command in a child process and measure it: exit code, output, wall time and peak RSS."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass


@dataclass
class ChildRun:
    """What :func:`run_measured` saw: ``rss_kib`` is ``os.wait4``'s ``ru_maxrss`` (KiB on Linux),
    ``cpu_seconds`` its user + system time.
    """

    code: int
    stdout: str
    stderr: str
    seconds: float
    rss_kib: int
    cpu_seconds: float


def run_measured(argv: list[str], budget: float) -> ChildRun:
    """Run ``argv``; the child is killed (and the caller's assertion fails) when it outlives ``budget`` seconds.

    Both pipes are drained by threads, then the child is reaped with ``os.wait4`` for its rusage.
    """
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: dict[str, str] = {}
    readers = [
        threading.Thread(target=lambda n=n, f=f: out.__setitem__(n, f.read()), daemon=True)
        for n, f in (("stdout", proc.stdout), ("stderr", proc.stderr))
    ]
    for r in readers:
        r.start()
    killer = threading.Timer(budget, proc.kill)
    killer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        killer.cancel()
    for r in readers:
        r.join(timeout=budget)
    proc.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.monotonic() - started
    assert elapsed < budget, f"{argv[:4]} still running after {budget} s (killed)"
    cpu = usage.ru_utime + usage.ru_stime
    return ChildRun(proc.returncode, out.get("stdout", ""), out.get("stderr", ""), elapsed, usage.ru_maxrss, cpu)
