"""--pipeline-parallel-size: layers per stage as vLLM splits them, and the binding stage's KV tokens."""

from __future__ import annotations

import json
import subprocess

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.kv.capacity import pp_stage_layers
from tests.conftest import require_vllm_python

from .conftest import HF_CONFIGS

CASES = [(28, 1), (28, 2), (28, 3), (32, 5), (80, 3), (61, 4), (7, 7)]


def test_stage_layers_hand_worked():
    # 28 layers on 3 stages: 9 each, remainder 1 goes to the stage before the last -> [9, 10, 9]
    assert pp_stage_layers(28, 3) == [9, 10, 9]
    # 32 on 5: 6 each, remainder 2 -> stages -2 and -3 -> [6, 6, 7, 7, 6]
    assert pp_stage_layers(32, 5) == [6, 6, 7, 7, 6]


@pytest.mark.vllm_ref
def test_stage_layers_equal_vllms_get_pp_indices():
    python = require_vllm_python()
    code = (
        "import json, sys\n"
        "from vllm.distributed.utils import get_pp_indices\n"
        "cases = json.loads(sys.argv[1])\n"
        "print(json.dumps([[e - s for s, e in (get_pp_indices(n, r, pp) for r in range(pp))] for n, pp in cases]))\n"
    )
    out = subprocess.run(
        [python, "-c", code, json.dumps(CASES)], capture_output=True, text=True, timeout=300, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [pp_stage_layers(n, pp) for n, pp in CASES]


def test_binding_stage_sets_the_kv_tokens():
    # Qwen2.5-7B: 28 layers, 57,344 B per token = 2,048 B per layer. PP 3 -> the 10-layer stage binds:
    # 20,480 B per token; 16 GiB / (16 x 20,480 B) = 52,428 blocks = 838,848 tokens
    args = ["kv", str(HF_CONFIGS / "Qwen__Qwen2.5-7B-Instruct.json"), "--kv-memory", "16GiB", "--max-model-len", "8192"]
    doc = json.loads(CliRunner().invoke(cli, [*args, "-pp", "3", "-o", "json"]).output)
    assert (doc["bytes_per_token"], doc["kv_tokens"]) == (20480, 838848)
    assert any("[9, 10, 9]" in n and "10 layers binds" in n for n in doc["notes"])
    bad = CliRunner().invoke(cli, [*args, "-pp", "29"])
    assert bad.exit_code == 2
    assert "--pipeline-parallel-size" in bad.output
