"""The committed ground-truth recordings are exactly what vLLM's own code produces for each scenario."""

from __future__ import annotations

import pytest

from tests.conftest import require_vllm_python
from tests.reference.verdict_scenarios import OUT, SCENARIOS, generate

pytestmark = pytest.mark.vllm_ref


def test_committed_ground_truth_recordings_equal_the_generator_output():
    python = require_vllm_python()
    made = generate(python)
    expected = {f"{n}.om" for n in SCENARIOS} | {f"{n}.truth.json" for n in SCENARIOS}
    assert set(made) == expected
    committed = {p.name for p in OUT.iterdir() if p.suffix in (".om", ".json")}
    assert committed == expected, "regenerate (tests/fixtures/recordings/vllm/verdicts/PROVENANCE.md)"
    for name, text in made.items():
        assert (OUT / name).read_text(encoding="utf-8") == text, f"{name} differs: regenerate (PROVENANCE.md)"
