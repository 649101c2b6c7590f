"""``kvpilot diagnose`` on the ground-truth recordings: the cases, their flags, and the verdict each gets.

A *case* is one committed scenario (``tests/fixtures/recordings/vllm/verdicts/``, written by
``verdict_scenarios.py``), one evaluated window (its ``--end`` and ``--window``) and one way of running diagnose:
``"flags"`` (the limits the server ran with, as an operator or a VLLMServer spec gives them, and the length of
the prompt prefix its traffic shares, ``--shared-prefix-tokens``, as its owner knows it) or ``"bare"`` (no flag:
limits from the recording and vLLM's defaults, no prefix length). Used by ``test_verdict_accuracy.py`` and
``benchmarks/verdict_accuracy.py``; it reads only committed files, never vLLM.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from kvpilot.cli import cli
from tests.reference.verdict_scenarios import OUT, SCENARIOS, VerdictScenario, expected_verdicts, load_truths

#: server flag (truth document) -> ``kvpilot diagnose`` option, used when diagnose has that option
FLAG_OPTIONS = {
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_model_len": "--max-model-len",
    "gpu_memory_bytes": "--gpu-memory",
    "gpu": "--gpu-name",
    "max_loras": "--max-loras",
    "num_speculative_tokens": "--num-speculative-tokens",
    "policy": "--scheduling-policy",
}
MODES = ("flags", "bare")


@functools.cache
def diagnose_options() -> frozenset[str]:
    """The long option names ``kvpilot diagnose`` accepts today (``--max-num-seqs``, ...)."""
    from kvpilot.commands.diagnose import command

    return frozenset(opt for p in command.params for opt in getattr(p, "opts", ()) if opt.startswith("--"))


def cli_args(flags: Mapping[str, Any], options: frozenset[str] | None = None) -> list[str]:
    """The server's flags as diagnose options, those diagnose has (a flag it cannot take is left out)."""
    have = diagnose_options() if options is None else options
    out: list[str] = []
    for key, opt in FLAG_OPTIONS.items():
        if key in flags and flags[key] is not None and opt in have:
            out += [opt, str(flags[key])]
    return out


def shared_prefix_tokens(scenario: str | VerdictScenario) -> int | None:
    """The length of the prompt prefix ``scenario``'s traffic shares (its streams' ``prefix_len``), or None.

    None when a stream shares no prefix (no ``prefix_groups``) or the streams' lengths differ: no one length.
    """
    sc = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
    lengths = {int(s.get("prefix_len", 0)) if s.get("prefix_groups") else 0 for s in sc.streams}
    length = lengths.pop() if len(lengths) == 1 else 0
    return length or None


def mode_args(flags: Mapping[str, Any], scenario: str | VerdictScenario, mode: str) -> list[str]:
    """Diagnose's options in ``mode``: ``"flags"`` the server's flags and its shared prefix length, ``"bare"`` none."""
    if mode != "flags":
        return []
    args = cli_args(flags)
    shared = shared_prefix_tokens(scenario)
    if shared and "--shared-prefix-tokens" in diagnose_options():
        args += ["--shared-prefix-tokens", str(shared)]
    return args


def run_diagnose(recording: Path, end_unix: float, window: float, args: list[str]) -> dict[str, Any]:
    """``kvpilot diagnose --recording FILE --end T --window Ws -o json ARGS``: the first target's JSON."""
    result = CliRunner().invoke(
        cli,
        [
            "diagnose",
            "--recording",
            str(recording),
            "--no-kube",
            "--end",
            f"{end_unix:.3f}",
            "--window",
            f"{window:g}s",
            "-o",
            "json",
            *args,
        ],
    )
    doc = json.loads(result.output)
    target: dict[str, Any] = doc["targets"][0]
    return target


@dataclass(frozen=True)
class Case:
    """One diagnosis to hold to the truth: scenario, window, mode."""

    scenario: str
    end: float
    window: float
    mode: str

    @property
    def id(self) -> str:
        return f"{self.scenario}@{self.end:g}s/{self.window:g}s-{self.mode}"


def cases(folder: Path = OUT) -> list[Case]:
    """Every committed scenario x evaluated window x mode."""
    out = []
    for name, doc in load_truths(folder).items():
        for ev in doc["evaluations"]:
            for mode in MODES:
                out.append(Case(name, ev["end"], ev["window"], mode))
    return out


def evaluation(doc: Mapping[str, Any], case: Case) -> Mapping[str, Any]:
    """The truth document's entry for ``case``'s window."""
    return next(e for e in doc["evaluations"] if e["end"] == case.end and e["window"] == case.window)


@functools.cache
def _truths(folder: Path) -> dict[str, dict[str, Any]]:
    return load_truths(folder)


@functools.cache
def diagnose_case(case: Case, folder: Path = OUT) -> dict[str, Any]:
    """``{"verdict", "expected", "right", "evidence", "signals", "findings", "truth"}`` for one case (computed once)."""
    doc = _truths(folder)[case.scenario]
    ev = evaluation(doc, case)
    args = mode_args(doc["flags"], case.scenario, case.mode)
    target = run_diagnose(folder / doc["recording"], ev["end_unix"], case.window, args)
    expected = expected_verdicts(ev)
    return {
        "verdict": target["verdict"],
        "expected": expected,
        "right": target["verdict"] in expected,
        "evidence": target.get("evidence", []),
        "signals": target.get("signals", {}),
        "findings": target.get("findings", []),
        "truth": ev,
    }


def evidence_limit(evidence: list[str], name: str) -> tuple[int, str] | None:
    """``(value, source)`` of limit ``name`` in the evidence's ``Limits: ...`` sentence, e.g. ``(256, "default")``."""
    for line in evidence:
        if line.startswith("Limits:"):
            m = re.search(rf"\b{re.escape(name)} ([\d,]+) \(([^)]*)\)", line)
            if m:
                return int(m.group(1).replace(",", "")), m.group(2)
    return None
