"""max_num_active_seqs (vLLM 0.31+): an admission cap below max_num_seqs that no metric shows.

vLLM 0.31 added ``SchedulerConfig.max_num_active_seqs`` ("Maximum number of requests the scheduler admits into
RUNNING", at most max_num_seqs; vllm/config/scheduler.py, Scheduler.max_num_active_reqs). With --max-num-seqs 64 and
--max-num-active-seqs 16 running plateaus at 16 under the configured 64 while requests wait: raising --max-num-seqs
changes nothing.
"""

from __future__ import annotations

from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.rules import diagnose_target
from tests.unit.diagnose.test_rules import make

#: running at 16 (15.8 on average: a batch pinned there), 40 waiting and growing by 30 over the window, KV at 12 %,
#: decode-only steps of 16 tokens (one per running request): the budget refused none
PLATEAU = dict(
    running_avg=15.8,
    running_max=16,
    waiting_avg=40,
    waiting_max=60,
    waiting_trend_per_s=0.1,
    kv_usage_avg=0.1,
    kv_usage_max=0.12,
    iteration_tokens_sum_increase=16_000.0,
    iteration_steps_increase=1000.0,
)
FLAGS = {"max_num_seqs": 64, "max_num_batched_tokens": 8192}


def diag(**cli):
    return diagnose_target(make(**PLATEAU), resolve_limits(cli=cli))


def test_a_plateau_under_the_configured_cap_on_a_release_with_the_active_cap_names_it():
    d = diag(**FLAGS, vllm_version="0.32.0")
    assert d.verdict == "max_num_seqs_cap"
    text = " ".join(d.evidence)
    assert "pinned at max_num_active_seqs" in text
    assert "max_num_active_seqs 16 inferred" in text
    assert "the server runs vLLM 0.32.0 (cli), which has it" in text
    assert "Raising --max-num-seqs changes nothing" in text
    # inferred: 0.6; never --max-num-seqs
    assert d.confidence == 0.6
    assert [r.flag for r in d.recommendations] == ["--max-num-active-seqs"]
    assert d.recommendations[0].current == 16
    assert 16 < d.recommendations[0].suggested <= 64


def test_the_release_not_stated_names_it_as_what_to_check():
    # a plateau under a read cap is as much what causes outside the limits give (deferred requests, chunked
    # prefill off): not named as the cap without the release, but said, and never --max-num-seqs
    d = diag(**FLAGS)
    assert d.verdict == "unexplained_queue"
    assert "on vLLM 0.31 or later a max_num_active_seqs of 16" in " ".join(d.evidence)
    assert "--max-num-seqs" not in [r.flag for r in d.recommendations]
    # stated before 0.31: not said
    assert "max_num_active_seqs" not in " ".join(diag(**FLAGS, vllm_version="0.30.0").evidence)


def test_a_release_before_0_31_has_no_such_cap():
    # 16 of 64 = 25 %: three quarters of the slots free, so not max_num_seqs either
    d = diag(**FLAGS, vllm_version="0.29.0")
    assert d.verdict == "unexplained_queue"
    assert "max_num_active_seqs" not in " ".join(d.evidence)


def test_the_active_cap_given_is_read():
    d = diag(**FLAGS, max_num_active_seqs=16)
    assert (d.verdict, d.confidence) == ("max_num_seqs_cap", 0.9)
    assert "max_num_active_seqs 16 (cli)" in " ".join(d.evidence)
    assert [r.flag for r in d.recommendations] == ["--max-num-active-seqs"]
    # an active cap at or above max_num_seqs is no cap of its own: 16 of 64 -> not pinned
    assert diag(**FLAGS, max_num_active_seqs=64).verdict == "unexplained_queue"


def test_with_nothing_read_the_inferred_cap_says_it_may_be_the_active_one():
    d = diag()
    assert d.verdict == "max_num_seqs_cap"
    assert d.signals["inferred_max_num_seqs"] == 16
    assert "check the server's --max-num-active-seqs before raising --max-num-seqs" in " ".join(d.evidence)
    # the release stated: the caveat goes
    d = diag(vllm_version="0.29.0")
    assert "--max-num-active-seqs" not in " ".join(d.evidence)
