"""``kvpilot diagnose --recording`` on a large file: peak RSS bounded independently of the file's size.

Two recordings are written on the fly (tests/support/big_recording.py: 10 pods at 1 s, 83 sample
lines a pod-second, ~145 bytes a line): 250 s (~30 MB) and 2,500 s (~300 MB, 42 minutes). The real
CLI runs on each in a child process; its peak RSS (``os.wait4``) must stay under 250 MiB and grow by
less than 40 MiB from the small file to the large one (what it keeps is the 5-minute window: 10 pods x
38 series x 301 samples, the same for both). The old reader held every sample: 460 MiB for 29 MB.

Expected signals, by hand (big_recording's docstring): in the last 300 s ``num_requests_running`` is
``pod + 4`` (it changes 600 s before the end), so ``running_avg`` is ``pod + 4``; 301 samples in the
window; ``prompt_tokens`` grows 100 a second, so its rate is 100/s.
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.support.big_recording import big_recording
from tests.support.child import run_measured

MAX_RSS_KIB = 250 * 1024
MAX_GROWTH_KIB = 40 * 1024


def _diagnose(path) -> tuple[dict, int]:
    run = run_measured(
        [
            sys.executable,
            "-m",
            "kvpilot.cli",
            "diagnose",
            "--no-what-if",
            "--no-kube",
            "--recording",
            str(path),
            "-o",
            "json",
        ],
        600,
    )
    assert run.code == 0, run.stderr  # every pod healthy
    return json.loads(run.stdout), run.rss_kib


@pytest.mark.parametrize("pods", [10])
def test_a_300_mb_recording_is_read_in_bounded_memory(tmp_path, pods):
    small, large = tmp_path / "small.om", tmp_path / "large.om"
    big_recording(small, pods, 250)
    big_recording(large, pods, 2500)
    assert large.stat().st_size > 290e6
    report_small, rss_small = _diagnose(small)
    small.unlink()
    report, rss = _diagnose(large)
    assert rss < MAX_RSS_KIB, f"peak RSS {rss // 1024} MiB on {large.stat().st_size / 1e6:.0f} MB"
    assert rss - rss_small < MAX_GROWTH_KIB, f"{rss_small // 1024} -> {rss // 1024} MiB"
    by_pod = {t["target"]["pod"]: t for t in report["targets"]}
    assert sorted(by_pod) == sorted(f"vllm-{i}" for i in range(pods))
    for i in range(pods):
        signals = by_pod[f"vllm-{i}"]["signals"]
        assert signals["running_avg"] == i + 4
        assert signals["samples_in_window"] == 301
        assert signals["prompt_tokens_per_s"] == pytest.approx(100.0)
    assert len(report_small["targets"]) == pods
