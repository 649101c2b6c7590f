"""Peak memory and time of one replay whose window starts with a huge queue.

The ``kv-exhaustion`` recording (tests/fixtures/recordings/scenario_kv-exhaustion.om) with every
``vllm:num_requests_waiting`` sample set to ``--waiting`` (2,000,000 by default), diagnosed with the replay on
(``kvpilot diagnose --no-kube --recording FILE -o json``, the default 30 s ``--what-if-budget``) in a child
process: prints its wall time, peak RSS (``ru_maxrss`` of the child), exit code and what the replay said.

Run: python benchmarks/replay_backlog.py [--waiting 2000000] [--waiting 10000000]
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECORDING = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "recordings" / "scenario_kv-exhaustion.om"


def measure(waiting: int) -> dict[str, object]:
    """One child ``kvpilot diagnose`` on the recording with its queue at ``waiting``: seconds, peak RSS, answer."""
    text = re.sub(
        r"^(vllm:num_requests_waiting\{[^}]*\}) [0-9.]+ ",
        rf"\g<1> {float(waiting)!r} ",
        RECORDING.read_text(),
        flags=re.MULTILINE,
    )
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "queue.om"
        path.write_text(text)
        command = [sys.executable, "-m", "kvpilot.cli", "diagnose", "--no-kube", "--recording", str(path), "-o", "json"]
        start = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        seconds = time.monotonic() - start
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest child so far
    replay: dict[str, object] = {}
    if done.stdout.strip():
        (target,) = json.loads(done.stdout)["targets"]
        replay = target.get("replay") or {}
    predicted = replay.get("predicted") or {}
    return {
        "waiting": waiting,
        "exit": done.returncode,
        "seconds": round(seconds, 1),
        "peak_rss_mib": round(peak_kib / 1024),
        "replayed": bool(predicted),
        "mean_waiting": predicted.get("mean_waiting") if isinstance(predicted, dict) else None,
        "misses": replay.get("misses"),
        "stderr": done.stderr.strip().splitlines()[-1:] if done.stderr.strip() else [],
    }


def main() -> None:
    """Measure each ``--waiting`` in its own child (``ru_maxrss`` of children is the largest so far: smallest first)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", type=int, action="append", help="the queue gauge (requests); repeatable")
    args = parser.parse_args()
    for waiting in sorted(args.waiting or [2_000_000]):
        print(json.dumps(measure(waiting)))


if __name__ == "__main__":
    main()
