"""The what-if budget counts prediction time only: reading the window (the diagnosis' scrapes, the fit's queries)
never spends it, and the predictions themselves stop when it is spent.
"""

from __future__ import annotations

import pytest

import kvpilot.advice.run as advice_run
import kvpilot.diagnose.run as diagnose_run
from kvpilot.advice.run import diagnose_and_predict
from kvpilot.diagnose.model import Diagnosis, DiagnosisBasis, Prediction, Replay, Report


class Clock:
    """A monotonic clock the test moves: each read returns the current instant."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def _queue_target() -> Diagnosis:
    return Diagnosis("max_num_seqs_cap", "critical", 0.9, basis=DiagnosisBasis(None, None, None))


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(advice_run.time, "monotonic", fake.monotonic)
    return fake


def _diagnosis_taking(clock: Clock, seconds: float, targets: int):
    def run(_opts):
        clock.now += seconds  # a window of scrapes read live: the reads take the window's length
        return Report("metrics-url http://127.0.0.1:8000/metrics", seconds, [_queue_target() for _ in range(targets)])

    return run


def test_a_window_longer_than_the_budget_leaves_the_whole_budget_to_the_predictions(monkeypatch, clock):
    monkeypatch.setattr(diagnose_run, "run", _diagnosis_taking(clock, 60.0, 1))
    left: list[float] = []

    def predict(diag, *, deadline, **_):
        left.append(deadline - clock.now)
        diag.replay = Replay(Prediction(), Prediction(), matches=True)

    monkeypatch.setattr(advice_run, "predict_target", predict)
    report = diagnose_and_predict(diagnose_run.Options(metrics_url="http://127.0.0.1:8000/metrics"))
    # 60 s of scrapes against a 30 s budget: the prediction still gets all 30 s
    assert left == [30.0]
    assert report.notes[-1] == (
        "Replayed and predicted 1 of 1 targets with a queue or a --what-if in 0 s of prediction."
    )


def test_predictions_past_the_budget_are_withheld(monkeypatch, clock):
    monkeypatch.setattr(diagnose_run, "run", _diagnosis_taking(clock, 60.0, 2))
    calls: list[float] = []

    def predict(diag, *, deadline, **_):
        calls.append(deadline)
        clock.now += 31.0  # the first target's replay and what-ifs spend more than the 30 s budget
        diag.replay = Replay(Prediction(), Prediction(), matches=True)

    monkeypatch.setattr(advice_run, "predict_target", predict)
    report = diagnose_and_predict(diagnose_run.Options(metrics_url="http://127.0.0.1:8000/metrics"))
    assert len(calls) == 1
    second = report.targets[1]
    assert second.replay is not None
    assert second.replay.misses == ("not replayed: the what-if budget ran out (--what-if-budget)",)
    assert report.notes[-1].startswith("Replayed and predicted 1 of 2 targets")
    assert "the what-if budget of 30 s ran out" in report.notes[-1]


def test_the_fits_own_queries_do_not_spend_the_budget(monkeypatch, clock):
    monkeypatch.setattr(diagnose_run, "run", _diagnosis_taking(clock, 5.0, 2))

    def fetch(*_):
        clock.now += 20.0  # a slow Prometheus: the fit's second round takes 20 s per target
        return True

    left: list[float] = []

    def predict(diag, *, deadline, **_):
        left.append(deadline - clock.now)
        clock.now += 4.0
        diag.replay = Replay(Prediction(), Prediction(), matches=True)

    monkeypatch.setattr(advice_run, "_fetch_fit", fetch)
    monkeypatch.setattr(advice_run, "predict_target", predict)
    diagnose_and_predict(diagnose_run.Options(prometheus="http://127.0.0.1:9090"))
    # 2 x 20 s of queries, more than the budget: each target's predictions still find it unspent but for the
    # 4 s of prediction before them
    assert left == [30.0, 26.0]


def test_the_alert_hooks_deadline_bounds_predictions_and_reads(monkeypatch, clock):
    monkeypatch.setattr(diagnose_run, "run", _diagnosis_taking(clock, 25.0, 1))
    seen: list[float] = []

    def predict(diag, *, deadline, **_):
        seen.append(deadline - clock.now)
        diag.replay = Replay(Prediction(), Prediction(), matches=True)

    monkeypatch.setattr(advice_run, "predict_target", predict)
    advice_run.predict_for_alert(diagnose_run.Options(metrics_url="http://127.0.0.1:8000/metrics", deadline=28.0))
    # the hook's answer is due 28 s after the call: 25 s of reads leave 3 s, less than its 10 s budget
    assert seen == [3.0]


def test_a_fit_failing_on_a_negative_histogram_says_so_not_that_the_budget_ran_out(tmp_path):
    """vllm:request_prompt_tokens with negative buckets and a negative _sum (its mean below 0) and no
    vllm:prompt_tokens counter: no prompt length to fit. The target names the histogram, and the run's note does not
    blame the what-if budget (it once said "the what-if budget of 30 s ran out" for any target not replayed).
    """
    import json
    import re
    from pathlib import Path

    from click.testing import CliRunner

    from kvpilot.cli import cli

    text = (Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "scenario_kv-exhaustion.om").read_text()

    def negative(m: re.Match[str]) -> str:
        return f"{m.group(1)} {-abs(float(m.group(2))) - 1!r} "

    text = re.sub(r"^(vllm:request_prompt_tokens_(?:bucket|sum)(?:\{[^}]*\})?) (\S+) ", negative, text, flags=re.M)
    text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("vllm:prompt_tokens_total"))
    path = tmp_path / "negative.om"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["diagnose", "--no-kube", "--recording", str(path), "-o", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    doc = json.loads(result.stdout)
    (target,) = doc["targets"]
    (miss,) = target["replay"]["misses"]
    assert miss.startswith("not replayed: no prompt length in the window (vllm:request_prompt_tokens")
    (note,) = [n for n in doc["notes"] if n.startswith("Replayed and predicted")]
    assert "budget" not in note
    assert "0 of 1 targets" in note
    assert "each target says why" in note
