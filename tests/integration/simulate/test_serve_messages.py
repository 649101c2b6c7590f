"""What `kvpilot simulate --serve` says: when it stops (--duration: one line, exit 0; a signal: one
line, exit 0) and, at --speed S, what the served rates and latencies mean.
"""

from __future__ import annotations

import os
import signal
import subprocess

from kvpilot.commands.simulate.server import start_lines
from tests.integration.simulate._server import BIN, get
from tests.support.waiting import stop_process, wait_for

KVPILOT = str(BIN / "kvpilot")


def test_duration_ends_the_server_with_one_line_and_exit_0():
    # 60 simulated s at 100x = 0.6 s of wall time; the subprocess timeout bounds it generously
    result = subprocess.run(
        [KVPILOT, "simulate", "idle", "--serve", "127.0.0.1:0", "--speed", "100", "--duration", "1m"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("serving http://127.0.0.1:")
    assert lines[1] == "stops after --duration 60 s of simulated time = 0.6 s wall (exit 0)"
    assert lines[2].startswith("--speed 100: 100 simulated seconds per wall-clock second")
    assert "rate()s over the counters read 100x" in lines[2]
    assert "latencies" in lines[2]
    assert lines[-1].startswith("stopped: --duration 60 s of simulated time served (")
    assert len(lines) == 4


def test_a_signal_ends_the_server_with_one_line_and_exit_0(tmp_path):
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [KVPILOT, "simulate", "idle", "--serve", "127.0.0.1:0"], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        line = wait_for(lambda: next((x for x in log.read_text().splitlines() if x.startswith("serving")), None), 30)
        url = line.split()[1]
        assert get(url + "/health")[0] == 200
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        stop_process(proc)
    lines = log.read_text().splitlines()
    assert lines[1] == "runs until stopped (SIGTERM or Ctrl-C; exit 0)"  # speed 1: no rate note
    assert lines[-1].startswith("stopped by a signal after ")
    assert lines[-1].endswith("of simulated time (exit 0)")


def test_start_lines_at_speed_1_and_with_a_duration():
    # 30 min = 1,800 simulated s at 1x = 1,800 s wall; speed 1 needs no note on rates
    assert start_lines(1.0, 1800.0) == ["stops after --duration 1,800 s of simulated time = 1,800 s wall (exit 0)"]
    # 0.5x: 600 s simulated = 1,200 s wall; rates read half the simulated rates
    lines = start_lines(0.5, 600.0)
    assert lines[0].endswith("= 1,200 s wall (exit 0)")
    assert "read 0.5x the simulated" in lines[1]
