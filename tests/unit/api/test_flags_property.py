"""Property: every spelling argparse would map onto a managed flag is refused (hypothesis)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvpilot.api.flags import MANAGED_FLAGS, managed_flag


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
    hit = managed_flag(arg)
    assert hit is not None, arg
    # the refused flag is one the argument could abbreviate
    assert hit[0].startswith("--" + arg[2:].split("=")[0].split(" ")[0].replace("_", "-"))
    assert flag.startswith("--" + arg[2:].split("=")[0].split(" ")[0].replace("_", "-"))
