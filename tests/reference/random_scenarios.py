"""Scenarios drawn at random from a seed, judged by vLLM's own scheduler: kvpilot diagnose's accuracy on traffic
no rule was written for.

:func:`draw` turns one seed into a :class:`~tests.reference.verdict_scenarios.VerdictScenario`: a server (GPU,
model, ``max_num_seqs``, token budget, KV cache size, block size, scheduling policy, ``--max-loras``) and its
traffic (an arrival process - steady, bursty or a ramp - of Poisson streams, prompt and output lengths from a
drawn distribution, shared prefixes reused by a drawn number of groups, priorities, LoRA adapters), at a load
drawn between a fraction and a multiple of the server's rough capacity. Nothing is drawn to avoid a hard case.

:func:`judge` runs a batch of them through vLLM's scheduler and stat logger in one driver run (``harness.py``),
takes each window's truth with the verdict scenarios' own code (``verdict_scenarios.truth``: the refusal of the
head of vLLM's queue each step, ``refusals.binding_limit``) and maps it onto the verdicts that name it with
``verdict_scenarios.expected_verdicts`` (the one mapping), then runs ``kvpilot diagnose`` on each recording at
several window ends, with the server's flags and without (``verdict_accuracy.py``'s options).

An :class:`Outcome` is *right* when the verdict is one of the expected; it *names an unrefused limit* when the
verdict names a limit (``max_num_seqs_cap``, ``token_budget_cap``, ``kv_cache_exhaustion``, ``lora_slot_cap``)
that refused the head of vLLM's queue in no step of the window.

Used by ``benchmarks/verdict_accuracy.py --random N`` (the accuracy table of docs/diagnosis.md).
"""

from __future__ import annotations

import json
import math
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.reference.harness import run_vllm
from tests.reference.verdict_accuracy import MODES, mode_args, run_diagnose
from tests.reference.verdict_scenarios import (
    VerdictScenario,
    driver_doc,
    engine_for,
    expected_verdicts,
    recording,
    requests_for,
    truth,
)

#: simulated seconds each drawn scenario runs, and the (``--end``, ``--window``) pairs it is diagnosed at
DURATION = 150.0
EVALUATIONS = ((60.0, 60.0), (105.0, 90.0), (150.0, 90.0))
#: scenarios per driver run (vLLM's import costs seconds; a run's answer holds every step of its scenarios)
BATCH = 30
#: verdict -> the refusal reason of vLLM's scheduler (``refusals.REASONS``) it names
LIMIT_OF_VERDICT = {
    "max_num_seqs_cap": "max_num_seqs",
    "token_budget_cap": "token_budget",
    "kv_cache_exhaustion": "kv_cache",
    "lora_slot_cap": "lora",
}
#: the verdicts a table lists, in this order (then any other verdict diagnose gave)
VERDICTS = (
    "max_num_seqs_cap",
    "token_budget_cap",
    "compute_bound",
    "kv_cache_exhaustion",
    "lora_slot_cap",
    "unexplained_queue",
    "prefix_cache_ineffective",
    "healthy",
    "idle",
)

_MODELS = ("qwen2.5-1.5b", "qwen2.5-7b", "llama-3.1-8b")
_GPUS = ("l4", "a100-80gb")
_MAX_PROMPT, _MAX_OUTPUT = 6000, 1000
#: requests/s at most (a scenario's driver run costs vLLM's Python ~1 ms a request-step)
_MAX_RATE = 20.0


def _length(rng: random.Random, mean: int, cap: int) -> dict[str, Any]:
    """A length distribution of median/mean about ``mean`` tokens, clipped to ``[1, cap]``."""
    kind = rng.choice(("fixed", "uniform", "normal", "lognormal", "exponential"))
    if kind == "fixed":
        return {"dist": "fixed", "value": min(mean, cap)}
    if kind == "uniform":
        return {"dist": "uniform", "min": max(1, mean // 2), "max": min(cap, mean + mean // 2)}
    if kind == "normal":
        return {"dist": "normal", "mean": mean, "std": mean * rng.uniform(0.1, 0.5), "min": 1, "max": cap}
    if kind == "lognormal":
        return {"dist": "lognormal", "mean": mean, "sigma": rng.uniform(0.3, 1.0), "min": 1, "max": cap}
    return {"dist": "exponential", "mean": mean, "min": 1, "max": cap}


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _capacity(flags: Mapping[str, Any], prompt: int, output: int) -> float:
    """Requests/s the server roughly sustains (a scale for the drawn load, not a prediction).

    Step time ~ the roofline's weight read plus overhead; concurrency the smaller of ``max_num_seqs`` and what the
    KV cache holds; a request costs ``output`` decode steps and ``prompt / budget`` prefill steps.
    """
    engine = engine_for(VerdictScenario("capacity", "", "", "", flags, ()))
    step = engine.cost.weight_time + engine.cost.overhead
    kv = engine.num_gpu_blocks * engine.config.block_size
    seqs = engine.config.max_num_seqs or 256
    concurrency = max(1.0, min(float(seqs), kv / (prompt + output)))
    budget = engine.config.max_num_batched_tokens or 2048
    return concurrency / ((output + prompt / budget) * step)


def draw(seed: int) -> VerdictScenario:
    """The scenario of ``seed`` (the same seed, the same scenario)."""
    rng = random.Random(seed)
    block_size = rng.choice((16, 32))
    seqs = rng.choice((4, 8, 16, 32, 64, 128, 256))
    budget = rng.choice([b for b in (256, 512, 1024, 2048, 4096, 8192) if b >= seqs])
    prompt = int(_log_uniform(rng, 100, 4000))
    output = int(_log_uniform(rng, 20, 600))
    shared: dict[str, Any] = {}
    if rng.random() < 0.4:
        shared = {"prefix_groups": rng.choice((1, 2, 5, 20, 100)), "prefix_len": rng.choice((256, 1024, 3000))}
    # the longest prompt and output a request can have, and max_model_len to fit them
    prompt_cap = max(shared.get("prefix_len", 0) + 64, min(_MAX_PROMPT, 3 * prompt))
    output_cap = min(_MAX_OUTPUT, 3 * output)
    model_len = -(-(prompt_cap + output_cap) // 256) * 256
    # the KV cache holds between 1.5 and 3 x max_num_seqs mean requests, and always one longest request
    kv_requests = _log_uniform(rng, 1.5, 3.0 * seqs)
    kv_tokens = max(model_len + 2 * block_size, int(kv_requests * (prompt + output)))
    flags: dict[str, Any] = {
        "gpu": rng.choice(_GPUS),
        "model": rng.choice(_MODELS),
        "block_size": block_size,
        "max_num_seqs": seqs,
        "max_num_batched_tokens": budget,
        "max_model_len": model_len,
        "kv_cache_tokens": (kv_tokens // block_size + 1) * block_size,  # + vLLM's null block
    }
    prompt_spec = _length(rng, prompt, prompt_cap)
    output_spec = _length(rng, output, output_cap)
    load = _log_uniform(rng, 0.15, 3.0)
    capacity = _capacity(flags, prompt + shared.get("prefix_len", 0) // 2, output)
    rate = min(_MAX_RATE, max(0.05, load * capacity))
    process = rng.choice(("steady", "bursty", "ramp"))
    base = {"prompt_len": prompt_spec, "output_len": output_spec, **shared}
    streams: list[dict[str, Any]] = []
    if process == "steady":
        streams.append({"rate": rate, "start": 0.0, "duration": DURATION, **base})
    elif process == "bursty":
        streams.append({"rate": rate * 0.3, "start": 0.0, "duration": DURATION, **base})
        for _ in range(rng.randint(1, 4)):
            length = rng.uniform(5.0, 20.0)
            streams.append(
                {
                    "rate": rate * rng.uniform(2.0, 5.0),
                    "start": rng.uniform(0.0, DURATION - length),
                    "duration": length,
                    **base,
                }
            )
    else:
        parts = rng.randint(3, 5)
        factors = sorted(_log_uniform(rng, 0.2, 2.0) for _ in range(parts))
        if rng.random() < 0.3:
            factors.reverse()  # a ramp down
        for i, f in enumerate(factors):
            streams.append({"rate": rate * f, "start": i * DURATION / parts, "duration": DURATION / parts, **base})
    for i, s in enumerate(streams):
        s["seed"] = seed * 16 + i
    features: dict[str, Any] = {}
    priorities: tuple[int, ...] = ()
    if rng.random() < 0.2:
        features["policy"] = "priority"
        priorities = rng.choice(((0, 1), (0, 1, 1, 1, 1), (0, 1, 2)))
    adapters = 0
    if rng.random() < 0.2:
        features["lora"] = {"max_loras": rng.choice((1, 2, 4)), "max_lora_rank": 16}
        adapters = rng.randint(2, 12)
    description = (
        f"{process} arrivals at ~{rate:.3g} req/s ({rate / capacity:.2f} x a rough capacity), prompts "
        f"{prompt_spec['dist']} ~{prompt}, outputs {output_spec['dist']} ~{output}"
        + (f", {shared['prefix_groups']} shared {shared['prefix_len']}-token prefixes" if shared else "")
        + (f", priorities {priorities}" if priorities else "")
        + (f", {adapters} LoRA adapters, --max-loras {features['lora']['max_loras']}" if adapters else "")
    )
    return VerdictScenario(
        name=f"random-{seed}",
        cause="random",
        control_of="",
        description=description,
        flags=flags,
        streams=tuple(streams),
        features=features,
        lora_adapters=adapters,
        priorities=priorities,
        duration=DURATION,
        evaluations=EVALUATIONS,
    )


def seeds(master: int, n: int) -> list[int]:
    """``n`` scenario seeds drawn from ``master`` (distinct, below 2**31)."""
    rng = random.Random(master)
    out: list[int] = []
    while len(out) < n:
        s = rng.randrange(1, 2**31)
        if s not in out:
            out.append(s)
    return out


@dataclass(frozen=True)
class Outcome:
    """One diagnosis held to the truth: a scenario's window in one mode."""

    scenario: str
    description: str
    end: float
    window: float
    mode: str
    limit: str  # the binding limit (``refusals.REASONS``)
    shares: Mapping[str, float]  # refusal reason -> share of the window's queued time
    expected: tuple[str, ...]
    verdict: str

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "shares": dict(self.shares), "expected": list(self.expected)}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Outcome:
        return cls(**{**doc, "expected": tuple(doc["expected"])})

    @property
    def right(self) -> bool:
        return self.verdict in self.expected

    @property
    def names_unrefused_limit(self) -> bool:
        """The verdict names a limit that refused the head of vLLM's queue in no step of the window."""
        reason = LIMIT_OF_VERDICT.get(self.verdict)
        return reason is not None and not self.shares.get(reason, 0.0) > 0.0

    @property
    def id(self) -> str:
        return f"{self.scenario}@{self.end:g}s/{self.window:g}s-{self.mode}"


def judge(
    python: str,
    scenarios: Sequence[VerdictScenario],
    expect_version: str | None = None,
    timings: dict[str, float] | None = None,
    batch: int | None = None,
    on_batch: Callable[[list[Outcome]], None] | None = None,
    runs: Path | None = None,
) -> list[Outcome]:
    """Every scenario through vLLM (one driver run per :data:`BATCH`), then ``kvpilot diagnose`` at each window, in
    each mode.

    ``timings``, when given, receives the wall seconds of the driver run (``"vllm"``) and of the diagnoses
    (``"diagnose"``); ``batch`` scenarios go to one driver run (default :data:`BATCH`), and ``on_batch`` is given
    each batch's outcomes as they are known. ``runs``: a folder keeping each scenario's driver result as
    ``NAME.json``; a scenario found there is not run again, so a second call re-judges vLLM's saved runs with the
    current kvpilot (a scenario's name is its seed; empty the folder when the driver or the generator changes).
    """
    out: list[Outcome] = []
    spent = {"vllm": 0.0, "diagnose": 0.0}
    size = batch or BATCH
    for i in range(0, len(scenarios), size):
        chunk = scenarios[i : i + size]
        t0 = time.perf_counter()
        results = _driver_results(python, chunk, expect_version, runs)
        t1 = time.perf_counter()
        outcomes = _diagnosed(chunk, results)
        if on_batch is not None:
            on_batch(outcomes)
        out += outcomes
        spent["vllm"] += t1 - t0
        spent["diagnose"] += time.perf_counter() - t1
    if timings is not None:
        timings.update(spent)
    return out


def _driver_results(
    python: str, chunk: Sequence[VerdictScenario], expect_version: str | None, runs: Path | None
) -> list[Mapping[str, Any]]:
    """The driver's result for each scenario of ``chunk``: saved in ``runs``, or from one vLLM run of the rest."""
    saved = {sc.name: runs / f"{sc.name}.json" for sc in chunk} if runs is not None else {}
    todo = [sc for sc in chunk if not (sc.name in saved and saved[sc.name].exists())]
    fresh: dict[str, Mapping[str, Any]] = {}
    if todo:
        answer = run_vllm(python, [driver_doc(sc) for sc in todo], timeout=3600)
        if expect_version is not None and answer["vllm_version"] != expect_version:
            raise RuntimeError(f"the reference venv runs vLLM {answer['vllm_version']}, not {expect_version}")
        fresh = {sc.name: r for sc, r in zip(todo, answer["results"], strict=True)}
        if runs is not None:
            runs.mkdir(parents=True, exist_ok=True)
            for name, result in fresh.items():
                saved[name].write_text(json.dumps(result), encoding="utf-8")
    return [fresh[sc.name] if sc.name in fresh else json.loads(saved[sc.name].read_text()) for sc in chunk]


def _diagnosed(scenarios: Sequence[VerdictScenario], results: Sequence[Mapping[str, Any]]) -> list[Outcome]:
    """Each scenario's windows diagnosed in each mode, from its driver result."""
    out: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="kvpilot-random-accuracy-") as tmp:
        for sc, result in zip(scenarios, results, strict=True):
            engine = engine_for(sc)
            doc = truth(sc, engine, requests_for(sc), result)
            path = Path(tmp) / f"{sc.name}.om"
            path.write_text(recording(sc, result), encoding="utf-8")
            for ev in doc["evaluations"]:
                for mode in MODES:
                    target = run_diagnose(path, ev["end_unix"], ev["window"], mode_args(doc["flags"], sc, mode))
                    out.append(
                        Outcome(
                            scenario=sc.name,
                            description=sc.description,
                            end=ev["end"],
                            window=ev["window"],
                            mode=mode,
                            limit=ev["binding"]["limit"],
                            shares=ev["binding"]["shares"],
                            expected=expected_verdicts(ev),
                            verdict=target["verdict"],
                        )
                    )
    return out


def accuracy(outcomes: Iterable[Outcome], mode: str) -> tuple[int, int]:
    """``(right, total)`` of ``mode``'s outcomes."""
    sel = [o for o in outcomes if o.mode == mode]
    return sum(o.right for o in sel), len(sel)


def report(outcomes: Sequence[Outcome], title: str = "") -> str:
    """Markdown: accuracy per mode, per expected verdict, the confusion matrix of each mode and every miss."""
    lines: list[str] = []
    if title:
        lines += [title, ""]
    verdicts = [v for v in VERDICTS if any(v in (o.verdict, o.expected[0]) for o in outcomes)]
    verdicts += sorted(({o.verdict for o in outcomes} | {o.expected[0] for o in outcomes}) - set(verdicts))
    lines += ["| truth (expected verdict) | windows | right with flags | right without flags |", "|---|---|---|---|"]
    for v in verdicts:
        row = {m: [o for o in outcomes if o.mode == m and o.expected[0] == v] for m in MODES}
        n = len(row["flags"])
        if not n:
            continue
        cells = [f"{sum(o.right for o in row[m])}/{len(row[m])}" for m in MODES]
        lines.append(f"| `{v}` | {n} | {cells[0]} | {cells[1]} |")
    cells = []
    for m in MODES:
        right, total = accuracy(outcomes, m)
        cells.append(f"**{right}/{total} ({right / total:.1%})**" if total else "-")
    lines.append(f"| all | {accuracy(outcomes, 'flags')[1]} | {cells[0]} | {cells[1]} |")
    unrefused = [o for o in outcomes if o.names_unrefused_limit]
    lines += ["", f"Verdicts naming a limit vLLM's scheduler never refused on in the window: {len(unrefused)}."]
    for m in MODES:
        sel = [o for o in outcomes if o.mode == m]
        lines += [
            "",
            f"Confusion matrix, {'with the server' + chr(39) + 's flags' if m == 'flags' else 'no flags'} "
            "(rows: expected verdict; columns: kvpilot's verdict):",
            "",
        ]
        cols = [v for v in verdicts if any(o.verdict == v for o in sel)]
        lines.append("| expected \\ got | " + " | ".join(f"`{c}`" for c in cols) + " |")
        lines.append("|---|" + "---|" * len(cols))
        counts = Counter((o.expected[0], o.verdict) for o in sel)
        for v in verdicts:
            if any(o.expected[0] == v for o in sel):
                lines.append(f"| `{v}` | " + " | ".join(str(counts[(v, c)] or "") for c in cols) + " |")
    misses = [o for o in outcomes if not o.right]
    lines += ["", f"Misses ({len(misses)}):", ""]
    for o in misses:
        shares = ", ".join(f"{k} {v:.0%}" for k, v in o.shares.items() if v)
        flag = " (names a limit never refused)" if o.names_unrefused_limit else ""
        lines.append(
            f"- {o.id}: got `{o.verdict}`{flag}, expected {' or '.join(f'`{e}`' for e in o.expected)} "
            f"(binding {o.limit}; queued time {shares or 'none'}); {o.description}"
        )
    return "\n".join(lines)


def by_kind(outcomes: Iterable[Outcome]) -> Counter[tuple[str, str, str]]:
    """Misses counted by (mode, expected verdict, verdict given)."""
    return Counter((o.mode, o.expected[0], o.verdict) for o in outcomes if not o.right)
