"""kvpilot.alerts.admission: namespace patterns read as kopf reads the operator's, the diagnoses-per-minute
token bucket on both sides of its bound.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpilot.alerts.admission import RateLimit, namespace_allowed


@pytest.mark.parametrize(
    ("name", "patterns", "allowed"),
    [
        ("llm-serving", [], True),  # no list: any namespace
        ("kube-system", [], True),
        ("llm-serving", ["llm-serving"], True),
        ("kube-system", ["llm-serving"], False),
        ("llm-a", ["llm-*"], True),
        ("team-llm", ["llm-*"], False),
        ("kube-system", ["*, !kube-*"], False),
        ("default", ["*, !kube-*"], True),
        ("kube-public", ["!kube-*"], False),  # a leading exclusion implies a leading *
        ("llm-b", ["team-a", "llm-?"], True),  # any of several patterns
        # kopf's own docstring examples (kopf _cogs/structs/references.py, match_namespace)
        ("myapp-pr-123", ["myapp-*, !*-pr-*, *pr-123"], True),
        ("myapp-pr-456", ["myapp-*, !*-pr-*, *pr-123"], False),
        ("otherapp-pr-123", ["myapp-*, !*-pr-*, *pr-123"], False),
        ("otherapp-pr-123", ["!*-pr-*, *pr-123"], True),
    ],
)
def test_namespace_patterns(name, patterns, allowed):
    assert namespace_allowed(name, patterns) is allowed


_NAMES = st.from_regex(r"[a-z]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)
_GLOBS = st.from_regex(r"!?[-a-z*?]{1,6}", fullmatch=True)


@pytest.mark.slow  # make test-unit skips it, make test runs it
@settings(max_examples=300, deadline=None)
@given(name=_NAMES, pattern=st.lists(_GLOBS, min_size=1, max_size=4).map(", ".join))
def test_a_pattern_matches_what_kopf_matches(name, pattern):
    """The reference is kopf's own matcher: the chart hands the hook the operator's watch.namespaces."""
    from kopf._cogs.structs.references import match_namespace

    assert namespace_allowed(name, [pattern]) is match_namespace(name, pattern)


def test_the_bucket_starts_full_and_grants_at_most_its_size():
    bucket = RateLimit(3, now=0.0)
    assert bucket.take(5, now=0.0) == 3  # 3 granted, 2 refused
    assert bucket.take(1, now=0.0) == 0
    # refill 3 per 60 s = one token per 20 s: none at 19.9 s, one at 20 s
    assert bucket.retry_after(now=0.0) == pytest.approx(20.0)
    assert bucket.take(1, now=19.9) == 0
    assert bucket.retry_after(now=19.9) == pytest.approx(0.1)
    assert bucket.take(1, now=20.0) == 1
    # a long idle time refills to the size, never beyond it
    assert bucket.take(10, now=10_000.0) == 3


def test_the_bucket_refills_continuously():
    bucket = RateLimit(60, now=100.0)
    assert bucket.take(60, now=100.0) == 60
    # 60 a minute = 1 a second: after 2.5 s, 2 whole tokens (the half carries over)
    assert bucket.take(5, now=102.5) == 2
    assert bucket.take(1, now=103.0) == 1
    assert bucket.take(1, now=103.0) == 0


def test_a_bucket_needs_a_size():
    with pytest.raises(ValueError, match="per_minute"):
        RateLimit(0, now=0.0)
