"""One Prometheus answer of N targets' histogram buckets, decoded whole or streamed: peak RSS and CPU.

Writes an instant-vector answer of ``--targets`` targets x 23 buckets (vLLM's time-to-first-token
histogram; the target labels of a Kubernetes scrape) to a temporary file, then reads it in a new process
each way, measured with ``os.wait4``: ``whole`` as a client that decodes an answer at once holds it (the
body, its text, then ``json.loads``' dict per row: prometheus-api-client's ``custom_query`` does this and
more), ``streamed`` through :class:`kvpilot.diagnose.sources.vector.VectorReader` in 64 KiB chunks,
each batch of rows dropped once counted (diagnose keeps a small tuple a row instead).

    .venv/bin/python benchmarks/answer_decode.py                  # 10,000 targets: 230,000 rows
    .venv/bin/python benchmarks/answer_decode.py --targets 50000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvpilot.metrics.catalog import TTFT_BUCKETS  # noqa: E402
from tests.support.child import run_measured  # noqa: E402

#: the ``le`` labels of vLLM's time-to-first-token histogram, +Inf last
BUCKETS = (*(repr(edge) for edge in TTFT_BUCKETS), "+Inf")

WHOLE = """
import json, sys
doc = json.loads(open(sys.argv[1], "rb").read().decode())
print(len(doc["data"]["result"]))
"""

STREAMED = """
import sys
from kvpilot.diagnose.sources.vector import VectorReader
rows = 0
def count(batch):
    global rows
    rows += len(batch)
reader = VectorReader(count)
with open(sys.argv[1], "rb") as fp:
    while chunk := fp.read(1 << 16):
        reader.feed(chunk)
reader.close()
print(rows)
"""


def write_answer(path: Path, targets: int) -> int:
    """The answer, one row per target and bucket; returns the rows written."""
    rows = 0
    with open(path, "w", encoding="utf-8") as fp:
        fp.write('{"status":"success","data":{"resultType":"vector","result":[')
        for pod in range(targets):
            labels = {
                "namespace": f"ns-{pod % 50}",
                "pod": f"vllm-{pod:05d}",
                "instance": f"10.0.{pod // 256 % 256}.{pod % 256}:8000",
                "job": "vllm",
                "model_name": "Qwen/Qwen2.5-7B-Instruct",
                "engine": "0",
            }
            for le in BUCKETS:
                row = {"metric": {**labels, "le": le}, "value": [1764600000.0, "12"]}
                fp.write(("," if rows else "") + json.dumps(row, separators=(",", ":")))
                rows += 1
        fp.write("]}}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "answer.json"
        rows = write_answer(path, args.targets)
        print(f"{args.targets:,} targets, {rows:,} rows, {path.stat().st_size / 2**20:.1f} MiB")
        for name, code in (("whole", WHOLE), ("streamed", STREAMED)):
            run = run_measured([sys.executable, "-c", code, str(path)], 600)
            if run.code != 0 or int(run.stdout) != rows:
                raise SystemExit(f"{name}: exit {run.code}, {run.stdout.strip()} rows: {run.stderr.strip()}")
            print(f"{name:>9}: peak RSS {run.rss_kib / 1024:5.0f} MiB, CPU {run.cpu_seconds:.2f} s")


if __name__ == "__main__":
    main()
