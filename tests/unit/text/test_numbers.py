"""kvpilot.text.numbers: exact figures, read back by parse (hand-worked values + a property test)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvpilot.text.numbers import UNBOUNDED, UNKNOWN, count, fig, gib, number, parse, percent, significant, times


@pytest.mark.parametrize(
    ("value", "decimals", "trim", "expected"),
    [
        # the corruptions of the old evidence formatter: the integer part keeps its zeros
        (14240.3, 0, True, "14,240"),
        (100.2, 0, True, "100"),
        (1000.4, 0, True, "1,000"),
        (14240.3, 0, False, "14,240"),
        (1000.4, 1, False, "1,000.4"),
        (2.5, 2, False, "2.50"),
        (2.5, 2, True, "2.5"),
        (3.0, 2, True, "3"),
        (1234567, 0, False, "1,234,567"),
        (-0.001, 2, False, "0.00"),
        (-0.4, 0, False, "0"),
        (-1500.25, 1, False, "-1,500.2"),  # 1500.25 is exact in binary: half-even -> .2
        (0.125, 2, False, "0.12"),  # exact binary 0.125, half-even
    ],
)
def test_number_hand_worked(value, decimals, trim, expected):
    assert number(value, decimals, trim=trim) == expected


def test_units_and_helpers():
    assert number(12.5, 1, "s") == "12.5 s"
    assert count(16384, "tokens") == "16,384 tokens"
    assert percent(0.1234) == "12.3 %"
    assert percent(1.0, 0) == "100 %"
    assert times(6.125, 2) == "6.12x"
    assert gib(3 * 2**30) == "3.00 GiB"
    assert number(8192, grouping=False) == "8192"
    # significant: 3 figures in fixed point, never 1.23e-05
    assert significant(0.0000123) == "0.000012"
    assert significant(0.01234) == "0.0123"
    assert significant(2.5) == "2.5"
    assert significant(14240.3) == "14,240"
    assert significant(99.96) == "100"


@pytest.mark.parametrize("bad", [None, math.nan, -math.inf])
def test_unknown_values_never_print_a_repr(bad):
    assert number(bad, 2, "s") == UNKNOWN
    assert percent(bad) == UNKNOWN


def test_infinity_is_unbounded():
    assert number(math.inf) == UNBOUNDED


def test_parse_refuses_what_number_never_prints():
    for text in ("14,24", "1,", "None", "nan", "unknown", "1,0000"):
        with pytest.raises(ValueError, match="^(misplaced thousands separator|not a printed number): "):
            parse(text)
    assert parse("14,240.3 s") == (14240.3, "s")


@given(
    value=st.floats(min_value=-1e15, max_value=1e15, allow_nan=False) | st.integers(-(10**15), 10**15),
    decimals=st.integers(0, 6),
    trim=st.booleans(),
    unit=st.sampled_from(["", "s", "tokens", "%", "x", "GiB"]),
)
def test_printed_text_parses_back_to_the_rounded_value(value, decimals, trim, unit):
    printed = number(value, decimals, unit, trim=trim)
    parsed, parsed_unit = parse(printed)
    assert parsed == round(float(value), decimals) or (parsed == 0 and round(float(value), decimals) == 0)
    assert parsed_unit == unit
    assert "None" not in printed
    assert "nan" not in printed


def test_noun_agrees_with_the_count():
    from kvpilot.text.numbers import noun

    assert [noun(n, "KV head") for n in (0, 1, 2)] == ["KV heads", "KV head", "KV heads"]
    assert (noun(1, "uses", "use"), noun(3, "uses", "use")) == ("uses", "use")  # irregular: the verb of a count


def test_an_integer_beyond_a_floats_range_prints_exactly():
    # 10**400 is finite, but math.isfinite(10**400) and float(10**400) raise OverflowError
    assert count(10**400) == "10" + ",000" * 133  # 401 digits = 2 + 133 groups of 3, grouped from the right
    assert significant(10**400) == count(10**400)


def test_an_integer_beyond_a_floats_range_prints_with_decimals_too():
    # fig(2 * 10**308, 1): a queue of 1e308 running requests, doubled (diagnose's concurrency need) was
    # "internal error: OverflowError: int too large to convert to float"
    assert fig(2 * 10**308, 1) == "200" + ",000" * 102  # 309 digits: "200", then 102 groups of 3
    assert number(10**400, 2) == "10" + ",000" * 133 + ".00"
    assert number(5, 2) == "5.00"  # an int within a float's range: as before
    assert fig(12345678901234567891) == "12,345,678,901,234,567,891"  # an int past 2^53 prints exactly, not rounded
