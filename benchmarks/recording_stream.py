"""``kvpilot diagnose --recording`` on recordings of growing size: wall time, CPU time, peak RSS.

Writes the synthetic 10-pod recording of tests/support/big_recording.py (1 s samples, ~145 bytes a
line, 83 lines a pod-second) at each size into a temporary directory, optionally gzip-compressed, and
runs the real CLI on it as a new process (imports included), measured with ``os.wait4``. Time should
grow linearly with the size and peak RSS not at all (only the window's samples are kept).

    .venv/bin/python benchmarks/recording_stream.py                 # 30, 100, 300 MB
    .venv/bin/python benchmarks/recording_stream.py --seconds 250 2500 --gzip
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.big_recording import big_recording  # noqa: E402
from tests.support.child import run_measured  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10)
    parser.add_argument("--seconds", type=int, nargs="+", default=[250, 830, 2500], help="recording lengths")
    parser.add_argument("--gzip", action="store_true", help="also run on the gzip-compressed file")
    args = parser.parse_args()
    print(f"{'file':>22} {'MB':>7} {'lines':>10} {'wall s':>7} {'CPU s':>6} {'MB/CPU s':>8} {'peak RSS':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for seconds in args.seconds:
            path = Path(tmp) / f"rec-{seconds}s.om"
            lines = big_recording(path, args.pods, seconds)
            files = [path]
            if args.gzip:
                packed = path.with_suffix(".om.gz")
                with open(path, "rb") as src, gzip.open(packed, "wb", compresslevel=6) as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                files.append(packed)
            size = path.stat().st_size / 1e6
            for f in files:
                run = run_measured(
                    [sys.executable, "-m", "kvpilot.cli", "diagnose", "--no-kube", "--recording", str(f), "-o", "json"],
                    3600,
                )
                if run.code not in (0, 1, 2):
                    raise SystemExit(f"diagnose exited {run.code}: {run.stderr.strip()}")
                print(
                    f"{f.name:>22} {f.stat().st_size / 1e6:7.1f} {lines:10,} {run.seconds:7.1f} {run.cpu_seconds:6.1f} "
                    f"{size / run.cpu_seconds:8.1f} {run.rss_kib / 1024:6.0f} MiB"
                )
            for f in files:
                f.unlink()


if __name__ == "__main__":
    main()
