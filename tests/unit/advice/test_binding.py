"""One meaning of "binding": the replay is held to the limit the diagnosis of the same window found binding.

The case that had every prediction withheld: ``max_num_seqs`` 48 reached with KV near full and a few preemptions
(vLLM's scheduler refused on ``max_num_seqs`` 99 % of steps). The verdict is ``max_num_seqs_cap``, the replay's
binding limit ``max_num_seqs``; a second reading of the gauges (any preemption: ``kv_cache``) used to say
``kv_cache`` and withhold the replay for a disagreement of kvpilot with itself.
"""

from __future__ import annotations

import dataclasses

from kvpilot.advice.observe import observed_binding, observed_prediction
from kvpilot.advice.prediction import compare
from kvpilot.diagnose.signals import Signals

#: the window: 48 running at the cap of 48, 20 waiting, KV at 99 % (its admission ceiling 95 %), 4 preemptions
PINNED_AND_FULL = {
    "waiting_avg": 20.0,
    "running_avg": 48.0,
    "preemptions_increase": 4.0,
    "tokens_per_step_avg": 60.0,
    "kv_usage_max": 0.99,
    "requests_finished_per_s": 3.0,
    "requests_finished_increase": 900.0,
    "waiting_trend_per_s": 0.0,
}


def _window() -> Signals:
    return Signals(values=dict(PINNED_AND_FULL), window_seconds=300.0)


def test_a_verdict_naming_a_limit_is_the_windows_binding_limit():
    assert observed_binding(_window(), 48, 8192, 0.95, "max_num_seqs_cap") == "max_num_seqs"
    assert observed_binding(_window(), 48, 8192, 0.95, "kv_cache_exhaustion") == "kv_cache"
    assert observed_binding(_window(), 48, 8192, 0.95, "token_budget_cap") == "token_budget"
    # a queue no rule explains: the gauges in vLLM's order decide (a preemption: kv_cache)
    assert observed_binding(_window(), 48, 8192, 0.95, "unexplained_queue") == "kv_cache"
    # no standing queue: none, whatever the verdict
    quiet = Signals(values=PINNED_AND_FULL | {"waiting_avg": 0.4}, window_seconds=300.0)
    assert observed_binding(quiet, 48, 8192, 0.95, "max_num_seqs_cap") == "none"


def test_a_replay_binding_where_the_verdict_does_is_not_withheld():
    window = _window()
    observed = observed_prediction(window, observed_binding(window, 48, 8192, 0.95, "max_num_seqs_cap"))
    replay = dataclasses.replace(observed, binding_limit="max_num_seqs")
    assert compare(replay, observed) == []
    # and one that binds elsewhere is a miss on the binding limit
    elsewhere = dataclasses.replace(observed, binding_limit="kv_cache")
    assert [m.key for m in compare(elsewhere, observed)] == ["binding_limit"]
