"""Render a :class:`~kvpilot.diagnose.model.Report` as JSON, text (rich) or markdown.

JSON follows the stable schema docs/diagnose-output.schema.json. Text is for a terminal of a given
width (rich, wrapped on spaces, rendered to a string here so the CLI only prints). Pure: returns strings.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _encode_str
from typing import Any, TypeVar

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from kvpilot.diagnose.model import Diagnosis, Finding, Prediction, Recommendation, Replay, Report, WhatIf, evidence_text
from kvpilot.text.documents import JsonObject, JsonValue
from kvpilot.text.layout import Prose
from kvpilot.text.numbers import fig, number, significant
from kvpilot.text.safe import markdown_text, one_line

#: signals shown in text/markdown (JSON has all)
_KEY_SIGNALS = (
    "running_avg",
    "running_max",
    "waiting_avg",
    "waiting_trend_per_s",
    "kv_usage_avg",
    "kv_usage_max",
    "kv_admission_ceiling",
    "preemptions_increase",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "prefix_hit_rate",
    "budget_full_step_share",
    "ttft_p99_s",
)
_SEVERITY_STYLE = {"ok": "green", "warning": "yellow", "critical": "bold red", "unknown": "magenta"}


def to_json(report: Report) -> str:
    """``-o json``: the report as indented JSON (NaN never appears: unknowns are null)."""
    return "".join(json_chunks(report))


_QUERIES = "\0queries\0"  # stands in for a target's queries (a sanitised string never holds NUL)


def json_chunks(report: Report) -> Iterator[str]:
    """:func:`to_json`'s text in pieces, one per target: ``json.dumps(report.to_json(), indent=2,
    allow_nan=False)`` exactly, without the whole document in memory at once.

    Every target of a run shares the same queries (32 strings, 80 % of a target's JSON): a list of
    queries seen before is encoded once and its text reused, the rest of each target encoded anew.
    """
    doc: dict[str, Any] = report.to_json()  # the document being encoded, a target at a time
    targets = doc.pop("targets")
    head = json.dumps({"source": doc["source"], "window_seconds": doc["window_seconds"]}, indent=2, allow_nan=False)
    yield head[:-2] + ',\n  "targets": ['
    encoded: dict[tuple[str, ...], str] = {}
    for i, target in enumerate(targets):
        queries = tuple(target["queries"])
        if queries not in encoded:
            encoded[queries] = _indented(json.dumps(list(queries), indent=2, allow_nan=False), 6)
        target["queries"] = _QUERIES
        try:
            text = _dumps(target, "    ")
        except TypeError:  # a value _dumps does not know: json's own encoder (the same text, 3x slower)
            text = _indented(json.dumps(target, indent=2, allow_nan=False), 4)
        text = text.replace(f'"queries": {json.dumps(_QUERIES)}', f'"queries": {encoded[queries]}', 1)
        yield ("," if i else "") + "\n    " + text
    rest = json.dumps({"notes": doc["notes"]}, indent=2, allow_nan=False)
    yield ("\n  ]," if targets else "],") + "\n" + rest[2:]


def _dumps(value: Any, indent: str) -> str:  # noqa: C901
    """``json.dumps(value, indent=2, allow_nan=False)`` (its lines after the first ``indent`` deeper)
    for the JSON types a report holds (str keys; str, int, float, bool, None, dict, list values),
    written with the C string encoder of :mod:`json` and no generator per value: json's indented
    encoder is pure Python, 2.6 s of a 10,000-target report (docs/performance.md).

    Raises:
        TypeError: any other type (the caller falls back to :func:`json.dumps`).
        ValueError: NaN or an infinity, as ``allow_nan=False`` does.
    """
    if type(value) is str:
        return _encode_str(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is float:
        if value != value or value in (math.inf, -math.inf):
            raise ValueError(f"Out of range float values are not JSON compliant: {value!r}")
        return float.__repr__(value)
    if type(value) is int:
        return int.__repr__(value)
    inner = indent + "  "
    if type(value) is dict:
        if not value:
            return "{}"
        if not all(type(k) is str for k in value):
            raise TypeError("a key that is not a string")
        items = [f"{inner}{_encode_str(k)}: {_dumps(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if type(value) is list:
        if not value:
            return "[]"
        return "[\n" + ",\n".join([inner + _dumps(v, inner) for v in value]) + "\n" + indent + "]"
    raise TypeError(f"{type(value).__name__} is not one of the report's JSON types")


def _indented(text: str, spaces: int) -> str:
    """Indented JSON ``text`` nested ``spaces`` deeper (every line but the first)."""
    return text.replace("\n", "\n" + " " * spaces)


def target_name(d: Diagnosis) -> str:
    """How the report names a target: ``namespace/pod model engine N`` (``(recording)`` for a recording's own)."""
    t = d.target
    where = (
        "/".join(x for x in (t.get("namespace"), t.get("pod")) if x)
        or t.get("instance")
        or t.get("job")
        or t.get("server")
        or "(recording)"
    )
    extra = " ".join(x for x in (t.get("model_name") or "", f"engine {t['engine']}" if t.get("engine") else "") if x)
    return f"{where} {extra}".strip()


def _fmt_signal(value: float | None) -> str:
    return "-" if value is None else significant(value)


def _flag_value(value: str | float | None) -> str:
    """A recommendation's current/suggested value as a user would type it: ``8192``, ``0.93``, ``not set``."""
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return number(value, grouping=False) if float(value).is_integer() else fig(value, 4)
    return str(value)


def change_text(rec: Recommendation) -> str:
    """A recommendation as the change a user makes: ``--max-num-seqs 4 -> 16`` (``not set`` when unset); one of
    several flags together (``--max-num-seqs and --kv-cache-dtype``, values ``48, auto`` -> ``96, fp8``) as each
    flag with its own values: ``--max-num-seqs 48 -> 96, --kv-cache-dtype auto -> fp8``.
    """
    flags = rec.flag.split(" and ")
    if len(flags) > 1 and isinstance(rec.current, str) and isinstance(rec.suggested, str):
        now, then = rec.current.split(", "), rec.suggested.split(", ")
        if len(now) == len(then) == len(flags):
            return ", ".join(f"{f} {a} -> {b}" for f, a, b in zip(flags, now, then, strict=True))
    return f"{rec.flag} {_flag_value(rec.current)} -> {_flag_value(rec.suggested)}"


#: the figures a headline compares, current -> with the change: (``P`` key, label, unit)
_HEADLINE_FIGURES = (
    ("requests_finished_per_s", "requests/s", ""),
    ("queue_time_mean_s", "queue time", "s"),
    ("ttft_mean_s", "TTFT", "s"),
    ("preemptions_per_s", "preemptions/s", ""),
)


def predicted_effect(rec: Recommendation, now: Prediction | None = None) -> str:
    """A recommendation's effect in a few words: the engine model's prediction against ``now`` (the replay of the
    window, a ``P``) when there is one - ``requests/s 2.78 -> 5.01, queue time 65.8 s -> 2.19 ms`` - else the first
    clause of its expected effect (the rule's own estimate).
    """
    then = rec.predicted
    if then is not None and now is not None:
        now, then = now.rounded(), then.rounded()
        parts = []
        for key, label, unit in _HEADLINE_FIGURES:
            a, b = getattr(now, key), getattr(then, key)
            if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
                continue
            if key == "preemptions_per_s" and not (a or b):
                continue
            parts.append(f"{label} {significant(a, 3, unit)} -> {significant(b, 3, unit)}".replace("  ", " "))
        if parts:
            return "predicted " + ", ".join(parts)
    effect = " ".join(rec.expected_effect.split())
    for stop in ("; ", ". "):
        effect = effect.split(stop, 1)[0]
    return effect.rstrip(".")


def headline(d: Diagnosis) -> str:
    """A target's answer in one line: ``NAME: VERDICT (SEVERITY): change FLAG A -> B: EFFECT`` (the first
    recommendation, the number of others after it), or the verdict alone when nothing is to change.
    """
    head = f"{target_name(d)}: {d.verdict} ({d.severity})"
    if not d.recommendations:
        return head + (": no change needed" if d.severity == "ok" else ": no flag change to recommend")
    first = d.recommendations[0]
    now = d.replay.predicted if d.replay is not None and d.replay.matches else None
    more = len(d.recommendations) - 1
    others = f" (+{more} more below)" if more else ""
    return f"{head}: change {change_text(first)}: {predicted_effect(first, now)}{others}"


def _p_cells(p: Prediction, replicas: int = 1) -> list[tuple[str, str]]:
    """A ``P`` (docs/diagnose-output.schema.json ``$defs/prediction``, as rounded there) as ``(label, value)`` pairs.

    With ``replicas`` > 1 the rates and the waiting trend are all replicas' together and the gauges (running,
    waiting, KV peak) one replica's (docs/diagnosis.md, "Predictions"): those say "per replica".
    """

    def secs(v: float | None) -> str:
        return significant(v, 3, "s") if v is not None else "unknown"

    p = p.rounded()
    each = " per replica" if replicas > 1 else ""
    waiting = number(p.mean_waiting, 1) + each
    if p.queue_growing:
        together = "all replicas " if replicas > 1 else ""
        waiting += f" ({together}growing {number(p.waiting_trend_per_s, 2)}/s)"
    kv = p.max_kv_usage
    return [
        ("requests/s", number(p.requests_finished_per_s, 2)),
        ("queue time", secs(p.queue_time_mean_s)),
        ("TTFT", secs(p.ttft_mean_s)),
        ("running", number(p.mean_running, 1) + each),
        ("waiting", waiting),
        ("KV peak", number(kv * 100 if kv is not None else None, 1, "%") + each),
        ("preemptions/s", number(p.preemptions_per_s, 2)),
        ("binding", p.binding_limit or "unknown"),
    ]


def _p_text(p: Prediction | None, replicas: int = 1) -> str:
    """``requests/s 15.23, queue time 34.2 s, ...``: one ``P`` in a line."""
    return "not simulated" if p is None else ", ".join(f"{k} {v}" for k, v in _p_cells(p, replicas))


def _change_label(w: WhatIf) -> str:
    """``max_num_seqs=16, kv_cache_dtype=fp8`` (as ``--what-if`` takes it)."""
    return ", ".join(f"{k}={_flag_value(v)}" for k, v in w.change)


def _replay_lines(d: Diagnosis) -> tuple[str, list[str], list[str]]:
    """(headline, figure lines, notes) of a target's replay for text and markdown."""
    replay = d.replay
    if replay is None or replay.predicted is None:
        return "replay: not run", [], list(replay.misses if replay else ())
    if replay.matches:
        head = "replay: the engine model reproduces the window (within the tolerances of docs/diagnosis.md)"
        notes = list(replay.notes)
    else:
        head = "replay: the engine model does NOT reproduce the window: predictions withheld"
        notes = [*replay.misses, *replay.notes]
    figures = [f"replay  {_p_text(replay.predicted)}", f"window  {_p_text(replay.observed)}"]
    return head, figures, notes


def _bullets(lines: list[str], indent: int) -> Table:
    """``lines`` as ``- text`` bullets wrapped on spaces, continuation lines under the text."""
    grid = Table.grid(padding=(0, 1), pad_edge=False)
    grid.add_column(no_wrap=True, width=indent + 1, justify="right")
    grid.add_column()
    for line in lines:
        grid.add_row("-", Prose(line))
    return grid


def _text_predictions(console: Console, d: Diagnosis, verbose: bool) -> None:
    """A target's replay (its figures and notes with ``verbose``, or when it misses the window: why) and what-ifs."""
    head, figures, notes = _replay_lines(d)
    console.print(Padding(Prose(Text(head, style="bold")), (0, 0, 0, 2)))
    if verbose or d.replay is None or not d.replay.matches:
        for line in figures if verbose else ():
            console.print(Padding(Prose(line), (0, 0, 0, 4)))
        console.print(_bullets(notes, 4))
    for w in d.what_if:
        outcome = _p_text(w.predicted, w.replicas) if w.predicted else w.reason or "not simulated"
        outcome += "".join(f" ({note})" for note in w.notes)
        console.print(Padding(Prose(f"what-if {_change_label(w)}: {outcome}"), (0, 0, 0, 2)))


def _text_answers(console: Console, report: Report) -> None:
    """The top of a text report: the note that the data is short of the window, each target's headline, the notes."""
    if report.short_data:
        console.print(Prose(Text(f"note: {report.short_data}", style="bold")))
    for d in report.targets:
        console.print(Prose(Text(headline(d), style=_SEVERITY_STYLE.get(d.severity, ""))))
    for note in report.notes:
        if note != report.short_data:
            console.print(Padding(Prose(f"note: {note}"), (0, 0, 0, 2)))


def to_text(report: Report, width: int = 100, color: bool = False, verbose: bool = False) -> str:
    """Terminal rendering at ``width`` columns: the answer first - one :func:`headline` per target (verdict, the
    change, its predicted effect) - then the notes, then one block per target (verdict, each recommendation as
    ``change: FLAG CURRENT -> SUGGESTED`` with its effect, evidence bullets, the replay's verdict, what-ifs,
    findings). ``verbose`` adds the internals: how figures were derived (formulas, ceilings), the replay's figures
    and notes, the key signals.

    Every line wraps on spaces: a flag, verdict or metric name is never split across lines, nor a figure
    from its unit (:class:`kvpilot.text.layout.Prose`).
    """
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, no_color=not color, highlight=False)
    window = fig(report.window_seconds, 3, "s")
    console.print(
        Prose(
            Text(f"kvpilot diagnose  source: {report.source}  window: {window}", style="bold"),
            whole=(f"window: {window}",),
        )
    )
    _text_answers(console, report)
    for d in report.targets:
        style = _SEVERITY_STYLE.get(d.severity, "")
        console.print()
        console.print(
            Text.assemble(
                (target_name(d), "bold"),
                ": ",
                (d.verdict, style),
                f" (severity {d.severity}, confidence {number(d.confidence, 2)})",
            )
        )
        for r in d.recommendations:
            console.print(
                Padding(
                    Prose(Text(f"change: {change_text(r)}", style="bold")),
                    (0, 0, 0, 2),
                )
            )
            console.print(Padding(Prose(r.expected_effect), (0, 0, 0, 4)))
        console.print(_bullets(_evidence(d.evidence, verbose), 2))
        if d.replay is not None:
            _text_predictions(console, d, verbose)
        for f in d.findings:
            console.print(Padding(Prose(f"also: {f.verdict} ({f.severity})"), (0, 0, 0, 2)))
            console.print(_bullets(_evidence(f.evidence, verbose), 4))
        shown = [(k, d.signals.get(k)) for k in _KEY_SIGNALS if d.signals.get(k) is not None]
        if shown and verbose:
            signals = ", ".join(f"{k}={_fmt_signal(v)}" for k, v in shown)
            console.print(Padding(Prose(f"signals: {signals}"), (0, 0, 0, 2)))
    if not report.targets:
        console.print("no targets")
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())


def _evidence(evidence: list[str], verbose: bool) -> list[str]:
    """Evidence sentences as a report shows them: without their derivations unless ``verbose`` (none left empty)."""
    return [e for e in (evidence_text(x, verbose) for x in evidence) if e.strip()]


def _md_finding(f: Finding, level: str, verbose: bool = False) -> list[str]:
    lines = [f"{level} `{f.verdict}` - severity {f.severity}, confidence {number(f.confidence, 2)}", ""]
    if f.recommendations:
        lines += ["| flag | current | suggested | expected effect |", "|---|---|---|---|"]
        lines += [
            f"| `{r.flag}` | {_flag_value(r.current)} | {_flag_value(r.suggested)} | {r.expected_effect} |"
            for r in f.recommendations
        ]
        lines.append("")
    lines += [f"- {e}" for e in _evidence(f.evidence, verbose)]
    return lines + [""]


_MD_P_HEAD = "| requests/s | queue time | TTFT | running | waiting | KV peak | preemptions/s | binding |"


def _md_p(p: Prediction | None, replicas: int = 1) -> str:
    """One ``P`` as the cells of :data:`_MD_P_HEAD`."""
    cells = [v for _, v in _p_cells(p, replicas)] if p is not None else ["-"] * 8
    return "| " + " | ".join(cells) + " |"


def _md_predictions(d: Diagnosis, verbose: bool = False) -> list[str]:
    """The replay against the window (its figures with ``verbose``) and the what-ifs, as tables (nothing when not
    predicted).
    """
    if d.replay is None:
        return []
    head, _, notes = _replay_lines(d)
    lines = [f"#### {head[0].upper()}{head[1:]}", ""]
    replay = d.replay
    if replay.matches and not verbose:
        notes = []
    if replay.predicted is not None and verbose:
        lines += ["| | " + _MD_P_HEAD[2:], "|---" * 9 + "|"]
        lines += [f"| replay {_md_p(replay.predicted)}", f"| window {_md_p(replay.observed)}", ""]
    lines += [f"- {n}" for n in notes]
    if d.what_if:
        lines += ["", "| what-if " + _MD_P_HEAD, "|---" * 9 + "|"]
        for w in d.what_if:
            label = f"`{_change_label(w)}`" + "".join(f" ({note})" for note in w.notes)
            if w.predicted is None:
                lines.append(f"| {label} | {w.reason or 'not simulated'} |" + " |" * 7)
            else:
                lines.append(f"| {label} {_md_p(w.predicted, w.replicas)}")
    return lines + [""]


def to_markdown(report: Report, verbose: bool = False) -> str:
    """``-o markdown``: the answer first (one :func:`headline` per target), then a heading per target with its
    recommendations table and evidence bullets; ``verbose`` adds the internals as :func:`to_text` does.
    """
    lines = ["# kvpilot diagnose", "", f"Source: {report.source}; window {fig(report.window_seconds, 3, 's')}.", ""]
    if report.short_data:
        lines += [f"> **{report.short_data}**", ""]
    lines += [f"- {markdown_text(headline(d))}" for d in report.targets]
    if report.targets:
        lines.append("")
    notes = [n for n in report.notes if n != report.short_data]
    lines += [f"> {n}" for n in notes]
    if notes:
        lines.append("")
    for d in report.targets:
        lines += [f"## {markdown_text(target_name(d))}", ""]  # a label cannot end the heading or open a link
        lines += _md_finding(d, "###", verbose)
        lines += _md_predictions(d, verbose)
        for f in d.findings:
            lines += _md_finding(f, "#### also:", verbose)
        shown = [(k, d.signals.get(k)) for k in _KEY_SIGNALS if d.signals.get(k) is not None]
        if shown and verbose:
            lines += ["| signal | value |", "|---|---|"] + [f"| {k} | {_fmt_signal(v)} |" for k, v in shown] + [""]
    return "\n".join(lines)


_F = TypeVar("_F", bound=Finding)


def _safe_finding(f: _F) -> _F:
    """``f`` with its evidence and its recommendations' effects through :func:`one_line`."""
    return dataclasses.replace(
        f,
        evidence=[one_line(e) for e in f.evidence],
        recommendations=[
            dataclasses.replace(r, expected_effect=one_line(r.expected_effect)) for r in f.recommendations
        ],
    )


def _safe_tree(value: JsonValue) -> JsonValue:
    """``value`` (JSON-shaped) with every string through :func:`one_line`."""
    if isinstance(value, str):
        return one_line(value)
    if isinstance(value, dict):
        return {k: _safe_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_safe_tree(v) for v in value]
    return value


def _safe_object(value: JsonObject) -> JsonObject:
    """A JSON object through :func:`_safe_tree`."""
    return {k: _safe_tree(v) for k, v in value.items()}


@dataclass(frozen=True)
class _Shown:
    """A replay's workload or step time as ``-o json`` prints it, its strings made safe (:func:`_safe_replay`)."""

    json: JsonObject

    def to_json(self) -> JsonObject:
        return self.json


def _safe_replay(replay: Replay | None) -> Replay | None:
    """``replay`` with every string through :func:`one_line` (its fitted workload's and step time's too)."""
    if replay is None:
        return None
    return dataclasses.replace(
        replay,
        misses=tuple(one_line(m) for m in replay.misses),
        notes=tuple(one_line(n) for n in replay.notes),
        tolerances=None if replay.tolerances is None else {k: one_line(v) for k, v in replay.tolerances.items()},
        workload=None if replay.workload is None else _Shown(_safe_object(replay.workload.to_json())),
        step_time=None if replay.step_time is None else _Shown(_safe_object(replay.step_time.to_json())),
    )


def _safe_what_if(w: WhatIf) -> WhatIf:
    """``w`` with every string through :func:`one_line`."""
    return dataclasses.replace(
        w,
        change=tuple((k, one_line(v) if isinstance(v, str) else v) for k, v in w.change),
        reason=one_line(w.reason) if w.reason else "",
        notes=tuple(one_line(n) for n in w.notes),
    )


def _evidence_shown(report: Report, verbose: bool) -> Report:
    """``report`` with each evidence sentence as the text and Markdown reports show it (:func:`_evidence`)."""

    def shown(f: _F) -> _F:
        return dataclasses.replace(f, evidence=_evidence(f.evidence, verbose))

    targets = [dataclasses.replace(shown(d), findings=[shown(f) for f in d.findings]) for d in report.targets]
    return dataclasses.replace(report, targets=targets)


def safe_report(report: Report) -> Report:
    """A copy of ``report`` whose external strings (target labels, evidence quoting them, notes,
    the source, queries) are one line each, without terminal control characters and with secrets
    redacted (:mod:`kvpilot.text.safe`): labels come from ``/metrics`` bodies, recordings and
    Prometheus answers, which anyone able to expose metrics controls.
    """
    targets = [
        dataclasses.replace(
            _safe_finding(d),
            target={k: one_line(v) for k, v in d.target.items()},
            queries=[one_line(q) for q in d.queries],
            findings=[_safe_finding(f) for f in d.findings],
            replay=_safe_replay(d.replay),
            what_if=[_safe_what_if(w) for w in d.what_if],
        )
        for d in report.targets
    ]
    return dataclasses.replace(
        report,
        source=one_line(report.source),
        notes=[one_line(n) for n in report.notes],
        targets=targets,
        short_data=None if report.short_data is None else one_line(report.short_data),
    )


def render(report: Report, fmt: str, width: int = 100, verbose: bool = False) -> str:
    """Dispatch on ``fmt`` (``text`` | ``json`` | ``markdown``); ``width``: terminal columns for text;
    ``verbose``: text and Markdown show the internals too (JSON always has them).

    Every format renders :func:`safe_report` of ``report``.

    Raises:
        ValueError: unknown format.
    """
    return "".join(render_chunks(report, fmt, width, verbose))


def render_chunks(report: Report, fmt: str, width: int = 100, verbose: bool = False) -> Iterator[str]:
    """:func:`render` in pieces (``-o json``: one per target), for writing as they come.

    Raises:
        ValueError: unknown format.
    """
    if fmt in ("markdown", "text"):  # the derivations' marks go before safe_report (which would drop them alone)
        report = _evidence_shown(report, verbose)
    report = safe_report(report)
    if fmt == "json":
        return json_chunks(report)
    if fmt == "markdown":
        return iter([to_markdown(report, verbose)])
    if fmt == "text":
        return iter([to_text(report, width, verbose=verbose)])
    raise ValueError(f"-o: unknown output format {fmt!r} (text, json, markdown)")
