"""Fuzz: the replay's inputs. ``kvpilot diagnose --recording FILE -o json`` (replay and predictions on) on a
recording of a queue whose gauges and counters are set to hostile values: one series multiplied by a huge or
tiny factor, set to 0, negative, 2,000,000 or 10^30, for the whole window or from one scrape on; the model's name
plain or a token, behind an escape or a control character.

Property (``tests/support/fuzz.py``): exit 0-3 with a JSON report (no NaN, no infinity) or one refusal line;
never an exception, never more than 5 s of CPU or 1 GiB more memory for one recording: the replay is bounded
by construction (kvpilot.advice.limits). A replay costs about a second, so this runs a tenth of the command
fuzzers' example count; the hypothesis seed is fresh every run and printed (tests/conftest.py).
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES
from tests.support.fuzz import EXAMPLES, invoke

RECORDING = (FIXTURES / "recordings" / "scenario_kv-exhaustion.om").read_text()
_SERIES = sorted({m.group(1) for m in re.finditer(r"^(vllm:[a-z_]+)", RECORDING, flags=re.MULTILINE)})
_VALUES = st.sampled_from(["0", "-1", "-1e6", "2000000", "10000000", "1e30", "1e300", "NaN", "+Inf"])
_FACTORS = st.sampled_from([1e6, 1e12, 1e-9, -1.0, 0.0])
#: The served model's name, plain or a token (behind an escape or a control character): never in the report.
_SECRET = "hf_" + "B" * 24
_MODEL_NAMES = st.sampled_from(["qwen2.5-1.5b", _SECRET, "\x1b[1m" + _SECRET, "HF_TO\x07KEN=" + _SECRET[3:]])


@st.composite
def hostile_recordings(draw: st.DrawFn) -> str:
    series = draw(st.sampled_from(_SERIES))
    from_line = draw(st.integers(min_value=0, max_value=120))
    by_factor = draw(st.booleans())
    value, factor = draw(_VALUES), draw(_FACTORS)
    seen = 0

    def change(match: re.Match[str]) -> str:
        nonlocal seen
        seen += 1
        if seen < from_line:
            return match.group(0)
        new = repr(float(match.group(2)) * factor) if by_factor else value
        return f"{match.group(1)} {new} "

    pattern = re.compile(r"^(" + re.escape(series) + r"(?:\{[^}]*\})?) (\S+) ", flags=re.MULTILINE)
    model = draw(_MODEL_NAMES)
    return pattern.sub(change, RECORDING).replace('model_name="qwen2.5-1.5b"', f'model_name="{model}"')


def _finite(value: str) -> float:
    raise AssertionError(f"{value} in JSON")


@settings(max_examples=max(10, EXAMPLES // 10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_recordings())
def test_the_replay_of_any_hostile_recording_is_bounded_and_answers(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "r.om"
        path.write_text(text)
        out = invoke(
            ["diagnose", "--no-kube", "--recording", str(path), "-o", "json"], results=(0, 1, 2, 3), refusals=(3, 64)
        )
    assert "B" * 24 not in out.stdout + "\n".join(out.errors), "the model name's token reached the output"
    if out.stdout.strip():
        json.loads(out.stdout, parse_constant=_finite)
