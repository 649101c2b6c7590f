"""A server the demo starts (its Prometheus) ends when the demo is killed with SIGKILL, which runs no cleanup.

A parent process starts ``sleep 60`` the way the demo starts Prometheus (``kvpilot.commands._child.start_tied``),
prints its PID and waits; the test kills the parent with SIGKILL and watches the child. The control starts it with a
plain ``subprocess.Popen``: that child outlives its parent, which is the defect.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

PARENT = """
import subprocess, sys, time
from kvpilot.commands._child import start_tied
tied = sys.argv[1] == "tied"
argv = ["sleep", "60"]
child = start_tied(argv) if tied else subprocess.Popen(argv)
print(child.pid, flush=True)
time.sleep(60)
"""

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (an exited child nobody reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _child_after_parent_killed(mode: str) -> tuple[int, bool]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator")}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        assert _alive(pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 5
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        return pid, _alive(pid)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)


def test_a_tied_child_ends_when_its_parent_is_killed_with_sigkill():
    _, alive = _child_after_parent_killed("tied")
    assert not alive


def test_control_a_plain_child_outlives_its_parent():
    pid, alive = _child_after_parent_killed("plain")
    try:
        assert alive
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
