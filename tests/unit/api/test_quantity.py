"""Kubernetes quantities: parsing and formatting (values worked out by hand)."""

from decimal import Decimal

import pytest

from kvpilot.api.quantity import format_bytes_quantity, format_gib, is_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("6Gi", 6 * 1024**3),  # 6442450944
        ("1.5Gi", 1536 * 1024**2),  # 1610612736
        ("1536Mi", 1536 * 1024**2),
        ("16G", 16 * 10**9),
        ("500m", Decimal("0.5")),
        ("2", 2),
        (2, 2),
        ("1e3", 1000),
        ("128Ki", 131072),
    ],
)
def test_parse_quantity(text, value):
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize("text", ["6 GiB", "6GiB", "Gi", "", "1.5.5Gi", "six"])
def test_not_quantities(text):
    assert not is_quantity(text)
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (6 * 2**30, "6Gi"),
        (6 * 2**30 + 1536 * 2**20, "7680Mi"),  # 6144Mi + 1536Mi
        (1536 * 2**20, "1536Mi"),
        (1000, "1000"),
        (2048, "2Ki"),
        (Decimal("0.5"), "1"),  # a fractional byte rounds up
    ],
)
def test_format_bytes_quantity(n, text):
    assert format_bytes_quantity(n) == text


@pytest.mark.parametrize(
    ("n", "text"), [(1536 * 2**20, "1.5"), (6 * 2**30, "6"), (512 * 2**20, "0.5"), (10**9, "0.9313")]
)
def test_format_gib(n, text):
    # 10**9 / 2**30 = 0.93132257… -> 0.9313
    assert format_gib(n) == text


@pytest.mark.parametrize(
    "text",
    [
        "1e9999999",  # was decimal.Overflow: 10**9999999 exceeds Decimal's Emax (999999)
        "1e-9999999",
        "9.3e18",  # 9.3e18 > 2^63-1 = 9223372036854775807
        "8Ei",  # 8 * 2^60 = 2^63 > 2^63-1
        "1" + "0" * 400,  # a 401-digit number
    ],
)
def test_quantities_beyond_apimachinerys_bound_are_value_errors(text):
    with pytest.raises(ValueError, match="quantity|exponent"):
        parse_quantity(text)


def test_largest_quantity_is_accepted():
    assert parse_quantity("7Ei") == 7 * 2**60  # 8070450532247928832 < 2^63-1
    assert parse_quantity("9223372036854775807") == 2**63 - 1


def test_absurd_quantity_in_a_spec_names_the_field():
    from kvpilot.api import SpecError, parse_spec

    with pytest.raises(SpecError) as info:
        parse_spec({"model": "m", "resources": {"memory": "1e9999999"}})
    assert info.value.field == "spec.resources.memory"
