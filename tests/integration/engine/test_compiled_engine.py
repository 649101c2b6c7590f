"""The compiled engine (setup.py: mypyc) gives what the engine's Python source gives, to the last digit.

``make install`` compiles the engine's hot modules; a build without a C compiler, or with ``KVPILOT_COMPILE=0``,
runs their source. The rest of the suite tests whichever this venv has (in CI: the compiled one, asserted below);
here the same runs go through both, the source from a copy of the package without its compiled modules, in a
child process each, and everything they print is compared: every step of a run with arrivals, prefix hits, chunked
prefills and preemptions (times as ``repr`` of the float), the block pool block by block, the exported metrics,
every scenario's report and ``kvpilot diagnose``'s JSON with its replay and what-ifs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kvpilot
from kvpilot.engine import COMPILED, block_pool, core, fast_forward, hardware, request, workloads
from tests.conftest import FIXTURES, in_ci

PACKAGE = Path(kvpilot.__file__).resolve().parent

#: prints one JSON document of everything the engine computed on workloads that exercise each of its paths
RUNS = r"""
import json, sys
from kvpilot.engine import COMPILED, Engine, EngineConfig
from kvpilot.engine.exporter import VLLMMetrics
from kvpilot.engine.scenarios import SCENARIOS, run_scenario
from kvpilot.engine.workloads import poisson


def trace(fast_forward, **flags):
    cfg = EngineConfig(gpu="l4", model="qwen2.5-1.5b", max_model_len=4096, **flags)
    engine = Engine(cfg, keep_finished=True, fast_forward=fast_forward)
    engine.metrics = VLLMMetrics(
        vllm_version="0.29.0", model_name="m",
        cache_config={"block_size": str(engine.block_size), "num_gpu_blocks": str(engine.num_gpu_blocks)},
        max_model_len=engine.config.max_model_len,
    )
    wl = poisson(
        12, num_requests=300, seed=5, prefix_groups=3, prefix_len=256,
        prompt_len={"dist": "normal", "mean": 1200, "std": 500, "min": 20},
        output_len={"dist": "normal", "mean": 150, "std": 80, "min": 1},
    )
    steps = []
    def on_step(_engine, out):
        if out is not None:
            steps.append([repr(out.start), repr(out.duration), out.num_tokens, out.num_scheduled, out.running,
                          out.waiting, repr(out.kv_cache_usage), out.generation_tokens, out.preemptions,
                          out.prefix_hits, [r.request_id for r in out.finished], [repr(t) for t in out.ttfts]])
    engine.run(wl, on_step=on_step)
    body = engine.metrics.exposition("text/plain")[0].decode()
    snap = engine.pool.snapshot([])
    return {
        "steps": steps,
        "requests": [[r.request_id, repr(r.first_token_time), repr(r.finish_time), r.num_preemptions,
                      r.prefix_hit_tokens] for r in engine.finished],
        "counters": [engine.num_steps, engine.num_preemptions, engine.prefix_hits, engine.pool.num_evictions],
        # the pool block by block; not the hash values: a hash of None (a chain's start) is its address in 3.11
        "pool": [snap["queue"], snap["ref_cnt"], [h is None for h in snap["block_hash"]],
                 sorted(snap["cached"].values()), sorted(b for held in snap["dups"].values() for b in held),
                 snap["num_evictions"], snap["num_free"]],
        "metrics": [line for line in body.splitlines() if "_created" not in line],
    }


runs = {
    f"{name} fast_forward={ff}": trace(ff, **flags)
    for name, flags in {
        "kv pressure": {"num_gpu_blocks": 900, "max_num_batched_tokens": 2048},
        "chunked prefills": {"max_num_batched_tokens": 256, "max_num_seqs": 32},
    }.items()
    for ff in (True, False)
}
runs["scenarios"] = {name: run_scenario(name) for name in SCENARIOS}
print(json.dumps({"compiled": COMPILED, "runs": runs}, sort_keys=True, default=repr))
"""


def _python_source(tmp_path: Path) -> Path:
    """A copy of the package with its compiled modules left out: what a build without a C compiler installs."""
    root = tmp_path / "source"
    shutil.copytree(PACKAGE, root / "kvpilot", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    return root


def _run(args: list[str], source: Path | None) -> tuple[int, dict[str, object]]:
    """Exit code and the JSON printed by ``python args``, with the package in ``source`` (None: the install's)."""
    env = dict(os.environ, PYTHONHASHSEED="0")  # the same string hashes in both processes
    if source is not None:  # first on sys.path: before the install's own copy
        env["PYTHONPATH"] = str(source)
    out = subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=600, check=False, cwd=source
    )
    assert out.stdout, out.stderr[-2000:]
    document: dict[str, object] = json.loads(out.stdout)
    return out.returncode, document


def _require_compiled() -> None:
    if not COMPILED:
        message = "the engine runs from its Python source here (KVPILOT_COMPILE=0, or no C compiler at install)"
        if in_ci():
            pytest.fail(message + "; CI=true: CI's install compiles it")
        pytest.skip(message)


def test_the_install_runs_the_compiled_engine():
    _require_compiled()
    for module in (block_pool, core, fast_forward, hardware, request, workloads):
        assert not str(module.__file__).endswith(".py"), module.__name__


@pytest.mark.slow
def test_the_compiled_engine_gives_what_its_python_source_gives(tmp_path):
    _require_compiled()
    source = _python_source(tmp_path)
    (rc, compiled), (python_rc, python) = _run(["-c", RUNS], None), _run(["-c", RUNS], source)
    assert (rc, python_rc) == (0, 0)
    assert (compiled["compiled"], python["compiled"]) == (True, False)
    assert compiled["runs"] == python["runs"]
    runs = compiled["runs"]
    assert isinstance(runs, dict)
    kv = runs["kv pressure fast_forward=True"]
    assert kv["counters"][1] > 0  # it preempted
    assert kv["counters"][2] > 0  # it hit the prefix cache
    stepped = runs["kv pressure fast_forward=False"]
    for key in ("requests", "counters", "pool", "metrics"):  # and fast-forwarding is stepping, compiled too
        assert kv[key] == stepped[key]


@pytest.mark.slow
def test_diagnose_with_what_ifs_is_the_same_with_either_engine(tmp_path):
    _require_compiled()
    source = _python_source(tmp_path)
    recording = FIXTURES / "recordings" / "vllm" / "max-num-seqs-cap.om"
    args = ["-c", "from kvpilot.cli import main; main()", "diagnose", "--recording", str(recording)]
    args += ["--max-num-seqs", "4", "--gpu-name", "H100", "--what-if", "max_num_seqs=16", "--what-if", "replicas=2"]
    args += ["-o", "json"]
    (rc, compiled), (python_rc, python) = _run(args, None), _run(args, source)
    assert rc == python_rc == 2  # a critical verdict (docs/user-guide.md, exit codes)
    # the time the predictions took is the one thing that differs (and the reason for the compiled engine)
    times = re.compile(r'("wall_s": )[0-9.]+|( in )[0-9.]+( s[. ])')
    same = [times.sub(r"\1\2(time)\3", json.dumps(document, sort_keys=True)) for document in (compiled, python)]
    assert same[0] == same[1]
    (target,) = compiled["targets"]
    assert isinstance(target, dict)
    assert [w["change"] for w in target["what_if"]][:2] == [{"max_num_seqs": 16}, {"replicas": 2}]
