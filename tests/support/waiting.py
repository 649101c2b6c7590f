"""Bounded waits and process shutdown shared by the tests: poll, never sleep to synchronise."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def wait_for(probe: Callable[[], T], timeout: float = 10.0, interval: float = 0.02, what: str = "") -> T:
    """Poll ``probe`` until it returns something truthy and return it; fail the test after ``timeout`` s.

    ``interval`` (s) is the polling interval of a bounded wait, not synchronisation by sleep.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what or probe}; last value: {last!r}")


def stop_process(proc: subprocess.Popen | None, grace: float = 15.0) -> None:
    """Stop a server a test started, by its PID: SIGTERM, then SIGKILL after ``grace`` seconds."""
    if proc is None or proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def stays_false(probe: Callable[[], Any], window: float, interval: float = 0.05, what: str = "") -> None:
    """Poll ``probe`` for ``window`` seconds and fail the test as soon as it returns something truthy.

    For asserting that something does *not* happen (a retry, a second create) over a window the caller
    derives from when it would happen (e.g. a retry policy's whole schedule); not a way to synchronise.
    """
    deadline = time.monotonic() + window
    while time.monotonic() < deadline:
        seen = probe()
        if seen:
            pytest.fail(f"{what or probe} happened within {window}s: {seen!r}")
        time.sleep(interval)
