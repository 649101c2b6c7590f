"""``--recording`` read as a stream: the window's samples of the series diagnose reads, bounded.

The streamed, reduced samples must give exactly the signals the whole file gives (every fixture
recording, several windows and ends); what is dropped is counted by hand on a synthetic recording
(tests/support/big_recording.py); every line is still checked, data after ``# EOF`` is refused, and
each bound is one line naming it.
"""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import pytest

from kvpilot.diagnose.signals import compute_signals
from kvpilot.diagnose.sources import SourceError
from kvpilot.diagnose.sources import recording as source
from kvpilot.diagnose.sources.recording import read_window
from kvpilot.metrics.exposition import ExpositionError
from kvpilot.metrics.recording import read_recording
from tests.support.big_recording import LATE, T0, big_recording

RECORDINGS = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "recordings").glob("*.om"))


def _same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _signals(samples, window, end):
    return {
        key: ({k: v for k, v in sig.values.items()}, sig.buckets, sig.cache_config)
        for key, sig in compute_signals(samples, window, end).items()
    }


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
@pytest.mark.parametrize("window", [60.0, 300.0, 1800.0])
@pytest.mark.parametrize("end_at", [None, 0.5])
def test_the_window_gives_the_signals_of_the_whole_file(path, window, end_at):
    everything = read_recording(path)
    stamps = [s.timestamp for s in everything]
    end = max(stamps) if end_at is None else min(stamps) + end_at * (max(stamps) - min(stamps))
    streamed = read_window(path, window, None if end_at is None else end)
    assert streamed.last_timestamp == max(stamps)
    assert len(streamed.samples) <= len(everything)
    full, reduced = _signals(everything, window, end), _signals(streamed.samples, window, end)
    assert full.keys() == reduced.keys()
    assert full
    for key in full:
        values_a, buckets_a, config_a = full[key]
        values_b, buckets_b, config_b = reduced[key]
        assert values_a.keys() == values_b.keys()
        assert all(_same(values_a[k], values_b[k]) for k in values_a), key
        assert buckets_a == buckets_b
        assert config_a == config_b


def test_only_the_window_of_the_series_diagnose_reads_is_kept(tmp_path):
    path = tmp_path / "r.om"
    lines = big_recording(path, pods=2, seconds=1200)
    # per pod and second: 3 gauges + 3 counters + 2 request_success + 5 histograms x (13 buckets + count + sum)
    assert lines == 2 * 1200 * (3 + 3 + 2 + 5 * 15)
    got = read_window(path, 300.0)
    # read: 3 + 3 + 2 + 3 histograms (ttft, itl, request prompt tokens) x 15 = 53 series a pod; e2e and params_n
    # are not; kept: the 5-minute window [end - 300, end] inclusive = 301 samples a series
    assert len(got.samples) == 2 * 53 * 301
    assert got.last_timestamp == T0 + 1199
    assert min(s.timestamp for s in got.samples) == T0 + 1199 - 300
    assert not any("e2e_request_latency" in s.name for s in got.samples)
    # --end 900 s in: [T0+600, T0+900]; a 1-minute window still keeps the 5-minute lookback
    mid = read_window(path, 60.0, end=T0 + 900)
    assert {s.timestamp for s in mid.samples} == {float(T0 + k) for k in range(600, 901)}
    assert mid.last_timestamp == T0 + 1199
    running = [s.value for s in got.samples if s.name == "vllm:num_requests_running" and s.labels["pod"] == "vllm-1"]
    assert running == [1.0 + 4] * 301  # pod 1 runs pod + 4 = 5 in the last LATE = 600 s
    assert LATE > 300


def test_a_gzip_recording_reads_the_same(tmp_path):
    path = RECORDINGS[0]
    packed = tmp_path / "r.om.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    assert read_window(packed, 300.0) == read_window(path, 300.0)


def _write(tmp_path, text: str) -> Path:
    path = tmp_path / "r.om"
    path.write_text(text)
    return path


RUN = 'vllm:num_requests_running{engine="0",model_name="m"}'


def test_data_after_eof_is_refused_blank_lines_are_not(tmp_path):
    # prometheus_client raises "Received line after # EOF" (openmetrics/parser.py):
    # two concatenated recordings must not be diagnosed as the first one alone
    path = _write(tmp_path, f"{RUN} 1.0 100.0\n# EOF\n\n{RUN} 9.0 200.0\n# EOF\n")
    with pytest.raises(SourceError, match=r"line 4: data after '# EOF'"):
        read_window(path, 300.0)
    got = read_window(_write(tmp_path, f"{RUN} 1.0 100.0\n# EOF\n\n  \n"), 300.0)
    assert [(s.value, s.timestamp) for s in got.samples] == [(1.0, 100.0)]
    assert got.last_timestamp == 100.0


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (f"{RUN} 1.0 100.0\n{RUN} 2.0 101.0\n{RUN[:-3]} 3 102\n# EOF\n", "line 3: unreadable sample line"),
        (f"{RUN} 1.0 100.0\n{RUN} 1_000 101.0\n# EOF\n", "line 2: unreadable sample line"),  # the cache defers
        (f"{RUN} 1.0 100.0\n{RUN} 0x10 101.0\n# EOF\n", "line 2: unreadable sample line"),
        (f"{RUN} 1.0 100.0\n{RUN} 2.0 +Inf\n# EOF\n", "line 2: unreadable sample line"),  # no infinite timestamp
        (f"{RUN} 1.0 100.0\n{RUN} 2.0\n# EOF\n", "line 2: sample vllm:num_requests_running has no timestamp"),
        (
            f"{RUN} 1.0 100.0\n{RUN} {'1' * 400} 101.0\n# EOF\n",
            "line 2: sample vllm:num_requests_running: value outside",
        ),
        (f"{RUN} 1.0 100.0\n", "line 0: a recording is OpenMetrics text ending with '# EOF'"),
        ("x" * 2_000_000, "line 1: line longer than 1,048,576 characters"),
        (f"{RUN} 1.0 100.0\n" + "\x1b[2J" * 10 + "\n# EOF\n", "line 2: unreadable sample line"),
    ],
)
def test_a_bad_line_is_one_error_naming_it(tmp_path, text, words):
    path = _write(tmp_path, text)
    with pytest.raises(SourceError) as info:
        read_window(path, 300.0)
    message = str(info.value)
    assert message.startswith(f"--recording {path}: ")
    assert words in message
    assert "\n" not in message  # repr quotes the line: no terminal control reaches it
    assert "\x1b[" not in message


def test_lines_the_cache_cannot_vouch_for_are_parsed_in_full(tmp_path):
    spaced = 'vllm:num_requests_waiting{engine="0",model_name="a b c"}'
    text = (
        f"{RUN} 1.0 100.0\n{RUN} 2 101\n{RUN} .5 102\n{RUN} 1e0 103.0e0\n{RUN} NaN 104\n{RUN} +Inf 105\n"
        f"{spaced} 3.0 100.0\n{spaced} 4.0 101.0\n"  # label values with spaces
        'vllm:num_preemptions_total{engine="0",model_name="m"} 1.0 100.0\n'
        f"{RUN} 7.0 99.0\n"  # the same series again, earlier: kept in file order
        "# EOF\n"
    )
    got = read_recording(_write(tmp_path, text))
    values = [(s.name, s.value, s.timestamp) for s in got]
    assert values[:4] == [
        (RUN.split("{")[0], v, t) for v, t in [(1.0, 100.0), (2.0, 101.0), (0.5, 102.0), (1.0, 103.0)]
    ]
    assert math.isnan(values[4][1])
    assert values[5][1] == math.inf
    assert [(s.labels["model_name"], s.value) for s in got[6:8]] == [("a b c", 3.0), ("a b c", 4.0)]
    assert (got[8].name, got[8].value, got[8].timestamp) == ("vllm:num_preemptions_total", 1.0, 100.0)
    assert (got[9].value, got[9].timestamp) == (7.0, 99.0)


def test_too_many_series_is_one_line_naming_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "MAX_SERIES", 3)
    text = "".join(f'vllm:num_requests_running{{pod="p{i}"}} 1.0 100.0\n' for i in range(4)) + "# EOF\n"
    with pytest.raises(SourceError, match=r"more than 3 series of the metrics diagnose reads \(the limit"):
        read_window(_write(tmp_path, text), 300.0)
    # series diagnose does not read are not counted
    other = "".join(f'vllm:e2e_request_latency_seconds_count{{pod="p{i}"}} 1.0 100.0\n' for i in range(10))
    assert read_window(_write(tmp_path, other + "# EOF\n"), 300.0).samples == []


def test_too_many_samples_in_the_window_is_one_line_naming_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "MAX_WINDOW_SAMPLES", 10)
    every_second = "".join(f"{RUN} 1.0 {100 + k}.0\n" for k in range(20)) + "# EOF\n"
    with pytest.raises(SourceError, match=r"more than 10 samples inside the window \(the limit for a recording\)"):
        read_window(_write(tmp_path, every_second), 300.0)
    # every 60 s for an hour: only the 6 of the last 5 minutes are ever held at once
    hourly = "".join(f"{RUN} 1.0 {100 + 60 * k}.0\n" for k in range(61)) + "# EOF\n"
    assert len(read_window(_write(tmp_path, hourly), 300.0).samples) == 6


def test_an_unreadable_file_is_one_line(tmp_path):
    path = tmp_path / "r.om"
    path.write_bytes(b"\xff\xfe not utf-8\n")
    with pytest.raises(SourceError, match=r"--recording .*r\.om: not UTF-8 text \(OpenMetrics is UTF-8\)$"):
        read_window(path, 300.0)
    cut = tmp_path / "cut.om.gz"
    cut.write_bytes(gzip.compress(f"{RUN} 1.0 100.0\n# EOF\n".encode())[:-12])  # into the deflate data
    with pytest.raises(SourceError, match=r"--recording .*cut\.om\.gz: the gzip stream is cut short"):
        read_window(cut, 300.0)
    corrupt = bytearray(gzip.compress(f"{RUN} 1.0 100.0\n".encode() * 1000))
    corrupt[20:30] = b"\xff" * 10  # inside the deflate data: zlib.error, not an OSError
    broken = tmp_path / "broken.om.gz"
    broken.write_bytes(bytes(corrupt))
    with pytest.raises(SourceError, match=r"--recording .*broken\.om\.gz: not a valid gzip stream"):
        read_window(broken, 300.0)


def test_read_recording_still_refuses_text_without_eof():
    with pytest.raises(ExpositionError, match="EOF"):
        read_recording("a 1\nb 2\n")
