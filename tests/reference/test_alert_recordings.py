"""The committed recordings under tests/fixtures/recordings/vllm-alerts are exactly what vLLM's own code produces."""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES, require_vllm_python
from tests.reference.alert_recordings import SHAPES, generate

pytestmark = pytest.mark.vllm_ref


def test_committed_alert_recordings_equal_the_generator_output():
    made = generate(require_vllm_python())
    assert sorted(made) == sorted(f"{name}{ext}" for name in SHAPES for ext in (".om", ".truth.json"))
    for name, text in made.items():
        committed = (FIXTURES / "recordings" / "vllm-alerts" / name).read_text(encoding="utf-8")
        assert committed == text, f"{name} differs: regenerate (tests/fixtures/recordings/vllm-alerts/PROVENANCE.md)"
