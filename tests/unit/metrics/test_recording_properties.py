"""Property: the streamed reader reads exactly what ``prometheus_client`` reads line by line.

``RecordingReader`` parses the first line of a series with ``prometheus_client``'s OpenMetrics parser
and reuses that parse for later lines of the same series text. The reference here parses *every*
line alone with the same parser (``line + "# EOF"``), as the format's rules say a recording line is
read: both must give the same samples, or fail at the same line. Texts mix well-formed lines with
the spellings the memo must not vouch for (``1_000``, ``0x10``, ``nan``, infinite or missing
timestamps, 400 digits), label values with spaces, comments, blank lines, control characters,
U+2028, and lines after ``# EOF`` (refused unless blank, as the parser refuses them).
"""

from __future__ import annotations

import io
import math

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from kvpilot.metrics.exposition import ExpositionError
from kvpilot.metrics.recording import RecordingReader

_NAME = st.sampled_from(["vllm:num_requests_running", "vllm:num_preemptions_total", "a_bucket", "x"])
_LABELS = st.sampled_from(['{engine="0"}', '{engine="0",pod="p 1"}', "", '{le="+Inf"}', '{a="\\"q\\""}', "{a=1}"])
_VALUE = st.one_of(  # mostly what writers write, sometimes what only the parser may judge
    st.sampled_from(["1.0", "2", "-3", ".5", "1e3", "NaN", "+Inf", "-Inf"]),
    st.sampled_from(["1_000", "0x10", "nan", "inf", "1" * 400, "1e400"]),
)
_TS = st.one_of(st.sampled_from(["100.0", "101", "1.5e2", "-5"]), st.sampled_from(["+Inf", "NaN", "", "1_7", "1e400"]))
_SAMPLE = st.builds(lambda n, lab, v, t: f"{n}{lab} {v} {t}".rstrip(), _NAME, _LABELS, _VALUE, _TS)
_OTHER = st.one_of(
    st.sampled_from(["", "# TYPE x gauge", "# HELP x h", "  ", "garbage {", "\x1b[2J", "a\u2028b 1 2"]),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\r\n"), max_size=20),
)
_LINES = st.lists(st.one_of(_SAMPLE, _SAMPLE, _SAMPLE, _SAMPLE, _SAMPLE, _OTHER), max_size=12)


def _reference(text: str) -> tuple[list[tuple], int | None]:
    """Every line parsed alone by prometheus_client: (samples, None) or (samples so far, failing line)."""
    out: list[tuple] = []
    lines = list(enumerate(io.StringIO(text), start=1))
    for i, (line_no, raw) in enumerate(lines):
        line = raw.strip()
        if not line or line.startswith("#"):
            if line.startswith("# EOF") and line[5:].strip() == "":
                # prometheus_client refuses any line after "# EOF"; blank ones are let through
                after = [n for n, rest in lines[i + 1 :] if rest.strip()]
                return out, (after[0] if after else None)
            continue
        try:
            families = list(text_string_to_metric_families(line + "\n# EOF\n"))
        except ValueError:
            return out, line_no
        for family in families:
            for s in family.samples:
                if s.timestamp is None:
                    return out, line_no
                try:
                    value = float(s.value)
                except OverflowError:
                    return out, line_no
                out.append((s.name, dict(s.labels), value, float(s.timestamp)))
    return out, 0  # no "# EOF"


def _streamed(text: str) -> tuple[list[tuple], int | None]:
    out: list[tuple] = []
    try:
        for ref, value, ts in RecordingReader(io.StringIO(text)):
            out.append((ref.name, dict(ref.labels), value, ts))
    except ExpositionError as exc:
        return out, exc.line_no
    return out, None


def _same(a: list[tuple], b: list[tuple]) -> bool:
    return len(a) == len(b) and all(
        x[:2] == y[:2] and x[3] == y[3] and (x[2] == y[2] or (math.isnan(x[2]) and math.isnan(y[2])))
        for x, y in zip(a, b, strict=True)
    )


# after "# EOF": nothing, blank lines (read whole) or lines of any kind (refused at the first non-blank one)
_AFTER = st.one_of(st.just([]), st.lists(st.sampled_from(["", "  "]), max_size=3), _LINES)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_LINES, st.booleans(), _AFTER)
@example(['x{engine="0"} 1.0 100.0', 'x{engine="0"} 1_000 101'], True, [])  # the memo must not vouch for 1_000
@example(['x{engine="0"} 1.0 100.0', 'x{engine="0"} 2.0 +Inf'], True, [])  # nor for an infinite timestamp
@example(['x{engine="0"} 1.0 100.0', 'x{engine="0"} ' + "1" * 400 + " 101"], True, [])  # nor for 400 digits
@example(['x{engine="0"} 1.0 100.0'], True, ['x{engine="0"} 2.0 200.0', "# EOF"])  # two recordings concatenated
def test_the_streamed_reader_reads_what_the_parser_reads_line_by_line(before, eof, after):
    text = "\n".join(before) + ("\n# EOF\n" if eof else "\n") + "\n".join(after)
    samples, failed = _streamed(text)
    expected, expected_failure = _reference(text)
    assert failed == expected_failure
    assert _same(samples, expected)
