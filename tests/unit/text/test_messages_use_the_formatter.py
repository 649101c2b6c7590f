"""User-visible figures in simulate, alert and Hub messages go through kvpilot.text.numbers (one test each).

The values are chosen where Python's ``:g`` would mislead: 2,000,000 prints as ``2e+06`` and 1,234,567.5 as
``1.23457e+06`` under ``:g``; the formatter prints them in full with thousands separators, at most 3 decimals.
"""

from __future__ import annotations

from click.testing import CliRunner

from kvpilot.alerts import rules
from kvpilot.cli import cli
from kvpilot.kv.hub import _why
from kvpilot.text.numbers import parse, plain


def test_simulate_duration_bound_prints_the_number_in_full():
    result = CliRunner().invoke(cli, ["simulate", "healthy", "--record", "/dev/null", "--duration", "2000000s"])
    assert result.exit_code != 0
    # 2,000,000 s > 86,400 s (24 h): both figures in full, never "2e+06"
    assert "--duration: 2,000,000 s is above the maximum 86,400 s (24h) of one run" in result.output
    assert "e+0" not in result.output


def test_alert_description_threshold_goes_through_the_formatter(monkeypatch):
    monkeypatch.setattr(rules, "TTFT_P99_SECONDS", 1234567.5)
    [ttft] = [r for r in rules.alert_rules() if r.name == "VLLMTTFTHigh"]
    assert "(threshold 1,234,567.5 s)" in ttft.description
    assert parse("1,234,567.5 s") == (1234567.5, "s")


def test_hub_timeout_reason_goes_through_the_formatter():
    assert _why(TimeoutError(), 2_000_000.0) == "no answer within 2,000,000 s"
    assert _why(TimeoutError(), 0.25) == "no answer within 0.25 s"


def test_plain_has_no_separators_for_values_typed_back():
    # a flag value or an option's bound: 1000 not "1,000", 0.90 as 0.9
    assert (plain(1000), plain(0.9), plain(1 / 3, 3)) == ("1000", "0.9", "0.333")
