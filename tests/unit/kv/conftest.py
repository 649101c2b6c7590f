"""Helpers for the KV tests: load the copied fixtures (tests/fixtures/hf-configs, tests/fixtures/cases)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
HF_CONFIGS = FIXTURES / "hf-configs"
CASES = FIXTURES / "cases"
GIB = 2**30


def hf_config(name: str) -> dict:
    """A copied Hugging Face config.json by file stem, e.g. ``Qwen__Qwen2.5-7B-Instruct``."""
    return json.loads((HF_CONFIGS / f"{name}.json").read_text())


def case(prefix: str) -> dict:
    """A copied case file by its id prefix, e.g. ``C01``."""
    (path,) = CASES.glob(f"{prefix}_*.json")
    return json.loads(path.read_text())


@pytest.fixture
def hf_dir() -> Path:
    return HF_CONFIGS
