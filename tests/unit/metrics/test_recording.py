"""write_recording / read_recording: format and round trip (expected values written out by hand)."""

from __future__ import annotations

import io

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kvpilot.metrics.exposition import ExpositionError
from kvpilot.metrics.recording import read_recording, write_recording

T0 = 1_700_000_000.0


def _snapshots():
    reg = CollectorRegistry()
    running = Gauge("vllm:num_requests_running", "Running.", ["model_name", "engine"], registry=reg)
    pre = Counter("vllm:num_preemptions", "Preemptions.", ["model_name", "engine"], registry=reg)
    hist = Histogram(
        "vllm:iteration_tokens_total", "Tokens per step.", ["model_name", "engine"], buckets=(1, 8, 16), registry=reg
    )
    snaps = []
    # t=0: running 2 (engines 0 and 1 get 2 and 5), preemptions 0, one step of 8 tokens
    # t=1: running 3, preemptions 1, one more step of 12 tokens
    # t=2: running 1, preemptions 4, one step of 20 tokens
    for i, (r, p, tok) in enumerate([(2, 0, 8), (3, 1, 12), (1, 3, 20)]):
        running.labels("m", "0").set(r)
        running.labels("m", "1").set(r + 3)
        pre.labels("m", "0").inc(p)
        hist.labels("m", "0").observe(tok)
        snaps.append((T0 + i * 1.5, list(reg.collect())))
    return snaps


def test_format_is_openmetrics_families_contiguous_series_contiguous():
    buf = io.StringIO()
    n = write_recording(_snapshots(), buf)
    text = buf.getvalue()
    lines = text.splitlines()
    assert lines[-1] == "# EOF"
    # 2 gauge series x 3 + 1 counter x 3 + histogram (4 buckets + count + sum) x 3 = 6 + 3 + 18
    assert n == 27
    assert "_created" not in text
    running = [ln for ln in lines if ln.startswith("vllm:num_requests_running{")]
    # series engine=0 first, all its instants, then engine=1
    assert running == [
        'vllm:num_requests_running{engine="0",model_name="m"} 2.0 1700000000.0',
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0 1700000001.5',
        'vllm:num_requests_running{engine="0",model_name="m"} 1.0 1700000003.0',
        'vllm:num_requests_running{engine="1",model_name="m"} 5.0 1700000000.0',
        'vllm:num_requests_running{engine="1",model_name="m"} 6.0 1700000001.5',
        'vllm:num_requests_running{engine="1",model_name="m"} 4.0 1700000003.0',
    ]
    assert "# TYPE vllm:num_preemptions counter" in lines
    # histogram at t=1.5: buckets 1/8/16/+Inf hold 0/1/2/2 (observations 8 and 12), count 2, sum 20
    i = lines.index('vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="m"} 0.0 1700000001.5')
    assert lines[i : i + 6] == [
        'vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="m"} 0.0 1700000001.5',
        'vllm:iteration_tokens_total_bucket{engine="0",le="8.0",model_name="m"} 1.0 1700000001.5',
        'vllm:iteration_tokens_total_bucket{engine="0",le="16.0",model_name="m"} 2.0 1700000001.5',
        'vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="m"} 2.0 1700000001.5',
        'vllm:iteration_tokens_total_count{engine="0",model_name="m"} 2.0 1700000001.5',
        'vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 20.0 1700000001.5',
    ]


def test_round_trip_through_a_file(tmp_path):
    path = tmp_path / "rec.om"
    write_recording(_snapshots(), path)
    samples = read_recording(path)
    pre = [(s.timestamp, s.value) for s in samples if s.name == "vllm:num_preemptions_total"]
    # cumulative 0, 0+1, 0+1+3
    assert pre == [(T0, 0.0), (T0 + 1.5, 1.0), (T0 + 3.0, 4.0)]
    inf = [s.value for s in samples if s.name == "vllm:iteration_tokens_total_bucket" and s.labels["le"] == "+Inf"]
    assert inf == [1.0, 2.0, 3.0]
    assert all(s.timestamp is not None for s in samples)
    # the same text, given as a string, reads the same
    assert read_recording(path.read_text()) == samples
    assert read_recording(str(path)) == samples


def test_created_samples_only_on_request():
    buf = io.StringIO()
    write_recording(_snapshots(), buf, include_created=True)
    assert "vllm:num_preemptions_created{" in buf.getvalue()


def test_out_of_order_snapshots_rejected():
    snaps = _snapshots()
    with pytest.raises(ValueError, match="out of time order"):
        write_recording([snaps[1], snaps[0]], io.StringIO())


def test_read_recording_rejects_plain_text_and_missing_timestamps():
    with pytest.raises(ExpositionError, match="EOF"):
        read_recording("a 1\nb 2\n")
    with pytest.raises(ExpositionError, match="no timestamp"):
        read_recording("# TYPE a gauge\na 1\n# EOF\n")
