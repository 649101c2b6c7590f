"""A whole diagnosis, then its predictions: what ``kvpilot diagnose`` and ``kvpilot alert-hook`` call.

:func:`diagnose_and_predict` runs :func:`kvpilot.diagnose.run.run` (asking a recording or a scrape for the
fit's signals at once), then, for the targets whose verdict is a queue (or every diagnosed target when
``--what-if`` asks for changes), most severe first, :func:`kvpilot.advice.advise.predict_target` until the
what-if budget runs out: wall-clock seconds of prediction for all of them, counted from the end of the
diagnosis' reads (collecting a window of scrapes as long as the budget or longer never spends it), and not counting
the fit's own queries either. With ``--prometheus`` the fit's signals are a
second round of queries for each target predicted (``PrometheusSource.fetch_fit``, 14 queries narrowed to its
namespace and pod), so a fleet-wide diagnosis sends its 59 queries and no more for the targets without a
queue.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from kvpilot.advice.advise import NO_REPLAY, QUEUE_VERDICTS, predict_target, unreplayed, withhold
from kvpilot.advice.whatif import Change, ChangeError, parse_change
from kvpilot.diagnose import run as diagnose_run
from kvpilot.diagnose.model import Diagnosis, Report, Severity
from kvpilot.diagnose.run import Options
from kvpilot.diagnose.sources import SourceError
from kvpilot.text.numbers import count, fig, significant

#: wall-clock seconds the predictions of one run may take, all targets together (``--what-if-budget``)
DEFAULT_BUDGET_SECONDS = 30.0
#: the alert hook's budget: an answer within its 30 s default timeout, with the diagnosis' own reads
HOOK_BUDGET_SECONDS = 10.0

#: the reason a target withheld for the budget gives (advise.withhold's text)
_BUDGET_RAN_OUT = "the what-if budget ran out"

_SEVERITY_ORDER: dict[Severity, int] = {"critical": 0, "warning": 1, "ok": 2, "unknown": 3}


@dataclass(frozen=True)
class AdviceOptions:
    """What to predict.

    Attributes:
        what_ifs: changes asked for (``--what-if``), simulated for every diagnosed target.
        budget_seconds: wall-clock seconds for all predictions of the run; 0 turns them off.
        defaults: also simulate the candidates for each target's binding limit.
        seed: the arrivals' seed (the replay and every what-if draw the same ones).
        hard_deadline: a ``time.monotonic()`` instant no prediction or read of the fit outlives, whatever is left
            of the budget (the alert hook's answer is due then); None: the budget alone bounds them.
    """

    what_ifs: tuple[Change, ...] = ()
    budget_seconds: float = DEFAULT_BUDGET_SECONDS
    defaults: bool = True
    seed: int = 0
    hard_deadline: float | None = None


def advice_from_flags(what_if: tuple[str, ...], no_what_if: bool, budget_seconds: float) -> AdviceOptions:
    """What to predict from ``--what-if`` (each ``KEY=VALUE[,KEY=VALUE...]``), ``--no-what-if`` and
    ``--what-if-budget``: no predictions at all with ``--no-what-if``.

    Raises:
        ChangeError: a what-if that cannot be applied, or what-ifs given with ``--no-what-if``.
    """
    changes = tuple(parse_change(text) for text in what_if)
    if no_what_if and changes:
        raise ChangeError("--no-what-if and --what-if: give one of them")
    return AdviceOptions(what_ifs=changes, budget_seconds=0.0 if no_what_if else budget_seconds)


def wanted(diag: Diagnosis, advice: AdviceOptions) -> bool:
    """Whether ``diag`` gets predictions: a queue verdict, or any replayable one when what-ifs were asked for."""
    if diag.basis is None or diag.verdict in NO_REPLAY:
        return False
    return diag.verdict in QUEUE_VERDICTS or bool(advice.what_ifs)


def diagnose_and_predict(opts: Options, advice: AdviceOptions | None = None) -> Report:
    """:func:`kvpilot.diagnose.run.run`, then the predictions of the module docstring.

    Raises:
        SourceError: as :func:`kvpilot.diagnose.run.run` (the diagnosis' own source cannot be read); a failing
            second round only leaves its target unpredicted, with a note.
    """
    advice = advice or AdviceOptions()
    if advice.budget_seconds <= 0 or opts.quick:
        report = diagnose_run.run(opts)
        why = "predictions turned off (--no-what-if)"
        if opts.quick and advice.budget_seconds > 0:  # two scrapes seconds apart: no window to fit a workload to
            report.notes.append("--quick: no predictions (a replay needs a window of scrapes, not two).")
            why = "--quick reads no window to replay"
        for diag in report.targets:
            unreplayed(diag, why)
        return report
    report = diagnose_run.run(dataclasses.replace(opts, fit_signals=True))
    targets = sorted((d for d in report.targets if wanted(d, advice)), key=lambda d: _SEVERITY_ORDER[d.severity])
    if advice.what_ifs:
        report.notes.extend(_not_replayable(report.targets))
    if targets:
        done, spent = _predict_all(opts, advice, targets, report.notes)
        note = f"Replayed and predicted {count(done)} of {count(len(targets))} targets with a queue or a --what-if"
        note += f" in {fig(spent, 1)} s of prediction"
        out_of_budget = sum(d.replay is not None and _BUDGET_RAN_OUT in " ".join(d.replay.misses) for d in targets)
        if out_of_budget:  # a target withheld for another reason (its fit failed) says its own reason
            note += f": the what-if budget of {significant(advice.budget_seconds, 2, 's')} ran out (--what-if-budget)"
        elif done < len(targets):
            note += "; the others could not be replayed (each target says why)"
        report.notes.append(note + ".")
    return report


class _Budget:
    """The what-if budget's clock: seconds of prediction, from now; time spent reading is given back."""

    def __init__(self, seconds: float, hard_deadline: float | None) -> None:
        self.started = time.monotonic()  # the window's scrapes are the diagnosis' reads, before this
        self.hard_deadline = hard_deadline
        self.deadline = self._capped(self.started + seconds)

    def _capped(self, deadline: float) -> float:
        return deadline if self.hard_deadline is None else min(deadline, self.hard_deadline)

    def give_back(self, seconds: float) -> None:
        """``seconds`` were spent reading, not predicting."""
        self.started += seconds
        self.deadline = self._capped(self.deadline + seconds)

    def spent(self) -> float:
        return time.monotonic() - self.started


def _predict_all(opts: Options, advice: AdviceOptions, targets: list[Diagnosis], notes: list[str]) -> tuple[int, float]:
    """:func:`predict_target` for ``targets`` in order within the budget: (targets replayed, seconds of prediction)."""
    budget = _Budget(advice.budget_seconds, advice.hard_deadline)
    done = 0
    for i, diag in enumerate(targets, 1):
        if opts.progress is not None:
            opts.progress(f"replaying the window in the engine model: target {i} of {len(targets)}")
        if time.monotonic() >= budget.deadline:
            withhold(diag, advice.what_ifs, "not replayed: the what-if budget ran out (--what-if-budget)")
            continue
        if opts.prometheus:
            reading = time.monotonic()
            fetched = _fetch_fit(opts, diag, advice.hard_deadline, notes)
            budget.give_back(time.monotonic() - reading)
            if not fetched:
                continue
        predict_target(
            diag,
            what_ifs=advice.what_ifs,
            defaults=advice.defaults,
            deadline=budget.deadline,
            seed=advice.seed,
            model_config=opts.model_config,
        )
        done += diag.replay is not None and diag.replay.predicted is not None  # replayed (one not fitted says why)
    return done, budget.spent()


def _not_replayable(targets: list[Diagnosis]) -> list[str]:
    """Notes for the targets ``--what-if`` cannot be answered for (nothing ran, or nothing was read, in the
    window: no workload to replay), so a change asked for never vanishes without a word.
    """
    from kvpilot.diagnose.report import target_name

    return [
        f"--what-if not simulated for {target_name(d)}: {d.verdict}, no traffic in the window to replay."
        for d in targets
        if d.basis is None or d.verdict in NO_REPLAY
    ]


def _fetch_fit(opts: Options, diag: Diagnosis, deadline: float | None, notes: list[str]) -> bool:
    """The fit's signals of one target from Prometheus (its namespace and pod), into its ``Signals``."""
    from kvpilot.diagnose.sources.prometheus import PrometheusSource, Selectors

    basis = diag.basis
    if basis is None:
        return False
    key, signals = basis.key, basis.signals
    selectors = Selectors(namespace=key.namespace, pod=key.pod, model_name=key.model_name)
    if not key.pod:
        selectors = Selectors(namespace=opts.namespace or key.namespace, model_name=key.model_name)
    try:
        source = PrometheusSource(
            opts.prometheus, timeout=opts.timeout, run_deadline=deadline, authorization=opts.prometheus_authorization
        )
        rows = source.fetch_fit(signals.window_seconds, signals.end, selectors).get(key)
    except SourceError as exc:
        notes.append(f"No predictions for {key.pod or key.instance or key.job}: {exc}")
        return False
    if rows is not None:
        signals.fit.update(rows.values)
        signals.fit_buckets.update(rows.buckets)
        signals.fit_series.update(rows.series)
    return True


def predict_for_alert(opts: Options) -> Report:
    """The alert hook's diagnosis: :func:`diagnose_and_predict` within :data:`HOOK_BUDGET_SECONDS`, and never past
    the hook's own deadline (``opts.deadline``, seconds from now: no work outlives its answer).
    """
    budget = HOOK_BUDGET_SECONDS if opts.deadline is None else min(HOOK_BUDGET_SECONDS, opts.deadline)
    due = None if opts.deadline is None else time.monotonic() + opts.deadline
    return diagnose_and_predict(opts, AdviceOptions(budget_seconds=budget, hard_deadline=due))
