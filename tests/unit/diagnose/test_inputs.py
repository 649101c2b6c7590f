"""``kvpilot diagnose``'s choice of source, checked before anything is read (kvpilot.diagnose.inputs): one
:class:`Source` from the three source options, else one line naming the option (the command prints it as a usage
error, exit 64: docs/user-guide.md).
"""

from __future__ import annotations

import pytest

from kvpilot.advice.run import advice_from_flags
from kvpilot.advice.whatif import ChangeError
from kvpilot.diagnose.inputs import FlagError, Source, source_from_flags, window_note


@pytest.mark.parametrize(
    ("flags", "source"),
    [
        ({"prometheus": "http://127.0.0.1:9090"}, Source("prometheus", "http://127.0.0.1:9090")),
        ({"metrics_url": "https://10.0.0.7:8000/metrics"}, Source("metrics_url", "https://10.0.0.7:8000/metrics")),
        ({"recording": "run.om"}, Source("recording", "run.om")),
    ],
)
def test_one_source_is_taken(flags, source):
    got = source_from_flags(flags.get("prometheus"), flags.get("metrics_url"), flags.get("recording"))
    assert got == source
    assert [got.prometheus, got.metrics_url, got.recording].count("") == 2  # the other two read as absent


@pytest.mark.parametrize(
    ("prometheus", "metrics_url", "recording"),
    [(None, None, None), ("http://p:9090", "http://m:8000/metrics", None), ("http://p:9090", None, "run.om")],
)
def test_not_exactly_one_source_is_refused(prometheus, metrics_url, recording):
    with pytest.raises(FlagError) as err:
        source_from_flags(prometheus, metrics_url, recording)
    assert str(err.value) == "give exactly one source: --prometheus URL, --metrics-url URL or --recording FILE"


def test_scrape_options_need_a_metrics_url():
    with pytest.raises(FlagError) as quick:
        source_from_flags("http://p:9090", None, None, quick=True)
    assert str(quick.value) == "--quick works with --metrics-url only"
    with pytest.raises(FlagError) as save:
        source_from_flags(None, None, "run.om", save_recording="out.om")
    assert str(save.value) == "--save-recording works with --metrics-url only (it saves the scrapes)"
    assert source_from_flags(None, "http://m:8000/metrics", None, quick=True, save_recording="o.om").metrics_url


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            {"prometheus": "prom:9090"},
            "--prometheus 'prom:9090': not an http(s) URL; did you mean http://prom:9090?",
        ),
        (
            {"metrics_url": "ftp://m/metrics"},
            "--metrics-url 'ftp://m/metrics': not an http(s) URL (example: http://127.0.0.1:8000/metrics)",
        ),
        (
            {"metrics_url": "http://10.0.0.7:8000/"},
            "--metrics-url 'http://10.0.0.7:8000/' has no path: vLLM serves its metrics at /metrics "
            "(try http://10.0.0.7:8000/metrics)",
        ),
        (
            {"prometheus": "http://10.0.0.7:8000/metrics"},
            "--prometheus 'http://10.0.0.7:8000/metrics' ends in /metrics, a metrics page, not a Prometheus server: "
            "to read it, use --metrics-url http://10.0.0.7:8000/metrics; for Prometheus, give its base URL "
            "(example: http://127.0.0.1:9090)",
        ),
    ],
)
def test_a_url_it_cannot_use_is_named_with_what_to_give(flags, message):
    with pytest.raises(FlagError) as err:
        source_from_flags(flags.get("prometheus"), flags.get("metrics_url"), None)
    assert str(err.value) == message


def test_a_password_in_a_refused_url_is_not_repeated():
    with pytest.raises(FlagError) as err:
        source_from_flags("user:secret@prom:9090", None, None)
    assert "secret" not in str(err.value)


@pytest.mark.parametrize(
    ("typed", "note"), [("90", "--window 90 read as 90 seconds (write 5m for minutes)."), ("5m", None)]
)
def test_a_bare_number_window_is_noted_as_seconds(typed, note):
    assert window_note(typed) == note


def test_what_ifs_and_no_what_if_together_are_refused():
    with pytest.raises(ChangeError) as err:
        advice_from_flags(("max_num_seqs=16",), True, 30.0)
    assert str(err.value) == "--no-what-if and --what-if: give one of them"
    assert advice_from_flags((), True, 30.0).budget_seconds == 0.0  # no predictions at all
    assert advice_from_flags(("max_num_seqs=16",), False, 30.0).budget_seconds == 30.0
