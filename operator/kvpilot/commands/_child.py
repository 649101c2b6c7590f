"""Servers a command starts for itself (``kvpilot demo``'s Prometheus): they end when the command ends, however it ends.

A command stops its children in a ``finally`` block, but a command killed by SIGKILL (the OOM killer, ``kill -9``,
a CI job's timeout) runs no ``finally``: its Prometheus would keep its port and its data folder for good. On Linux
the child asks the kernel to send it SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``, prctl(2)), before it
runs the server's binary; elsewhere only the ``finally`` block stops it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import IO, Any

#: ``PR_SET_PDEATHSIG`` of ``<linux/prctl.h>``.
PR_SET_PDEATHSIG = 1


def _death_signal_setter() -> Callable[[], None] | None:
    """The ``preexec_fn`` that ties a child to this process (Linux), None where the kernel has no such call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def tie() -> None:  # runs in the child between fork and exec: prctl and getppid only
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the call: nobody would send the signal
            os.kill(os.getpid(), signal.SIGTERM)

    return tie


def start_tied(
    argv: Sequence[str], stdout: IO[Any] | int | None = None, stderr: IO[Any] | int | None = None
) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv)`` whose process gets SIGTERM when this one dies (module docstring).

    ``preexec_fn`` runs Python in the child before ``exec``; the function it runs here only calls ``prctl`` and
    ``getppid``, which take no lock another thread of this process could hold at the fork.
    """
    return subprocess.Popen(list(argv), stdout=stdout, stderr=stderr, preexec_fn=_death_signal_setter())
