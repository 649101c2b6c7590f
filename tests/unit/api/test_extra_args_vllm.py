"""``extraArgs`` against vLLM 0.29.0's real argument parser (``vllm_ref`` tier, in a subprocess).

For every candidate ``extraArgs`` (the reproduced smuggling cases, benign flags, and a few
thousand generated from managed flag names: prefixes, underscores, ``=``, dotted keys, short
forms), kvpilot's verdict is compared with what vLLM's own ``FlexibleArgumentParser`` does with
the rendered command: whenever kvpilot ACCEPTS the arguments, every managed destination
(``max_num_seqs``, ``tensor_parallel_size``, ``kv_transfer_config``, …) parses to the same value
as without them (or vLLM refuses the vector outright). The reproduced cases must be refused, and
vLLM must show that they were real (the managed value changes).
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from kvpilot.api import SpecError, parse_spec
from kvpilot.api.flags import KV_OFFLOAD_FLAGS, MANAGED_FLAGS, SHORT_ALIASES
from kvpilot.render import vllm_command
from tests.conftest import require_vllm_python

pytestmark = pytest.mark.vllm_ref

DRIVER = Path(__file__).with_name("vllm_argparse_driver.py")
#: frontend-only flags the engine parser does not know (checked by name in test_flags.py)
FRONTEND = {"--port", "--host", "--api-key", "--config"}
SPEC = {
    "model": "Qwen/Qwen2.5-1.5B-Instruct",
    "engine": {"maxNumSeqs": 4, "tensorParallelSize": 1, "maxModelLen": 8192, "enablePrefixCaching": True},
    "kvOffload": {"backend": "lmcache", "cpuMemory": "8Gi"},
}
#: (extraArgs, the managed destination vLLM changes with it): the issue's reproduced cases
SMUGGLED = [
    (["-t", "4"], "tensor_parallel_size"),
    (["-t=4"], None),  # vLLM 0.29.0 refuses this one itself
    (["--kv-transfer-config.kv_connector=X", "--kv-transfer-config.kv_role=kv_both"], "kv_transfer_config"),
    (["--kv_transfer_config.kv_role=kv_producer"], "kv_transfer_config"),
    (["--max-num-s", "8"], None),  # ambiguous in vLLM 0.29.0 (--max-num-seqs, --max-num-scheduled-tokens)
    (["--max_num_seqs=8"], "max_num_seqs"),
    (["--max-num-seq", "8"], "max_num_seqs"),
    (["-tp", "2"], "tensor_parallel_size"),
]
BENIGN = [["--enforce-eager"], ["--dtype", "half"], ["--seed", "1"], ["--disable-log-stats"], ["--block-size", "32"]]


def _base_argv(spec: dict) -> list[str]:
    """The rendered engine flags (``vllm serve <model>`` and the frontend ``--port 8000`` removed)."""
    argv = vllm_command(parse_spec(spec))[3:]
    i = argv.index("--port")
    return ["--model", spec["model"], *argv[:i], *argv[i + 2 :]]


def _vllm(vectors: list[list[str]]) -> list[dict]:
    python = require_vllm_python()
    result = subprocess.run(
        [python, str(DRIVER)], input=json.dumps(vectors), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def _accepted(extra: list[str]) -> bool:
    try:
        parse_spec({**SPEC, "engine": {**SPEC["engine"], "extraArgs": extra}})
    except SpecError:
        return False
    return True


def _generated(count: int, seed: int = 13) -> list[list[str]]:
    """Spellings a person (or an attacker) could try for each managed flag."""
    rnd = random.Random(seed)
    names = [f for f in {**MANAGED_FLAGS, **KV_OFFLOAD_FLAGS} if f not in FRONTEND] + list(SHORT_ALIASES)
    out = []
    for _ in range(count):
        flag = rnd.choice(names)
        body = flag.lstrip("-")
        dashes = "-" if flag in SHORT_ALIASES else "--"
        cut = rnd.randint(1, len(body))
        body = body[:cut] if rnd.random() < 0.5 else body
        if rnd.random() < 0.3:
            body = body.replace("-", "_")
        if rnd.random() < 0.3:
            body += "." + rnd.choice(["x", "kv_connector", "kv_role", "a.b"])
        value = rnd.choice(["8", "2", '{"kv_connector":"X"}', "X", "true"])
        out.append([f"{dashes}{body}={value}"] if rnd.random() < 0.5 else [f"{dashes}{body}", value])
    return out


def test_no_accepted_extra_args_change_a_managed_value():
    base = _base_argv(SPEC)
    candidates = [extra for extra, _ in SMUGGLED] + BENIGN + _generated(2000)
    accepted = [extra for extra in candidates if _accepted(extra)]
    answers = _vllm([base] + [base + extra for extra in accepted])
    baseline, rest = answers[0], answers[1:]
    assert baseline["ok"], baseline
    changed = [
        (extra, {d: (baseline["values"][d], v) for d, v in a["values"].items() if v != baseline["values"][d]})
        for extra, a in zip(accepted, rest, strict=True)
        if a["ok"] and a["values"] != baseline["values"]
    ]
    assert changed == []
    print(f"{len(candidates)} candidates, {len(accepted)} accepted by kvpilot, 0 changed a managed value in vLLM")
    assert all(extra in accepted for extra in BENIGN)  # the check is not refusing everything


def test_reproduced_smuggling_is_refused_and_was_real():
    base = _base_argv(SPEC)
    answers = _vllm([base] + [base + extra for extra, _ in SMUGGLED])
    baseline = answers[0]["values"]
    for (extra, dest), answer in zip(SMUGGLED, answers[1:], strict=True):
        assert not _accepted(extra), extra
        if dest is None:
            assert not answer["ok"], (extra, answer)  # vLLM itself refuses (ambiguous prefix)
        else:
            assert answer["ok"], (extra, answer)
            assert answer["values"][dest] != baseline[dest], (extra, answer)
