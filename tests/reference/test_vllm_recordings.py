"""The committed recordings under tests/fixtures/recordings/vllm are exactly what vLLM's own code produces."""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES, require_vllm_python
from tests.reference.vllm_recordings import VERDICT_SCENARIOS, generate

pytestmark = pytest.mark.vllm_ref


def test_committed_vllm_recordings_equal_the_generator_output():
    python = require_vllm_python()
    made = generate(python)
    assert sorted(made) == sorted(f"{verdict}.om" for verdict in VERDICT_SCENARIOS)
    for name, text in made.items():
        committed = (FIXTURES / "recordings" / "vllm" / name).read_text(encoding="utf-8")
        assert committed == text, f"{name} differs: regenerate (tests/fixtures/recordings/vllm/PROVENANCE.md)"
