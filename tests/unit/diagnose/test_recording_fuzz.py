"""Fuzz: ``kvpilot diagnose --recording FILE -o json`` on generated recordings.

A recording is built from the series ``diagnose`` reads (vLLM's gauges, counters, ``cache_config_info`` and a
histogram with its buckets, ``_sum`` and ``_count``) for one to three engines over 1 to 40 instants, with
values and timestamps that writers write and ones only a parser may judge (``NaN``, infinities, negative
and reset counters, 400-digit values, ``1_000``, timestamps repeated, decreasing, missing or huge), label
values with quotes, backslashes, control characters, U+2028 and token shapes, then noise lines (garbage,
comments, blank lines, ``# EOF`` early or missing, lines after it), maybe cut short, gzip-compressed (maybe
cut inside the stream) or not UTF-8. Options: ``--window``, the configured limits. Property
(``tests/support/fuzz.py``): exit 0-3 with a JSON report that ``docs/diagnose-output.schema.json`` accepts,
or exit 3 with exactly one line (an unreadable recording names its line); never an exception, never more
than 5 s of CPU or 1 GiB of memory for one recording.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile

import jsonschema
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO
from tests.support.fuzz import EXAMPLES, invoke

SCHEMA = json.loads((REPO / "docs" / "diagnose-output.schema.json").read_text())

_GAUGES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]
_COUNTERS = [
    "vllm:num_preemptions",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:request_success",
]
_HISTOGRAM = "vllm:time_to_first_token_seconds"
_BUCKETS = ["0.01", "0.1", "1.0", "10.0", "+Inf"]
#: Tokens in label values, plain and behind an escape or a control character: never in the report or an error.
_SECRET = "hf_" + "A" * 24
_TOKENS = [_SECRET, "\x1b[1m" + _SECRET, "HF_TO\x07KEN=" + _SECRET[3:], "\x1b]8;;x\x07" + _SECRET]
_LABEL_TEXT = st.one_of(
    st.sampled_from(["qwen2.5-7b", "m", "", "a b", "p-1"]),
    st.sampled_from(['q\\"uote', "back\\\\slash", "new\\nline", "\x1b[2J", "a\u2028b", "\x85"]),
    st.sampled_from(_TOKENS),
)
_VALUE = st.one_of(
    st.floats(0, 1e6, allow_nan=False).map(repr),
    st.integers(0, 10**6).map(str),
    st.sampled_from(["NaN", "+Inf", "-Inf", "-1", "1e308", "1" * 400, "1_000", "0x10", "nan"]),
)
_NOISE = st.one_of(
    st.sampled_from(["", "  ", "# TYPE x gauge", "# HELP x h", "garbage {", "# EOF", "x 1", "\r", "\x00"]),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\r\n"), max_size=30),
)


@st.composite
def recordings(draw: st.DrawFn) -> bytes:  # noqa: C901
    engines = draw(st.lists(st.tuples(_LABEL_TEXT, st.sampled_from(["0", "1", "x"])), min_size=1, max_size=3))
    steps = draw(st.integers(1, 40))
    start = draw(st.sampled_from([1764599700.0] * 5 + [0.0, 1e18, -5.0]))
    interval = draw(st.sampled_from([1.0, 10.0, 10.0, 10.0, 0.001, 0.0, -10.0]))
    times = [start + i * interval for i in range(steps)]
    hostile = draw(st.sampled_from([False, False, False, False, True]))
    # the bulk of the numbers (up to 40 instants x 3 engines x 13 series) from one seeded Random: a draw each
    # would cost hypothesis more than the command costs; the hostile values stay draws
    rnd = draw(st.randoms(use_true_random=True))

    def value() -> str:
        return draw(_VALUE) if hostile else repr(float(rnd.randint(0, 1000)))

    def labels(model: str, engine: str, extra: str = "") -> str:
        return f'{{engine="{engine}",model_name="{model}"{extra}}}'

    lines: list[str] = []
    for name in _GAUGES:
        lines += [f"# TYPE {name} gauge"]
        lines += [f"{name}{labels(m, e)} {value()} {t!r}" for m, e in engines for t in times]
    for name in _COUNTERS:
        lines += [f"# TYPE {name} counter"]
        for m, e in engines:
            total = 0
            for t in times:
                total += rnd.randint(-2 if hostile else 0, 50)
                lines.append(f"{name}_total{labels(m, e)} {float(total)!r} {t!r}")
    lines += ["# TYPE vllm:cache_config_info gauge"]
    for m, e in engines:
        blocks = draw(st.sampled_from(["1024", "0", "inf", "x", "1" * 30]))
        info = f',block_size="16",num_gpu_blocks="{blocks}"'
        lines += [f"vllm:cache_config_info{labels(m, e, info)} 1.0 {t!r}" for t in times]
    lines += [f"# TYPE {_HISTOGRAM} histogram"]
    for m, e in engines:
        for t in times:
            count = rnd.randint(0, 20)
            for le in _BUCKETS:
                bucket = labels(m, e, ',le="' + le + '"')
                lines.append(f"{_HISTOGRAM}_bucket{bucket} {float(count)!r} {t!r}")
            lines.append(f"{_HISTOGRAM}_sum{labels(m, e)} {value()} {t!r}")
            lines.append(f"{_HISTOGRAM}_count{labels(m, e)} {float(count)!r} {t!r}")
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 3]))):  # noise among the lines
        lines.insert(draw(st.integers(0, len(lines))), draw(_NOISE))
    ending = draw(st.sampled_from(["# EOF\n"] * 7 + ["", "# EOF\n\n\n", "# EOF\nx 1 2\n"]))
    text = "\n".join(lines) + "\n" + ending
    if draw(st.sampled_from(range(20))) == 0:
        text = text[: draw(st.integers(0, len(text)))]  # cut short
    data = text.encode()
    packing = draw(st.sampled_from(["plain"] * 16 + ["gzip", "gzip", "gzip cut", "not UTF-8"]))
    if packing == "gzip":
        data = gzip.compress(data)
    elif packing == "gzip cut":
        data = gzip.compress(data)[: draw(st.integers(0, 40))]
    elif packing == "not UTF-8":
        data = data[: len(data) // 2] + b"\xff\xfe" + data[len(data) // 2 :]
    return data


_OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "--window": st.sampled_from(["5m", "30s", "1h", "10", "0.001"]),
        "--max-num-seqs": st.sampled_from(["4", "256"]),
        "--max-num-batched-tokens": st.sampled_from(["2048", "65000"]),
        "--max-model-len": st.sampled_from(["4096"]),
    },
)


@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(recordings(), _OPTIONS)
@example(b'vllm:num_requests_running{engine="0"} ' + b"1" * 400 + b" 100.0\n# EOF\n", {})
@example(gzip.compress(b"\x00" * 100_000), {})
@example(b"# EOF\n", {"--window": "5m"})
def test_diagnose_reads_any_recording_into_a_report_or_one_line(data, options):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "run.om")
        with open(path, "wb") as fh:
            fh.write(data)
        args = ["diagnose", "--recording", path, "-o", "json", *[p for kv in options.items() for p in kv]]
        out = invoke(args, results=(0, 1, 2, 3), refusals=(3,))
    assert "A" * 24 not in out.stdout + "\n".join(out.errors), "a token from a label value reached the output"
    if out.errors:
        reason = out.errors[0].split(": ", 3)[-1]
        event("refused: " + ("a line" if reason.startswith("not a readable recording: line") else reason[:30]))
        assert "--recording" in out.errors[0], out.errors[0]
        return
    report = json.loads(out.stdout)
    jsonschema.validate(report, SCHEMA)
    event(f"report, exit {out.code}: " + ", ".join(sorted({t["verdict"] for t in report["targets"]})))
