"""Property: every spelling argparse would map onto a managed flag is refused (hypothesis)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvpilot.api.flags import MANAGED_FLAGS, managed_flag_matches


@st.composite
def spellings(draw):
    flag = draw(st.sampled_from(sorted(MANAGED_FLAGS)))
    # any prefix that still has at least one character after "--" (argparse abbreviation)
    cut = draw(st.integers(min_value=3, max_value=len(flag)))
    body = flag[2:cut]
    # each dash inside the name may be written as an underscore
    chars = [("_" if c == "-" and draw(st.booleans()) else c) for c in body]
    text = "--" + "".join(chars)
    suffix = draw(st.sampled_from(["", "=8", "=0.9", "=", " 8"]))
    return flag, text + suffix


@given(spellings())
def test_every_prefix_and_spelling_of_a_managed_flag_is_refused(case):
    flag, arg = case
    hits = managed_flag_matches(arg)
    # refused, only for flags the argument could abbreviate, and the one it was cut from among them (unless
    # what was typed is another managed flag's whole name, which argparse takes as that flag)
    typed = "--" + arg[2:].split("=")[0].split(" ")[0].replace("_", "-")
    assert hits, (arg, hits)
    assert all(f.startswith(typed) for f, _ in hits), (arg, hits)
    assert flag in [f for f, _ in hits] or typed in MANAGED_FLAGS, (arg, hits)
