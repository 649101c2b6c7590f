"""The root cause of a failed vLLM start, found above vLLM V1's "See root cause above" wrapper."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kvpilot.vllm.failure_log import LIMIT, root_cause
from tests.conftest import require_vllm_python

LOG = Path(__file__).parents[2] / "fixtures" / "vllm-failures" / "v1-kv-cache-too-small.log"
#: vLLM 0.29.0's message for 1.5 GiB of KV memory, 4 GiB needed, max_model_len 32768, an estimated
#: 12288 (vllm/v1/core/kv_cache_utils.py _check_enough_kv_cache_memory; checked against vLLM below).
KV_TOO_SMALL = (
    "To serve at least one request with the model's max seq len (32768), (4.0 GiB KV cache is needed, which is "
    "larger than the available KV cache memory (1.5 GiB). Based on the available memory, the estimated maximum "
    "model length is 12288. Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU "
    "backend) or decreasing `max_model_len` when initializing the engine. See "
    "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)
WRAPPER = (
    "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
    "Failed core proc(s): {'EngineCore_DP0': 1}"
)


def test_the_cause_above_the_engine_core_wrapper():
    text = LOG.read_text()
    assert text.rstrip().splitlines()[-1] == WRAPPER
    assert root_cause(text) == "ValueError: " + KV_TOO_SMALL
    assert len(KV_TOO_SMALL) < LIMIT  # kept whole


def test_the_kubelets_2_kib_termination_message_holds_only_the_wrapper():
    tail = LOG.read_bytes()[-2048:].decode()  # FallbackToLogsOnError: the last 2,048 bytes (or 80 lines)
    assert "ValueError" not in tail
    assert root_cause(tail) is None  # the wrapper alone is no cause


@pytest.mark.vllm_ref  # runs vLLM 0.29.0's own check in the reference venv
def test_messages_as_vllm_0_29_raises_them():
    python = require_vllm_python()
    code = (
        "import json\n"
        "from vllm.v1.core.kv_cache_utils import _check_enough_kv_cache_memory as check\n"
        "out = []\n"
        "for avail, need in ((3 << 29, 4 << 30), (0, 1)):\n"
        "    try:\n"
        "        check(avail, lambda: need, 32768, lambda m: 12288)\n"
        "    except ValueError as e:\n"
        "        out.append(str(e))\n"
        "print(json.dumps(out))\n"
    )
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    kv, no_memory = json.loads(result.stdout.strip().splitlines()[-1])
    assert kv == KV_TOO_SMALL
    assert "ValueError: " + kv in LOG.read_text()
    log = f"(EngineCore_DP0 pid=7) ERROR 12-01 14:02:11 [core.py:1374] ValueError: {no_memory}\n{WRAPPER}\n"
    assert root_cause(log) == f"ValueError: {no_memory}"
    assert no_memory.startswith("No available memory for the cache blocks.")


def test_without_a_wrapper_the_last_exception_line_and_prefixes_removed():
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "23.54 GiB of which 1.06 GiB is free."
    )
    text = "\n".join(
        [
            "(EngineCore_DP0 pid=9) INFO 12-01 14:00:00 [gpu_worker.py:298] Available KV cache memory: 2 GiB",
            "(EngineCore_DP0 pid=9) ERROR 12-01 14:00:01 [core.py:1374] ValueError: an earlier one",
            f"(EngineCore_DP0 pid=9) {oom}",
            "(EngineCore_DP0 pid=9) INFO 12-01 14:00:02 [core.py:1400] shutting down",
        ]
    )
    assert root_cause(text) == oom


def test_only_lines_before_the_first_wrapper_count():
    text = "\n".join(
        [
            "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests.",
            "Exception: WorkerProc initialization failed due to an exception in a background process. "
            "See stack trace for root cause.",
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
            "KeyError: 'after the wrapper'",
        ]
    )
    assert root_cause(text) == (
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests."
    )


def test_no_exception_line_is_no_cause_and_output_is_clean():
    assert root_cause("") is None
    assert root_cause(None) is None
    assert root_cause("INFO starting\nKilled\n") is None
    token = "hf_" + "a" * 34
    line = root_cause(f"OSError: token {token} refused\x1b[31m for repo\n")
    assert line is not None
    assert token not in line
    assert "\x1b" not in line
