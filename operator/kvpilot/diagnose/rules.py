"""The rules: which admission limit binds, one function per verdict, on facts derived once (docs/diagnosis.md).

:func:`kvpilot.diagnose.facts.derive_facts` turns signals and limits into :class:`Facts` once;
each rule below reads them and returns a :class:`Finding` or ``None``. vLLM's admission logic is
the arbiter (facts module docstring): a request waits only when the token budget, ``max_num_seqs``,
a deferral (LoRA slots, a grammar, a KV transfer) or the KV cache refused it, checked in that order
(:data:`kvpilot.diagnose.facts.ADMISSION_ORDER`), so the rules run in that order and the first limit
that measures as binding is the verdict, with the next one (the runner-up) in its evidence; compute
speed alone never makes a request wait. Every queue verdict needs a queue that costs time
(:attr:`Facts.queue`: standing or growing, requests waiting at least a step time on average).

Order (first match is the primary verdict):

1. ``no_data`` - no running/waiting gauge for the target in the window;
2. ``target_down`` - the series stopped before the window's end;
3. ``kv_cache_exhaustion`` - preemptions: running requests found no free block, and a step that
   preempts admits nobody (before any admission check), unless a cap held the queue in every other step
   (running pinned below the KV ceiling, or a deferred request at the head on full LoRA slots);
4. ``token_budget_cap`` - steps full at a budget below 8192 with a queue (or at any budget when the
   measured step time stays flat as tokens per step grow): the first admission check;
5. ``compute_bound`` - steps full at a budget of 8192 or more with a queue, or at any budget when the
   measured step time grows in proportion to tokens per step (kvpilot.diagnose.steptime): raising the
   budget only lengthens the steps;
6. ``max_num_seqs_cap`` - running pinned at ``max_num_seqs`` (known, or inferred from a flat running
   gauge) with a queue: the second check, before any KV is allocated;
7. ``lora_slot_cap`` - requests deferred while more LoRA adapters have requests than ``max_loras``
   batch slots: the third check;
8. ``kv_cache_exhaustion`` - a queue with KV at its admission ceiling, or requests waiting for
   capacity while sequence slots are free: the last check;
9. a nearly pinned ``max_num_seqs`` or nearly full budget (:func:`rule_near_limit`): past the midpoint of its
   grey zone (:data:`kvpilot.diagnose.facts.GRADED_LOW`), that limit with its confidence scaled by its
   closeness, naming ``unexplained_queue`` as the other reading: no cliff between two causes;
10. ``unexplained_queue`` - a queue no admission limit measures as binding: something outside them holds
   it (deferred requests, a grammar compile, a remote KV transfer, chunked prefill off, a scheduling
   policy), listed with the metrics that tell them apart;
11. ``prefix_cache_ineffective`` - a low hit rate with a reason to expect hits;
12. ``no_data`` - one of the two gauges missing;
13. ``idle`` (the gauges at 0 and no work counter rising) / ``healthy``.

Beside any of them (after ``target_down``): the cache-turnover evidence (:mod:`kvpilot.diagnose.turnover`).

Secondary findings: ``prefix_cache_ineffective`` beside another verdict, and ``metrics_schema_mismatch``
when only legacy names exist (escaped ones are one report note, :func:`escaped_names_note`).

Severities come from the one policy, :mod:`kvpilot.diagnose.severity`. Confidences are ranks, not
calibrated probabilities: a verdict read off the limit's own gauge at a limit that was read ranks above one
whose limit was vLLM's default assumed or inferred from the gauges, and each missing input lowers it by
:data:`PENALTY`.

Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import NamedTuple

from kvpilot.diagnose.facts import (
    ADMISSION_ORDER,
    BUDGET_FULL_FILL,
    GRADED_LOW,
    GRADED_MID,
    LARGE_BUDGET,
    PINNED_SLACK,
    PREFILL_SPLIT_STEPS,
    Facts,
    budget_binds,
    derive_facts,
    fits_a_cap_at,
    known_knee,
)
from kvpilot.diagnose.limits import Limits
from kvpilot.diagnose.model import Diagnosis, Finding, detail
from kvpilot.diagnose.recommend import Inputs, active_seqs_cap, kv_bytes_per_token, recommend
from kvpilot.diagnose.severity import FIXED, OK, kv_severity, queue_severity
from kvpilot.diagnose.signals import SignalName, Signals, legacy_or_escaped
from kvpilot.diagnose.steptime import STEP_TIME_FLAT, STEP_TIME_GROWS
from kvpilot.diagnose.turnover import cache_turnover, turnover_evidence
from kvpilot.kv.spec import ModelConfig
from kvpilot.text.numbers import count, fig, number, percent, significant, times
from kvpilot.vllm.defaults import DEFAULT_BLOCK_SIZE

#: a prefix hit rate below this means most queried prompt tokens were recomputed; the prefix rule
#: fires only with a reason to expect hits (see _prefix_finding).
LOW_HIT_RATE = 0.5

#: With only circumstantial evidence of LRU thrash (the cache turned over in the window, no external
#: cache or block-granularity reason), the hit rate must be below this. A busy server turns its cache
#: over on any long window, and a hot shared prefix (system prompt) then still hits at the share of
#: prompt tokens it covers, often 30-60 %; thrash instead drives hits towards 0. Half of
#: :data:`LOW_HIT_RATE` keeps the thrash cases (0-15 %) and leaves shared-prefix traffic alone.
LRU_THRASH_HIT_RATE = LOW_HIT_RATE / 2

#: a prefix seen reused (``prefix_reused_tokens``) by fewer than this share of the requests, with most prompt tokens
#: missing the cache and the cache turned over, is one most requests did not find: vLLM's ground truth calls a
#: cache ineffective when fewer than half the requests that re-use a shared prefix find it
REUSED_BY_MOST = 0.5

#: Hits of at most this many blocks per request are incidental: a chat template or BOS that every prompt begins
#: with is found by every request and is a block or two long, and random-token traffic (nothing repeated) hits
#: exactly that (0-5 % of 256-token prompts on a real vLLM 0.32 server). Such hits are no evidence that anything
#: longer was there to share, so on the counters alone they make no prefix finding.
INCIDENTAL_BLOCKS = 2

#: the external (connector) cache supplying at least this share of the tokens asked of it is the prompts' source
#: (prefill/decode disaggregation: every prompt's KV arrives from a prefill server), not an offload cache of
#: evicted blocks, which first-time prompts miss
REMOTE_PREFILL_SHARE = 0.99

#: a target is down when its last sample is older than this many of its own average sample intervals:
#: one late scrape (a slow answer) or two is jitter, three missed in a row is a target that stopped
TARGET_DOWN_INTERVALS = 3.0

#: what a missing input, a limit inferred from the gauges or a limit assumed at vLLM's default takes off a
#: confidence (each)
PENALTY = 0.2
#: no running/waiting sample at all: nothing to be unsure about
CONF_NO_DATA = 1.0
#: one of the two gauges missing: a queue cannot be ruled out
CONF_PARTIAL_DATA = 0.9
#: the series stopped, measured against the target's own reporting rate
CONF_TARGET_DOWN = 0.9
#: preemptions with KV at its admission ceiling: vLLM preempts only when no block is free
CONF_KV_PREEMPTED = 0.95
#: a step that preempts admits nobody: with preemptions in fewer than this share of the window's full steps, the
#: budget refused the head in most of them (:func:`_budget_over_preemptions`)
PREEMPTING_STEPS_MAX = 0.5
#: the confidence kept where a pinned cap and the KV cache at its ceiling with preemptions took turns refusing the
#: head (:func:`~kvpilot.diagnose.facts.full_at_cap` decides which held it most): both are named, neither for certain
TWO_READINGS = 0.75
#: a queue at the KV ceiling, or preemptions without the gauge at the ceiling (a short burst)
CONF_KV = 0.85
#: running pinned at a max_num_seqs that was read (command line, spec, pod, metric)
CONF_SEQS_READ = 0.9
#: pinned at vLLM's default max_num_seqs (assumed: the server may run another)
CONF_SEQS_DEFAULT = 0.7
#: max_num_seqs inferred from running flat at an integer
CONF_SEQS_INFERRED = 0.6
#: steps full at the budget: the budget's size (or the step-time test) decides cap or compute
CONF_BUDGET = 0.8
#: deferred requests with more adapters in flight than max_loras: vLLM's own two gauges
CONF_LORA = 0.8
#: a queue no limit measures as binding, every limit read; lower (by PENALTY) for each assumed
CONF_UNEXPLAINED = 0.7
#: a low prefix hit rate with a reason to expect hits
CONF_PREFIX = 0.7
#: the low-severity prefix finding (near-zero hits over many turnovers: may be traffic with nothing to share)
CONF_PREFIX_LOW = 0.5
#: nothing binds, the KV gauge exists (less PENALTY without it)
CONF_HEALTHY = 0.8
#: nothing ran or waited
CONF_IDLE = 0.9
#: a family found only under a legacy or escaped name: read off the names themselves
CONF_SCHEMA = 0.95

_APPROACH = (
    "vLLM admits a waiting request only when the step's token budget has room, fewer than max_num_seqs "
    "run, it is not deferred and its whole prompt's KV blocks fit, checked in that order"
)

#: admission limit -> what names it in evidence
_LIMIT_NAMES = {
    "token_budget": "the token budget (max_num_batched_tokens)",
    "max_num_seqs": "max_num_seqs",
    "lora": "the LoRA slots (max_loras)",
    "kv_cache": "the KV cache",
}


def _queue_rule_confidence(f: Facts, base: float) -> float:
    """``base`` less :data:`PENALTY` without a KV gauge, for an inferred limit, and when the budget is vLLM's
    default assumed (its size decides between token_budget_cap and compute_bound).
    """
    return round(
        base
        - (0.0 if f.kv_known else PENALTY)
        - (PENALTY if f.inferred else 0.0)
        - (PENALTY if f.budget_how == "default" else 0.0),
        2,
    )


def _limit_state(f: Facts, limit: str) -> tuple[bool, float | None, str | None]:
    """One admission limit: (measures as binding, how close to binding 0-1+, a clause with the numbers)."""
    if limit == "token_budget":
        if f.fill is None:
            return f.full, None, None
        return (
            f.full,
            f.fill,
            f"steps averaged {number(f.tokens_per_step)} tokens of the {count(f.budget)}-token budget "
            f"({f.budget_how}) = {percent(f.fill)}",
        )
    if limit == "max_num_seqs":
        if not f.n_seqs or f.run_avg is None:
            return False, None, None
        return (
            f.pinned,
            f.run_avg / f.n_seqs,
            f"running {fig(f.run_avg, 1)} of max_num_seqs {count(f.n_seqs)} ({f.n_seqs_how}) = "
            f"{percent(f.run_avg / f.n_seqs)}",
        )
    if limit == "lora":
        if not f.lora_max or f.lora_adapters is None:
            return False, None, None
        return (
            f.lora_blocked,
            f.lora_adapters / f.lora_max,
            f"up to {count(f.lora_adapters)} of max_loras {count(f.lora_max)} LoRA slots held an adapter with "
            "scheduled requests (vllm:lora_requests_info)",
        )
    if f.kv_max is None or not f.ceiling:
        return False, None, None
    return (
        f.at_ceiling or f.capacity_blocked,
        f.kv_max / f.ceiling,
        f"KV usage peaked at {percent(f.kv_max)} of an admission ceiling of {percent(f.ceiling)} = "
        f"{percent(f.kv_max / f.ceiling)}",
    )


def _runner_up(f: Facts, primary: str) -> str | None:
    """The limit after ``primary`` in vLLM's admission order that binds next, in one sentence, or None.

    A later limit that also measures as binding is named as what raising ``primary`` runs into; otherwise
    the one nearest to binding (the largest ratio) of those that can be measured.
    """
    later = ADMISSION_ORDER[ADMISSION_ORDER.index(primary) + 1 :]
    states = [(limit, *_limit_state(f, limit)) for limit in later]
    binding = [(limit, text) for limit, binds, _, text in states if binds and text]
    if binding:
        limit, text = binding[0]
        return (
            f"Runner-up: {_LIMIT_NAMES[limit]} binds too ({text}); vLLM checks it after "
            f"{_LIMIT_NAMES[primary]}, so raising {_LIMIT_NAMES[primary]} hands the queue to it."
        )
    measured = [(ratio, limit, text) for limit, _, ratio, text in states if ratio is not None and text]
    if not measured:
        return None
    _, limit, text = max(measured, key=lambda m: m[0])
    return f"Runner-up: {_LIMIT_NAMES[limit]}, the next nearest to binding ({text})."


def rule_no_data(f: Facts) -> Finding | None:
    """``no_data``: neither ``vllm:num_requests_running`` nor ``_waiting`` in the window."""
    if f.run_avg is not None or f.wait_avg is not None:
        return None
    return Finding(
        "no_data",
        "unknown",
        CONF_NO_DATA,
        [
            f"No vllm:num_requests_running or vllm:num_requests_waiting sample (any spelling) in the last "
            f"{fig(f.window)} s; nothing to diagnose."
        ],
    )


def rule_target_down(f: Facts) -> Finding | None:
    """``target_down``: the last sample is older than :data:`TARGET_DOWN_INTERVALS` average sample intervals
    (or missing).
    """
    samples, age = f.s("samples_in_window"), f.s("last_sample_age_s")
    if not samples:
        return None
    interval = f.window / samples
    if age is not None and age <= TARGET_DOWN_INTERVALS * interval:
        return None
    last = (
        "no sample at the window's end (series marked stale or older than 5 m)"
        if age is None
        else f"the last sample is {fig(age, 1)} s old"
    )
    return Finding(
        "target_down",
        FIXED["target_down"],
        CONF_TARGET_DOWN,
        [
            f"The target's series stopped: {last}, while it reported every {fig(interval, 1)} s on average "
            f"({fig(samples)} samples in {fig(f.window)} s); a live target is at most "
            f"{fig(TARGET_DOWN_INTERVALS)} intervals behind."
        ],
    )


def _kv_finding(f: Facts) -> Finding:
    """``kv_cache_exhaustion`` with its evidence (preemptions, the ceiling, the queue)."""
    ev = []
    if f.preempt >= 1:
        total = f.s("preemptions_last")
        ev.append(
            f"{number(f.preempt)} preemptions in the window ({fig(f.s('preemptions_per_s'))}/s"
            + (f"; vllm:num_preemptions_total reached {fig(total)}" if total is not None else "")
            + "): running requests needed KV blocks and none were free, so vLLM freed and will "
            "recompute them, and admitted nobody in those steps (Scheduler.schedule, "
            "vllm/v1/core/sched/scheduler.py)."
        )
    if f.kv_max is not None:
        ev.append(f"KV cache usage peaked at {percent(f.kv_max)} (average {percent(f.kv_avg)}); {f.ceiling_how}.")
    if f.capacity_blocked:
        ev.append(
            f"{fig(f.s('waiting_capacity_avg'), 1)} requests on average waited for KV capacity "
            f'(vllm:num_requests_waiting_by_reason{{reason="capacity"}}) while only {fig(f.run_avg, 1)} of '
            f"{fig(f.n_seqs)} sequence slots were used: the KV admission ceiling binds below 1.0."
        )
    if f.queued:
        ev.append(f"{f.evidence_queue}; {_APPROACH}: here the KV cache refused them.")
    both = f.pinned and f.preempt >= 1 and f.at_ceiling
    if both:
        ev.append(
            f"Running requests also sat at max_num_seqs ({fig(f.run_avg, 1)} of {fig(f.n_seqs)}), but the "
            "KV shortage binds first: raising max_num_seqs would add preemptions."
        )
        if f.full_at_cap is not None:
            ev.append(_turns_evidence(f))
    severity = kv_severity(f.preempt >= 1, f.queue, f.growing)
    conf = CONF_KV_PREEMPTED if f.preempt >= 1 and f.at_ceiling else CONF_KV
    if both and f.full_at_cap is not None:
        conf = round(conf * TWO_READINGS, 2)
    return Finding("kv_cache_exhaustion", severity, conf, ev, recommend("kv_cache_exhaustion", _inputs(f)))


def rule_kv_preemption(f: Facts) -> Finding | None:
    """``kv_cache_exhaustion``: a preemption in the window with a queue (before any admission check: a step that
    preempts admits nobody). Preemptions while no queue costs time refused nobody for long: vLLM re-queues the
    preempted request at the head and admits it again as blocks free (its ground truth then has no binding limit),
    so they are a secondary finding (:func:`preemption_note`), not the verdict.
    """
    return _kv_finding(f) if f.preempt >= 1 and f.queue and not _cap_over_preemptions(f) else None


def _cap_over_preemptions(f: Facts) -> bool:
    """A cap, not the preemptions, held the queue.

    A step that preempts admits nobody, but it is one step per preemption; in every other step:

    - running pinned at max_num_seqs with KV below its admission ceiling: ``Scheduler.schedule`` stops at
      ``num_running >= max_num_running_reqs`` before it asks the KV cache for blocks, and below the ceiling the
      blocks were there (vLLM 0.29: a cap of 8 with 1-3 preemptions in thousands of steps refused the head on the
      cap in all but those steps);
    - steps full with preemptions in fewer than half of them (:func:`_budget_over_preemptions`): the budget,
      checked before any other limit, refused the head in the full steps that did not preempt;
    - running pinned at max_num_seqs at the ceiling, the list full in at least half of the samples
      (:func:`~kvpilot.diagnose.facts.full_at_cap`): the cap refused the head whenever the list was full, the KV
      cache only in the steps between (vLLM 0.29: a cap of 8 with 33 preemptions, the gauge's median 8, the head
      refused on the cap in 67 % of the queued time).
    - every LoRA slot held and a deferred request at the head (:attr:`Facts.lora_head`): the head is visited first
      and skipped on ``max_loras`` before the KV cache is asked, however full it is (vLLM 0.29: 2-361 preemptions in
      a window whose head was refused on the LoRA slots in 85-100 % of the queued time).
    """
    return (f.pinned and (not f.at_ceiling or f.full_at_cap is True)) or f.lora_head or _budget_over_preemptions(f)


def _preemptions(f: Facts) -> str:
    """``no preemptions``, or how many (the pinned cap held the queue between them: :func:`_cap_over_preemptions`)."""
    if f.preempt < 1:
        return "no preemptions, so no sign of a KV shortage" if not f.kv_known else "no preemptions"
    return f"{number(f.preempt)} preemptions (a KV cache secondary finding below)"


def _turns_evidence(f: Facts) -> str:
    """How the cap and the KV cache took turns at a pinned cap at the ceiling, in one sentence."""
    median = fig(f.s("running_median"))
    if f.full_at_cap:
        return (
            f"The running list sat full at {fig(f.n_seqs)} in most samples (median {median}), and vLLM checks the "
            "cap before it asks the KV cache for blocks: the cap refused the head while the list was full, the KV "
            f"cache ({number(f.preempt)} preemptions) only in the steps between."
        )
    return (
        f"The running list was full at {fig(f.n_seqs)} in fewer than half the samples (median {median}): between "
        "the full steps the KV cache refused the head, so it held the queue most of the time."
    )


def preemption_note(f: Facts) -> Finding | None:
    """Preemptions without a queue that costs time, or beside a pinned cap (:func:`_cap_over_preemptions`):
    ``kv_cache_exhaustion`` as a secondary finding (the preempted requests' prompts are recomputed, but the KV
    cache did not hold the queue).
    """
    if f.preempt < 1 or (f.queue and not _cap_over_preemptions(f)):
        return None
    finding = _kv_finding(f)
    if not f.queue:
        why = (
            "No queue cost time in the window (a request waited in fewer than half the samples, or for less than "
            "a step on average): the KV cache ran short for running requests, not for admission."
        )
    elif _budget_over_preemptions(f):
        why = (
            f"Steps were full and {number(f.preempt)} of {number(f.s('iteration_steps_increase'))} preempted: vLLM "
            "checks the token budget before any other limit, so every full step that did not preempt refused the "
            "head on the budget, not the KV cache."
        )
    elif f.lora_head:
        why = (
            "A deferred request headed the queue in most samples while every LoRA slot held an adapter: vLLM "
            "visits deferred requests first and skipped the head on max_loras in every step but the preempting "
            "ones, so the LoRA slots held the queue, not the KV cache."
        )
    elif f.at_ceiling:
        why = f"Running sat at max_num_seqs with KV usage at its admission ceiling. {_turns_evidence(f)}"
    else:
        why = (
            "Running sat at max_num_seqs with KV usage below its admission ceiling: vLLM stopped admission on the "
            "running cap in every step but the preempting ones, so the cap held the queue, not the KV cache."
        )
    finding.evidence.append(why)
    return finding


def rule_kv_cache_exhaustion(f: Facts) -> Finding | None:
    """``kv_cache_exhaustion``: a queue with KV at its admission ceiling (the last admission check)."""
    if not (f.queue and (f.at_ceiling or f.capacity_blocked)):
        return None
    return _kv_finding(f)


def _pinned_evidence(f: Facts) -> str:
    """How "pinned" was judged: the counters' requests per step where they decide, else the gauge's expected dip
    below the cap and the slack allowed.
    """
    if f.batch_how == "counters" and f.batch is not None:
        return (
            f"Evidence used: the counters. Steps sampled {number(f.batch, 2)} tokens each on average "
            "(vllm:generation_tokens_total over vllm:iteration_tokens_total_count): every request a step runs past "
            f"its prompt samples one token, so {number(f.batch, 2)} requests ran per step. The running gauge "
            f"(average {fig(f.run_avg, 2)}) is set between steps and read when scraped, so it reads below a pinned "
            "cap by more than the requests finished per step on a busy server; the counters do not."
        )
    if f.dip is None:
        return detail(
            f"Pinned means within {fig(f.slack, 1)} of the cap (requests finished per step unknown: no "
            "vllm:request_success_total or vllm:iteration_tokens_total)."
        )
    return detail(
        f"At a pinned cap vLLM's running gauge reads the cap less the requests that finished in the step before "
        f"each sample ({number(f.dip, 2)} per step here: vllm:request_success_total over "
        f"vllm:iteration_tokens_total_count), so running within {fig(f.slack, 1)} of it (the larger of its mean and "
        "median) is pinned."
    )


def _graded_evidence(limit: str, grade: float, use: float, threshold: float, threshold_text: str) -> str:
    """The graded reading in one sentence: how near the limit measured, and the other reading."""
    mid = GRADED_LOW + GRADED_MID * (threshold - GRADED_LOW)
    return (
        f"Graded reading: {_LIMIT_NAMES[limit]} measured at {percent(use)}, short of the {percent(threshold)} "
        f"({threshold_text}) at which it binds for certain but above the {percent(mid)} midpoint of its grey zone "
        f"({percent(GRADED_LOW)}, half the limit in use, to {percent(threshold)}), so it is named with its "
        f"confidence scaled by {number(grade, 2)}. The other reading, "
        "unexplained_queue: something outside the admission limits held the queue while part of this limit stood "
        "free; it would be the verdict below the midpoint."
    )


def _seqs_finding(f: Facts, grade: float) -> Finding:
    """``max_num_seqs_cap`` with its evidence; ``grade`` < 1: nearly pinned (:func:`rule_near_limit`)."""
    active = f.cap_name == "max_num_active_seqs"
    inferred = "max_num_seqs" in f.inferred or (active and "inferred" in f.n_seqs_how)
    median = f.s("running_median")
    state = "pinned" if grade >= 1 else "nearly pinned"
    ev = [
        f"Running requests {state} at {f.cap_name}: average {fig(f.run_avg)}"
        + (f", median {fig(median)}" if median is not None and f.run_avg is not None and median > f.run_avg else "")
        + f", max {fig(f.run_max)} of {fig(f.n_seqs)} ({f.n_seqs_how}).",
        _pinned_evidence(f),
        f"{f.evidence_queue}; {_APPROACH}: here every slot was taken.",
        (
            f"KV cache has room: usage peaked at {percent(f.kv_max)} ({f.ceiling_how}), no preemptions."
            if f.kv_known and f.kv_room
            else f"KV usage peaked at {percent(f.kv_max)} ({f.ceiling_how}), {_preemptions(f)}."
            if f.kv_known
            else f"KV usage unknown (no KV gauge in any spelling); {_preemptions(f)}."
        ),
    ]
    held = f.preempt >= 1 and f.at_ceiling and f.full_at_cap is not None
    if held:
        ev.append(_turns_evidence(f))
    if grade < 1 and f.batch is not None and f.n_seqs:
        ev.insert(
            2,
            _graded_evidence(
                "max_num_seqs",
                grade,
                f.batch / f.n_seqs,
                (f.n_seqs - f.slack + (f.dip or 0.0)) / f.n_seqs,
                f"{fig(f.n_seqs - f.slack + (f.dip or 0.0), 1)} requests per step",
            ),
        )
    if active:
        ev.insert(1, _active_evidence(f))
    elif inferred and f.has_active_cap is not False:
        ev.append(
            "On vLLM 0.31 or later a max_num_active_seqs of this size (an admission cap below max_num_seqs that no "
            "metric shows) gives the same plateau: check the server's --max-num-active-seqs before raising "
            "--max-num-seqs, which would then change nothing (--vllm-version tells kvpilot the release)."
        )
    runner = _runner_up(f, "max_num_seqs")
    if runner:
        ev.append(runner)
    ev.extend(_kv_headroom_evidence(f.signals, f.limits))
    base = (
        CONF_SEQS_INFERRED
        if inferred
        else CONF_SEQS_READ
        if f.limits.max_num_seqs.source != "default"
        else (CONF_SEQS_DEFAULT)
    )
    recs = (
        active_seqs_cap(_inputs(f), f.n_seqs, f.configured_seqs)
        if active and f.n_seqs is not None and f.configured_seqs is not None
        else recommend("max_num_seqs_cap", _inputs(f), max_num_seqs=f.n_seqs)
    )
    if not recs and held:
        # the KV cache holds no more requests than the cap admits: it has to grow before the cap can
        recs = recommend("kv_cache_exhaustion", _inputs(f))
    if held:
        grade *= TWO_READINGS
    return Finding(
        "max_num_seqs_cap",
        queue_severity(f.growing),
        round((base - (0 if f.kv_known else PENALTY)) * grade, 2),
        ev,
        recs,
    )


def _active_evidence(f: Facts) -> str:
    """Why the cap is max_num_active_seqs, not the configured max_num_seqs."""
    release = f"; the server runs {f.vllm_version}, which has it" if f.vllm_version else ""
    return (
        f"The cap is max_num_active_seqs, not max_num_seqs {count(f.configured_seqs)}: since vLLM 0.31 the scheduler "
        "admits at most max_num_active_seqs requests into RUNNING (Scheduler.max_num_active_reqs, "
        f"vllm/v1/core/sched/scheduler.py) and no metric shows it{release}. Raising --max-num-seqs changes nothing "
        "here."
    )


def rule_max_num_seqs_cap(f: Facts) -> Finding | None:
    """``max_num_seqs_cap``: running pinned at max_num_seqs (known or inferred) with a queue (the second
    admission check, before any KV is allocated; KV is named as the runner-up when it binds too).
    """
    if not (f.pinned and f.queue):
        return None
    return _seqs_finding(f, 1.0)


def rule_lora_slot_cap(f: Facts) -> Finding | None:
    """``lora_slot_cap``: a deferred request at the head of the queue in half the samples or more while every LoRA
    slot (``max_loras``) held an adapter, with a queue: the third admission check (``Scheduler.schedule`` skips a
    waiting request whose adapter would make the step's adapters exceed ``max_loras``). A request deferred now and
    then beside a queue the KV cache refuses (0.14 of 307 waiting on average) is not the head that waits.
    """
    if not (f.queue and f.lora_head):
        return None
    ev = [
        f"{fig(f.deferred, 1)} requests on average were deferred "
        '(vllm:num_requests_waiting_by_reason{reason="deferred"}) while all '
        f"{count(f.lora_max)} LoRA slots (max_loras) held an adapter with scheduled requests, "
        f"{count(f.lora_seen)} adapters over the window (vllm:lora_requests_info): vLLM skips a waiting request "
        "whose adapter cannot join a step that already holds max_loras adapters (Scheduler.schedule, "
        "vllm/v1/core/sched/scheduler.py).",
        f"{f.evidence_queue}; {_APPROACH}: here the adapters' slots refused them.",
    ]
    budget = _limit_state(f, "token_budget")
    seqs = _limit_state(f, "max_num_seqs")
    free = [text for binds, _, text in (budget, seqs) if text and not binds]
    if free:
        ev.append("The checks before it had room: " + "; ".join(free) + ".")
    runner = _runner_up(f, "lora")
    if runner:
        ev.append(runner)
    return Finding(
        "lora_slot_cap",
        queue_severity(f.growing),
        round(CONF_LORA - (0 if f.kv_known else PENALTY), 2),
        ev,
        recommend("lora_slot_cap", _inputs(f)),
    )


def _steps_evidence(f: Facts) -> str:
    parts = []
    if "max_num_batched_tokens" in f.inferred and f.budget_evidence:
        # a budget inferred as the mean step is filled by it by definition: the evidence is what else shows it
        parts.append(f"steps averaged {number(f.tokens_per_step)} tokens and {f.budget_evidence}")
    elif f.fill is not None and f.fill > 1:
        # why a mean can exceed the limit comes before the figure that does
        parts.append(
            f"steps averaged {number(f.tokens_per_step)} tokens, more than the budget schedules: vLLM's "
            "vllm:iteration_tokens_total counts a step's computed prompt tokens plus the tokens it sampled, and a "
            "step that completes a prefill also samples that request's first token, so steps full at the budget "
            f"average a little above it ({percent(f.fill)} of the budget; _sum / _count)"
        )
    elif f.fill is not None:
        parts.append(
            f"steps averaged {number(f.tokens_per_step)} tokens ({percent(f.fill)} of the budget; "
            "vllm:iteration_tokens_total _sum / _count)"
        )
    if f.time_fill is not None and f.fill is not None and f.fill < BUDGET_FULL_FILL <= f.time_fill:
        parts.append(
            f"a step of the whole budget lasts {fig((f.budget or 0) / f.knee, 2)} times a decode step on this GPU "
            f"(past its compute knee of {number(f.knee)} tokens, {f.knee_how}), so steps that spent the budget held "
            f"about {percent(f.time_fill)} of the time"
        )
    if f.share is not None:
        parts.append(
            f"{percent(f.share)} of steps recorded more than {fig(f.share_edge)} tokens (the budget's bucket; "
            "vLLM records a prefill chunk only in the step its prefill completes, so this share understates "
            "full steps under chunked prefill)"
        )
    if f.full_by_elimination:
        parts.append(
            (
                f"steps averaged {number(f.tokens_per_step)} tokens, more than vLLM's default budget, so the budget "
                "is at least that and how full its steps are is not measured"
                if f.tokens_per_step is not None
                else "steps not measured (no vllm:iteration_tokens_total)"
            )
            + ", but with a standing queue, free sequence "
            "slots and KV room the budget is the only admission limit left that can have refused the queue, "
            "so it was used up in every step (inferred by elimination)"
        )
    return "; ".join(parts) if parts else "token-budget use unknown (no vllm:iteration_tokens_total)"


def _prefill_evidence(f: Facts) -> str | None:
    """Mean prefill time per request against the step time: many step times = prompts chunked across steps
    by the budget (vLLM: ``prefill_time = first_token_ts - scheduled_ts``, ``vllm/v1/metrics/stats.py``).
    """
    pre, itl, ratio = f.s("prefill_time_mean_s"), f.s("itl_mean_s"), f.s("prefill_step_times")
    if pre is None:
        return None
    line = (
        f"Prefill took {significant(pre, 3)} s per request on average (vllm:request_prefill_time_seconds "
        "_sum / _count, first scheduling to first token)"
    )
    if ratio is None or itl is None:
        return line + "; the step time is unknown (no vllm:inter_token_latency_seconds)."
    line += f" = {number(ratio, 1)} step times of {significant(itl, 3)} s (mean inter-token latency)"
    prompt, d = f.s("prompt_tokens_per_request"), f.decode_per_step
    expected = (
        f"; a {number(prompt)}-token prompt at {count(f.budget)} - {number(d, 1)} decode tokens per step takes "
        f"ceil({number(prompt)} / {number(f.budget - d, 1)}) = {count(math.ceil(prompt / (f.budget - d)))} steps"
        if prompt and d is not None and f.budget and f.budget > d
        else ""
    )
    if ratio >= PREFILL_SPLIT_STEPS:
        return line + f": prompts are prefilled across several steps (chunked by the budget){expected}."
    return line + f": a prompt is prefilled in about one step, the budget does not split it{expected}."


def _step_fit_evidence(f: Facts) -> str:
    """The step-time test in one sentence: its points, fit and reading, or why there is no data."""
    fit = f.step_fit
    source = (
        "mean seconds per step = vllm:inter_token_latency_seconds _sum / _count, tokens per step = "
        "vllm:iteration_tokens_total _sum / _count, per sub-window"
    )
    if fit.elasticity is None:
        return f"Step time against tokens per step: no data ({fit.reason}; {source})."
    lo, hi = min(n for n, _ in fit.points), max(n for n, _ in fit.points)
    reading = (
        f"step time grows in proportion to tokens per step (E >= {fig(STEP_TIME_GROWS)}): throughput is flat, the "
        "GPU is compute-bound"
        if fit.grows
        else f"step time stays flat as steps carry more tokens (E <= {fig(STEP_TIME_FLAT)}): more tokens per step "
        "cost almost nothing, the budget binds"
        if fit.flat
        else f"between {fig(STEP_TIME_FLAT)} and {fig(STEP_TIME_GROWS)}: not decided by this test"
    )
    return (
        f"Step time against tokens per step over {count(len(fit.points))} sub-windows ({number(lo)} to "
        f"{number(hi)} tokens per step): seconds per step = {significant(fit.intercept_s, 3)} s + "
        f"{significant(fit.slope_s_per_token, 3)} s per token, elasticity E = {number(fit.elasticity, 2)}: "
        f"{reading} ({source})."
    )


def _served_evidence(f: Facts) -> str | None:
    served, offered = f.s("prompt_tokens_per_s"), f.s("offered_prompt_tokens_per_s")
    if served is None:
        return None
    line = f"Served {number(served)} prompt tok/s"
    if offered is not None:
        line += (
            f"; offered about {number(offered)} prompt tok/s (served + {fig(f.trend, 3)} req/s queue growth x "
            f"{number(f.s('prompt_tokens_per_request'))} prompt tokens per request)"
        )
    return line


def _full_steps_budget(f: Facts) -> int | None:
    """The budget when steps are full with a queue and no preemption, or preemptions in fewer than half the steps
    (:func:`_budget_over_preemptions`), else None: the first admission check (``while ... token_budget > 0``)
    refused the queue, whatever the later ones would say.
    """
    return f.budget if f.full and f.queue and (f.preempt < 1 or _budget_over_preemptions(f)) else None


def _budget_over_preemptions(f: Facts) -> bool:
    """Full steps, and preemptions in fewer than half of them: a step that preempts admits nobody, and every other
    full step refused the head on the budget (``while ... token_budget > 0``) before it asked the KV cache for
    blocks (vLLM 0.29, a drawn scenario: 10 preemptions in 435 full steps of a 4,096-token budget, the head refused
    on the budget in 88 % of the queued time).
    """
    steps = f.s("iteration_steps_increase")
    return f.full and f.preempt >= 1 and steps is not None and f.preempt < PREEMPTING_STEPS_MAX * steps


def _budget_graded(f: Facts, grade: float) -> str | None:
    if grade >= 1 or f.fill is None:
        return None
    return _graded_evidence(
        "token_budget", grade, f.fill, BUDGET_FULL_FILL, f"{number(BUDGET_FULL_FILL * (f.budget or 0))} tokens per step"
    )


def rule_token_budget_cap(f: Facts) -> Finding | None:
    """``token_budget_cap``: steps full at a budget below :data:`LARGE_BUDGET` (or a flat step time) with a queue."""
    budget = _full_steps_budget(f)
    if budget is None or not f.budget_cap:
        return None
    return _token_budget_finding(f, budget, 1.0)


def _token_budget_finding(f: Facts, budget: int, grade: float) -> Finding:
    """``token_budget_cap`` with its evidence; ``grade`` < 1: steps nearly full (:func:`rule_near_limit`)."""
    ev = [
        f"max_num_batched_tokens = {count(f.budget)} ({f.budget_how}) fills the steps: {_steps_evidence(f)}.",
        f"{f.evidence_queue}; {_APPROACH}: here the budget was used up in every step.",
        (
            f"A budget of {count(f.budget)} is below vLLM's large-GPU default of {count(LARGE_BUDGET)} "
            "(vLLM's tuning guide recommends more than 8192 for throughput on small models and large GPUs)."
            if budget < LARGE_BUDGET
            else f"A budget of {count(f.budget)} is at or above vLLM's large-GPU default of {count(LARGE_BUDGET)}, "
            "but the measured step time does not grow with the tokens per step (below), so a larger budget "
            "still adds tokens per second."
        ),
        _step_fit_evidence(f),
    ]
    runner = _runner_up(f, "token_budget")
    if runner:
        ev.insert(2, runner)
    graded = _budget_graded(f, grade)
    if graded:
        ev.insert(1, graded)
    prefill = _prefill_evidence(f)
    if prefill:
        ev.append(prefill)
    if budget >= 2 * f.knee:
        ev.append(
            f"Caveat: steps of {count(f.budget)} tokens are past twice this GPU's compute knee of {number(f.knee)} "
            f"tokens per step ({f.knee_how}): the GPU is near its compute limit, so a larger budget also "
            "lengthens each step and TTFT improves less than the step count suggests."
        )
    return Finding(
        "token_budget_cap",
        queue_severity(f.growing),
        round(_queue_rule_confidence(f, CONF_BUDGET) * grade, 2),
        ev,
        recommend("token_budget_cap", _inputs(f), max_num_batched_tokens=f.budget),
    )


def rule_compute_bound(f: Facts) -> Finding | None:
    """``compute_bound``: steps full at a budget of :data:`LARGE_BUDGET` or more (or a step time growing with
    the tokens) with a queue.
    """
    budget = _full_steps_budget(f)
    if budget is None or f.budget_cap:
        return None
    return _compute_bound_finding(f, budget, 1.0)


def _compute_bound_finding(f: Facts, budget: int, grade: float) -> Finding:
    """``compute_bound`` with its evidence; ``grade`` < 1: steps nearly full (:func:`rule_near_limit`)."""
    by_fit = f.step_fit is not None and f.step_fit.grows
    if by_fit:
        below = f", below vLLM's large-GPU default of {count(LARGE_BUDGET)}," if budget < LARGE_BUDGET else ""
        why = (
            f"at {count(f.budget)} tokens{below} the measured step time already grows in proportion to the tokens "
            "per step (below)"
        )
    else:
        why = (
            f"at {count(f.budget)} tokens a step already carries {times(budget / f.knee)} the {number(f.knee)} "
            f"tokens at which compute binds ({f.knee_how})"
            + (f", at or above vLLM's large-GPU default of {count(LARGE_BUDGET)}" if budget >= LARGE_BUDGET else "")
        )
    ev = [
        f"Steps are full at max_num_batched_tokens {count(f.budget)} ({f.budget_how}): {_steps_evidence(f)}.",
        f"{f.evidence_queue}; {_APPROACH}: here the budget was used up in every step, but {why}: a larger "
        "budget makes steps longer, not the engine faster.",
        f"Running {fig(f.run_avg, 1)} on average of max_num_seqs {fig(f.n_seqs)} "
        f"({f.n_seqs_how}); KV usage peaked at {percent(f.kv_max)} ({f.ceiling_how}); no preemptions.",
    ]
    if f.step_rate:
        ev.append(
            f"{fig(f.step_rate, 2)} steps/s with output = {fig(1 / f.step_rate, 3)} s per step at "
            f"{number(f.tokens_per_step)} tokens per step."
        )
    ev.append(_step_fit_evidence(f))
    served = _served_evidence(f)
    if served:
        ev.append(served + ": the engine computes as fast as it can; more budget or slots will not help.")
    graded = _budget_graded(f, grade)
    if graded:
        ev.insert(1, graded)
    return Finding(
        "compute_bound",
        queue_severity(f.growing),
        round(_queue_rule_confidence(f, CONF_BUDGET) * grade, 2),
        ev,
        recommend("compute_bound", _inputs(f)),
    )


def _near_limits(f: Facts) -> list[tuple[float, str]]:
    """The batch limits measured in their grey zone (closeness strictly between 0 and 1) against a value that was
    read or inferred, nearest first; ties in vLLM's admission order.
    """
    # a limit assumed at vLLM's default was not read: its use is measured against a guess, not graded
    near = [
        (close, limit)
        for limit, close, how in (
            ("token_budget", f.budget_close, f.budget_how),
            ("max_num_seqs", f.seqs_close, f.n_seqs_how),
        )
        if close is not None and 0 < close < 1 and how != "default"
    ]
    return sorted(near, key=lambda c: (-c[0], ADMISSION_ORDER.index(c[1])))


def rule_near_limit(f: Facts) -> Finding | None:
    """A queue no limit measures as binding, with a batch limit past the midpoint of its grey zone
    (:data:`kvpilot.diagnose.facts.GRADED_LOW`): that limit, its confidence scaled by its closeness, naming the
    other reading (``unexplained_queue``). After the limits that bind outright (LoRA slots, the KV ceiling).
    """
    if not f.queue or f.preempt >= 1:
        return None
    near = _near_limits(f)
    if not near or near[0][0] < GRADED_MID:
        return None
    grade, limit = near[0]
    if limit == "max_num_seqs":
        return _seqs_finding(f, grade)
    budget = f.budget or 0
    if budget_binds(True, budget, f.step_fit, known_knee(f.limits)):
        return _token_budget_finding(f, budget, grade)
    return _compute_bound_finding(f, budget, grade)


def _unexplained_causes(f: Facts) -> list[str]:
    """What holds a queue outside the three limits, each with the metric or flag that tells it apart."""
    deferred = f.deferred
    out = [
        "Deferred requests: "
        + (
            f'{fig(deferred, 1)} on average were deferred (vllm:num_requests_waiting_by_reason{{reason="deferred"}})'
            if deferred
            else 'none deferred on average (vllm:num_requests_waiting_by_reason{reason="deferred"})'
            if deferred is not None
            else 'vllm:num_requests_waiting_by_reason{reason="deferred"} not exported (vLLM before 0.20)'
        )
        + "; vLLM skips a waiting request whose LoRA adapter cannot join the batch (vllm:lora_requests_info: "
        + (
            f"up to {count(f.lora_adapters)} of {count(f.lora_max)} slots held an adapter"
            if f.lora_max is not None and f.lora_adapters is not None
            else "not exported: no --enable-lora"
        )
        + "), whose structured-output grammar is still compiling, or whose KV is still arriving from a remote "
        "instance (a KV connector: vllm:external_prefix_cache_* and the connector's metrics).",
    ]
    prompt, tps, budget = f.s("prompt_tokens_per_request"), f.tokens_per_step, f.budget
    spans = f.s("prefill_step_times")
    chunk = "Chunked prefill switched off (--no-enable-chunked-prefill): a prompt is admitted only in a step whose "
    chunk += "running requests leave room for all of it, so steps stay short of the budget while prompts wait"
    if prompt is not None and tps is not None and budget:
        left = budget - tps
        chunk += (
            f"; here prompts average {number(prompt)} tokens "
            + ("more" if prompt > left else "less")
            + f" than the {number(left)} tokens an average step leaves of the {count(budget)}-token budget"
            + (f", prefilled in {fig(spans, 1)} step times" if spans is not None else "")
            + (
                " (consistent with it: check the server's flags)"
                if prompt > left and (spans is None or spans < PREFILL_SPLIT_STEPS)
                else " (not what it would show)"
            )
        )
    out.append(chunk + ".")
    out.append(
        "A scheduling policy: with --scheduling-policy priority, requests of lower priority wait behind "
        "higher ones, and preempted ones re-queue ahead of new ones; the server's flags tell."
    )
    return out


def rule_unexplained_queue(f: Facts) -> Finding | None:
    """``unexplained_queue``: a queue no admission limit measures as binding.

    By vLLM's admission logic something refused these requests in the steps after they arrived; when the
    steps are measured short of the budget, slots free, nothing deferred for LoRA and KV below its
    ceiling, it is something outside the three limits (module docstring). Never a limit at the edge of
    plausibility: the verdict lists the causes and the metrics that tell them apart, and which limits were
    assumed rather than read (pass them: a limit that was read is never asked for).
    """
    if not f.queue:
        return None
    states = [(limit, *_limit_state(f, limit)) for limit in ADMISSION_ORDER]
    measured = [text for _, _, _, text in states if text]
    assumed = [
        flag
        for name, flag in (("max_num_seqs", "--max-num-seqs"), ("max_num_batched_tokens", "--max-num-batched-tokens"))
        if getattr(f.limits, name).source == "default" and name not in f.inferred
    ]
    ev = [
        f"{f.evidence_queue}; {_APPROACH}, so something refused these requests, yet no admission limit measured "
        "as binding over the window: " + ("; ".join(measured) if measured else "none could be measured") + ".",
        "Under vLLM V1's chunked prefill that means something outside those limits holds the queue; what to "
        "check, and what tells each apart:",
        *(f"({i}) {cause}" for i, cause in enumerate(_unexplained_causes(f), 1)),
    ]
    if assumed:
        ev.append(
            "Not read, vLLM's default assumed: "
            + ", ".join(assumed)
            + "; pass "
            + ("it" if len(assumed) == 1 else "them")
            + " (or --pod to read the server's own flags): a server running a smaller limit than the default "
            "would be bound by it."
        )
    if f.growing is False and f.wait_avg is not None and f.wait_avg < 1:
        ev.append("The queue was short on average; a shorter --window around its peak may show a limit binding.")
    plateau = f.run_max
    if (
        f.has_active_cap is None
        and f.limits.max_num_seqs.source != "default"
        and plateau is not None
        and f.n_seqs is not None
        and 1 <= plateau < f.n_seqs - PINNED_SLACK
        and fits_a_cap_at(f.signals, plateau)
    ):
        ev.append(
            f"Running plateaued at {count(plateau)} under max_num_seqs {count(f.n_seqs)}: on vLLM 0.31 or later a "
            f"max_num_active_seqs of {count(plateau)} (an admission cap below max_num_seqs that no metric shows) "
            "gives exactly this; pass --vllm-version (and --max-num-active-seqs if set) to have it named."
        )
    near = _near_limits(f)
    grade = near[0][0] if near else 0.0
    if near:
        limit = near[0][1]
        verdict = "max_num_seqs_cap" if limit == "max_num_seqs" else "token_budget_cap or compute_bound"
        ev.append(
            f"The other reading, {verdict}: {_LIMIT_NAMES[limit]} measured in its grey zone (between half of it in "
            f"use and the threshold at which it binds for certain), below the midpoint, so this verdict's confidence "
            f"is scaled by {number(1 - grade, 2)}; nearer the threshold the limit would be named."
        )
    return Finding(
        "unexplained_queue",
        queue_severity(f.growing),
        round((CONF_UNEXPLAINED - PENALTY * len(assumed) - (0 if f.kv_known else PENALTY)) * (1 - grade), 2),
        ev,
        recommend("unexplained_queue", _inputs(f)),
    )


def rule_prefix_cache_ineffective(f: Facts) -> Finding | None:
    """``prefix_cache_ineffective`` as the primary verdict (no queue problem): see :func:`_prefix_finding`."""
    return _prefix_finding(f.signals, f.limits, low_severity=False)


def rule_partial_data(f: Facts) -> Finding | None:
    """``no_data``: one of the running/waiting gauges is missing, so a queue cannot be ruled out."""
    unknown = [name for name, value in (("running", f.run_max), ("waiting", f.wait_max)) if value is None]
    if not unknown:
        return None
    return Finding(
        "no_data",
        "unknown",
        CONF_PARTIAL_DATA,
        [
            f"{' and '.join(unknown).capitalize()} unknown in the last {fig(f.window)} s (no "
            f"vllm:num_requests_{'running' if unknown[0] == 'running' else 'waiting'} value in any "
            "spelling, or "
            f"its query failed) while running averaged {fig(f.run_avg, 1)} and waiting {fig(f.wait_avg, 1)}: "
            "a queue cannot be ruled out, so the server is not called healthy or idle."
        ],
    )


#: the counters that rise only when requests ran: (signal, what it counts, its vLLM metric)
_WORK_COUNTERS: tuple[tuple[SignalName, str, str], ...] = (
    ("prompt_tokens_per_s", "prompt tokens/s", "vllm:prompt_tokens_total"),
    ("generation_tokens_per_s", "generated tokens/s", "vllm:generation_tokens_total"),
    ("requests_finished_per_s", "requests finished/s", "vllm:request_success_total"),
)


def counters_rose(f: Facts) -> list[str]:
    """The work counters that rose over the window, each as "RATE what (metric)"; empty when none did or none
    is known. The running and waiting gauges are samples (two with ``--quick``): requests that ran between
    them leave the gauges at 0 but raise these counters, so only flat counters show that nothing ran.
    """
    return [
        f"{number(rate, 2, trim=True)} {what} ({metric})"
        for name, what, metric in _WORK_COUNTERS
        if (rate := f.s(name)) is not None and rate > 0
    ]


def rule_idle(f: Facts) -> Finding | None:
    """``idle``: nothing ran or waited: the gauges read 0 and no work counter (prompt or generated tokens,
    requests finished) rose, where those are known.
    """
    if (f.run_max or 0) != 0 or (f.wait_max or 0) != 0 or counters_rose(f):
        return None
    return Finding(
        "idle",
        "ok",
        CONF_IDLE,
        [f"No request ran or waited in the last {fig(f.window)} s (running and waiting both 0)."],
    )


def rule_healthy(f: Facts) -> Finding | None:
    """``healthy``: requests ran (or waited briefly) and no rule above matched."""
    ev = [
        f"Running {fig(f.run_avg, 1)} on average (max {fig(f.run_max)}) of max_num_seqs {fig(f.n_seqs)}; "
        f"{fig(f.wait_avg, 1)} waiting on average; KV usage peaked at {percent(f.kv_max)}; "
        f"{number(f.preempt)} preemptions."
    ]
    if (f.run_max or 0) == 0 and (f.wait_max or 0) == 0 and (rose := counters_rose(f)):
        ev.append(
            "The running and waiting gauges read 0 in every sample, yet requests ran between the samples: "
            + ", ".join(rose)
            + "."
        )
    ev.extend(_latency_evidence(f.signals))
    return Finding("healthy", "ok", CONF_HEALTHY - (0 if f.kv_known else PENALTY), ev)


#: the rules in order; the first that returns a finding is the primary verdict (module docstring)
RULES: tuple[Callable[[Facts], Finding | None], ...] = (
    rule_no_data,
    rule_target_down,
    rule_kv_preemption,
    rule_token_budget_cap,
    rule_compute_bound,
    rule_max_num_seqs_cap,
    rule_lora_slot_cap,
    rule_kv_cache_exhaustion,
    rule_near_limit,
    rule_unexplained_queue,
    rule_prefix_cache_ineffective,
    rule_partial_data,
    rule_idle,
    rule_healthy,
)

#: the rules of full steps, which outrank a few preemptions (:func:`_budget_over_preemptions`)
_BUDGET_RULES = (rule_token_budget_cap, rule_compute_bound)
#: rules after which no secondary prefix finding or latency evidence is added
_TERMINAL = {rule_no_data, rule_target_down}
#: rules that diagnose a queue: latency evidence and a secondary prefix finding are added
_QUEUE_RULES = {
    rule_kv_preemption,
    rule_kv_cache_exhaustion,
    rule_max_num_seqs_cap,
    rule_lora_slot_cap,
    rule_token_budget_cap,
    rule_compute_bound,
    rule_near_limit,
    rule_unexplained_queue,
}


def _inputs(f: Facts) -> Inputs:
    return Inputs(signals=f.signals, limits=f.limits, model_config=f.model_config)


def diagnose_target(
    signals: Signals,
    limits: Limits,
    target: dict[str, str] | None = None,
    queries: list[str] | None = None,
    model_config: ModelConfig | None = None,
) -> Diagnosis:
    """Diagnose one target: derive the facts, run :data:`RULES` in order, attach secondary findings.

    Args:
        signals: the target's :class:`Signals` (any source).
        limits: resolved :class:`Limits` with sources.
        target: the ``target`` object of the JSON report (namespace, pod, server, model_name, engine).
        queries: the PromQL/computations behind the signals (copied into the report).
        model_config: the served model's config.json (optional): bytes per KV token for
            quantified recommendations.

    Returns:
        a :class:`Diagnosis` whose ``verdict``/``severity``/``confidence``/``evidence``/
        ``recommendations`` are the primary finding and ``findings`` the secondary ones.

    Source of each rule and threshold: docs/diagnosis.md (one section per verdict).
    """
    facts = derive_facts(signals, limits)
    facts.model_config = model_config
    out_signals: dict[str, float | None] = {name: value for name, value in signals.values.items()}
    out_signals["budget_full_step_share"] = facts.share
    out_signals["kv_admission_ceiling"] = facts.ceiling
    out_signals["inferred_max_num_seqs"] = facts.n_seqs if "max_num_seqs" in facts.inferred else None
    out_signals["inferred_max_num_batched_tokens"] = (
        facts.budget if "max_num_batched_tokens" in facts.inferred else None
    )
    diag = Diagnosis(
        verdict="healthy",
        severity="ok",
        confidence=CONF_HEALTHY,
        target=dict(target or {}),
        signals=out_signals,
        queries=list(queries or []),
    )
    findings: list[Finding] = []
    schema = _schema_finding(signals)
    if schema:
        findings.append(schema)
    rule, primary = next((r, p) for r in RULES if (p := r(facts)) is not None)  # rule_healthy always matches
    if rule not in _TERMINAL:
        if rule in _QUEUE_RULES:
            primary.evidence.extend(_latency_evidence(signals))
        if rule not in _QUEUE_RULES or rule in (rule_max_num_seqs_cap, rule_lora_slot_cap, *_BUDGET_RULES):
            note = preemption_note(facts)
            if note is not None:
                # the severity policy: preemptions without a queue are a warning, whatever the verdict
                findings.append(note)
                if primary.severity == OK:
                    primary.severity = note.severity
        if rule is not rule_prefix_cache_ineffective:
            prefix = _prefix_finding(signals, limits, low_severity=True)
            if prefix is not None:
                findings.append(prefix)
        turnover = cache_turnover(signals, limits, kv_bytes_per_token(_inputs(facts)), INCIDENTAL_BLOCKS)
        if turnover is not None:
            primary.evidence.extend(turnover_evidence(turnover))
    return _finish(diag, primary, findings, signals)


def _finish(diag: Diagnosis, primary: Finding, findings: list[Finding], signals: Signals) -> Diagnosis:
    diag.verdict, diag.severity, diag.confidence = primary.verdict, primary.severity, primary.confidence
    rejected = [f"{name} ignored: {why}; treated as unknown." for name, why in sorted(signals.rejected.items())]
    if rejected:
        rejected.insert(
            0,
            "Impossible values were discarded (vLLM's KV usage is a fraction 0-1, request counts are "
            "never negative): is another exporter's series matched by the vllm[:_] name?",
        )
    diag.evidence, diag.recommendations = primary.evidence + rejected, primary.recommendations
    diag.findings = findings
    return diag


def _latency_evidence(signals: Signals) -> list[str]:
    out = []
    # what one observation of each histogram is: a request's first token, or one gap between output tokens
    quantiles: tuple[tuple[SignalName, str, str], ...] = (
        ("ttft_p99_s", "p99 TTFT", "requests"),
        ("ttft_p50_s", "p50 TTFT", "requests"),
        ("itl_p99_s", "p99 ITL", "inter-token gaps"),
    )
    for name, label, unit in quantiles:
        q = signals.quantiles.get(name)
        if q is not None:
            out.append(
                f"{label} in {q.bounds_text('s')} (Prometheus interpolates {fig(q.value, 3)} s; "
                f"histogram quantiles are only as fine as the bucket edges; {number(q.observations)} {unit})."
            )
    return out


def _kv_headroom_evidence(signals: Signals, limits: Limits) -> list[str]:
    kv_tokens, max_len = limits.value("kv_cache_tokens"), limits.value("max_model_len")
    out = []
    kv_avg, run_avg = signals.get("kv_usage_avg"), signals.get("running_avg")
    if kv_avg and run_avg:
        out.append(
            f"Each running request holds about {significant(kv_avg / run_avg * 100, 2, '%')} of KV: the pool holds "
            f"{number(1 / (kv_avg / run_avg))} such requests, {fig((1 / kv_avg), 1)}x the current use."
        )
    if kv_tokens and max_len:
        out.append(
            f"KV capacity {fig(kv_tokens)} tokens ({limits.kv_cache_tokens.source}) holds "
            f"{fig(math.floor(kv_tokens / max_len))} requests of max_model_len {fig(max_len)}."
        )
    return out


def _escaped(odd: dict[str, str]) -> list[tuple[str, str]]:
    return sorted((f, u) for f, u in odd.items() if u.startswith("vllm_"))


def _schema_finding(signals: Signals) -> Finding | None:
    """``metrics_schema_mismatch`` when only legacy names supplied a family (case C19): this server's vLLM
    exposes names of an older generation, which dashboards and rules written for today's names miss.

    Names escaped by the scrape (``vllm_`` for ``vllm:``) are not the server's doing and are the same for
    every target of one Prometheus: :func:`escaped_names_note` says it once per report instead.
    One line: how many families, and one example (the first by canonical name).
    """
    odd = legacy_or_escaped(signals)
    legacy = sorted((f, u) for f, u in odd.items() if not u.startswith("vllm_"))
    if not legacy:
        return None
    family, used = legacy[0]
    one = len(legacy) == 1
    return Finding(
        "metrics_schema_mismatch",
        FIXED["metrics_schema_mismatch"],
        CONF_SCHEMA,
        [
            f"Only under legacy names: {len(legacy)} metric famil{'y' if one else 'ies'}, e.g. {used} for {family} "
            "(an older vLLM). Dashboards and alert rules written for today's names see no data for this server "
            "(kvpilot reads both generations, so its numbers are unaffected)."
        ],
    )


def escaped_names_note(signals: Iterable[Signals]) -> str | None:
    """One report note when the source stores vLLM's names with ``_`` for ``:`` (``vllm_num_requests_running``).

    That is Prometheus 2.x scraping prometheus_client >= 0.22 (vLLM's exporter escapes the colon when asked
    for OpenMetrics without ``escaping=``): every vLLM series of that Prometheus is stored so, whatever
    the server. kvpilot reads both spellings; the user's own dashboards and rules need them too.
    """
    escaped = sorted({f for sig in signals for f, _ in _escaped(legacy_or_escaped(sig))})
    if not escaped:
        return None
    example = escaped[0]
    return (
        f"This source stores vLLM's metrics with '_' for ':' ({len(escaped)} famil"
        f"{'y' if len(escaped) == 1 else 'ies'}, e.g. {example.replace(':', '_')} for {example}): Prometheus 2.x "
        "scraping vLLM's prometheus_client >= 0.22 does this to every vLLM series. kvpilot reads both spellings and "
        "its alert rules match vllm[:_]; dashboards and rules of your own that query vllm:... see no data here: "
        'select {__name__=~"vllm[:_]..."}, or scrape with Prometheus 3.x, which keeps the colons.'
    )


class SharedPrefixFound(NamedTuple):
    """How many requests found the shared prefix the user stated (:func:`shared_prefix_found`)."""

    #: the stated length rounded down to whole blocks: the most of it vLLM can cache and find
    cached_tokens: int
    #: about the share of the requests that found it; None when it holds no full block (nothing to find)
    share: float | None


def shared_prefix_found(reused_per_request: float, shared_prefix_tokens: int, block_size: int) -> SharedPrefixFound:
    """The share of the requests that found the ``shared_prefix_tokens``-token prefix they share in the cache.

    vLLM hashes and caches only full blocks (``get_request_block_hasher``, vllm/v1/core/kv_cache_utils.py,
    vLLM 0.29.0: "We only hash full blocks"), so a request that finds the prefix hits its block-aligned length
    (a 260-token prefix hits as 256 with 16-token blocks), one that finds part of it (LRU evicts a cached
    sequence's last blocks first) hits its first blocks, and one that misses it hits nothing. The tokens reused
    per request over that length is then about the share that found it, capped at 1: an estimate (partial finds
    and hits on other reused content raise it; requests finished in the window standing in for those admitted
    move it either way: 22-27 % on vLLM's system-prompts-evicted recording, whose scheduler found the prompts for
    29-38 %). Whether that is fewer than the ground truth's line is :func:`found_by_fewer`'s to say, among the
    requests that re-used a prefix.

    Args:
        reused_per_request: prefix-cache hits per request in the window (tokens).
        shared_prefix_tokens: the length of the prompt prefix the requests share (tokens, > 0).
        block_size: the KV block size (tokens, > 0).
    """
    cached = shared_prefix_tokens // block_size * block_size
    if cached <= 0:
        return SharedPrefixFound(0, None)
    return SharedPrefixFound(cached, min(1.0, max(0.0, reused_per_request) / cached))


def first_use_requests(requests: float, written: float, kv_tokens: float, written_before: float | None) -> float:
    """How many of a window's ``requests`` came before the prefix cache first filled since the server started.

    Until the prompt tokens written to the cache since the server started (queried - hits of
    ``vllm:prefix_cache_queries_total`` and ``_hits_total``, which count from the server's start) reach its capacity,
    LRU has evicted nothing, so a request then that misses its prefix is that prefix's first use, which can only
    miss: vLLM's ground truth counts only the requests whose prefix an earlier one brought in. Of the window's
    requests, those served while the ``kv_tokens - written_before`` tokens still free were being written, at the
    window's ``written / requests`` tokens a request: all of them when the window wrote less than that, none when
    the cache had filled before the window. 0 when ``written_before`` (the counters at the window's start) is
    unknown: the cache is taken to have filled long ago.

    Args:
        requests: the window's requests (> 0).
        written: prompt tokens written to the cache in the window (queried - hits, >= 0).
        kv_tokens: the KV capacity (tokens, > 0).
        written_before: prompt tokens written to it since the server started, up to the window's start, or None.
    """
    if written_before is None or requests <= 0:
        return 0.0
    room = kv_tokens - max(0.0, written_before)
    if room <= 0:
        return 0.0
    if written <= room:
        return requests
    return requests * room / written


def found_by_fewer(found: float, reusing: float) -> bool:
    """``found`` of the ``reusing`` requests that re-used a prefix an earlier request brought in found it: fewer than
    :data:`REUSED_BY_MOST` of them, as vLLM's ground truth counts it. False without one such request (at least one
    whole request): misses that are all first uses of a prefix show no eviction.

    Args:
        found: requests that found it (estimated from the hits: may be fractional).
        reusing: requests that re-used a prefix (estimated: the window's less its first uses).
    """
    return reusing >= 1 and found / reusing < REUSED_BY_MOST


def _whole(found: SharedPrefixFound, shared: int | None, block: int) -> str:
    """``" (256 tokens in whole 16-token blocks, what vLLM caches)"`` when that differs from the stated length."""
    if found.cached_tokens == shared:
        return ""
    return f" ({count(found.cached_tokens)} in whole {fig(block)}-token blocks, what vLLM caches)"


def _prefix_finding(signals: Signals, limits: Limits, low_severity: bool) -> Finding | None:  # noqa: C901
    """The prefix-cache finding, judged per prefix, not per token; or None.

    A token-level hit rate is no measure of reuse: one shared system prompt hit by 97 % of requests whose
    unique documents make up most tokens reads 2 %. So the hit rate below :data:`LOW_HIT_RATE` (after
    discounting the hits preemption recompute would produce) only opens the question; ``warning`` needs a
    reason to expect hits that did not come:

    - an external (connector) cache hit more than the GPU cache: the traffic repeats, the GPU evicted it (unless
      the connector supplied nearly every token asked of it, :data:`REMOTE_PREFILL_SHARE`: prompts computed
      elsewhere, as in prefill/decode disaggregation);
    - prompts shorter than one block (block granularity, case C17): nothing can hit;
    - the cache turned over (the tokens written to it in the window, queried - hits, exceed the KV capacity)
      and the reuse that happens shows a prefix was lost: vLLM's per-request histograms show a prefix of at
      least T tokens (``prefix_reused_tokens``, :func:`~kvpilot.diagnose.signals.prefix_reuse`) reused by fewer
      than :data:`REUSED_BY_MOST` of the requests;
    - without those histograms (vLLM before 0.29), a turned-over cache with some hits below
      :data:`LRU_THRASH_HIT_RATE` of more than :data:`INCIDENTAL_BLOCKS` blocks a request, saying the counters
      cannot tell it from a hot prefix;
    - given the length of the prefix the traffic shares (``shared_prefix_tokens``, which no vLLM metric gives),
      that instead of the last two: fewer than :data:`REUSED_BY_MOST` of the requests finding it
      (:func:`shared_prefix_found`), or a prefix shorter than one block (never cached). At least half finding it
      is a healthy cache whatever the token hit rate: nothing, or with ``low_severity`` an ``ok`` finding saying so.

    Evidence that something was there to share is required of every finding: the connector's hits, a stated
    prefix, the per-request histograms, or hits of more than :data:`INCIDENTAL_BLOCKS` blocks per request. Hits of
    a block or two a request are what a template every prompt begins with gives, and random-token traffic (nothing
    repeated) hits exactly that: no finding on them.

    Without that length, a turned-over cache with a low hit rate whose requests reuse more than
    :data:`INCIDENTAL_BLOCKS` blocks each and no longer prefix seen is what a hot shared prefix amid unique content
    gives, and also what larger prefixes often evicted give: with ``low_severity`` an ``ok``-severity finding says
    the metrics cannot tell them apart and what would; as the primary verdict, nothing (healthy). Zero hits is no
    reason to expect any: silent (unless a shared prefix is stated).
    """
    s = signals.get
    queries, hits = s("prefix_queries_increase"), s("prefix_hits_increase")
    if not queries or queries <= 0 or hits is None:
        return None
    block = limits.value("block_size") or DEFAULT_BLOCK_SIZE
    per_request = s("prompt_tokens_per_request")
    finished = s("requests_finished_increase")
    if finished and finished > 0:
        per_request = queries / finished
    preempt = s("preemptions_increase") or 0.0
    recompute = preempt * per_request if per_request else 0.0
    adjusted = max(0.0, hits - recompute)
    rate = adjusted / queries
    if rate >= LOW_HIT_RATE:
        return None
    # hits per request: what each request found of what it shares (lookups = requests admitted)
    lookups = finished if finished and finished > 0 else queries / per_request if per_request else None
    per_hit = adjusted / lookups if lookups else None
    reused_share, reused_tokens = s("prefix_reused_share"), s("prefix_reused_tokens")
    # vLLM 0.29's per-request histograms (prompt tokens, and those less the cached ones) were exported
    per_request_known = bool(signals.buckets.get("prompt_tokens")) and bool(signals.buckets.get("computed_tokens"))
    ev = [
        f"Prefix cache hit rate {percent(rate)}: {number(hits)} of {number(queries)} queried tokens hit in the window"
        + (
            f" (discounted {number(min(hits, recompute))} hits that preemption recompute of {number(preempt)} "
            "requests would produce)"
            if recompute > 0 and hits > 0
            else ""
        )
        + (f"; {number(per_hit)} tokens per request reused on average" if per_hit is not None else "")
        + "."
    ]
    reason = False
    ext_q, ext_h = s("external_prefix_queries_increase"), s("external_prefix_hits_increase")
    # a connector that supplied (nearly) every token it was asked for is where the prompts are computed
    # (prefill/decode disaggregation: vLLM counts a remote prefill's load as external hits), not a cache of what
    # the GPU evicted: no reason to expect GPU hits
    remote_prefill = bool(ext_h and ext_q and ext_h >= REMOTE_PREFILL_SHARE * ext_q)
    if ext_h and ext_h > hits and not remote_prefill:
        ev.append(
            f"The external KV cache hit {number(ext_h)} of {number(ext_q)} tokens: the traffic does repeat, but "
            "the GPU cache had evicted it."
        )
        reason = True
    if per_request and per_request < block:
        ev.append(
            f"Prompts average {number(per_request)} tokens, shorter than one {fig(block)}-token block "
            f"(block_size, {limits.block_size.source}): only full blocks are cached, so no prompt can hit, "
            "whatever it shares (hits = 0 with queries > 0 is not proof of no sharing). Shorten the "
            "cache's match unit or lengthen the shared prefix to at least one block."
        )
        reason = True
    shared = limits.value("shared_prefix_tokens")
    found = shared_prefix_found(per_hit, shared, block) if shared and per_hit is not None else None
    stated = f"{count(shared)}-token shared prefix (--shared-prefix-tokens)"
    kv_tokens = limits.value("kv_cache_tokens")
    # LRU can only have evicted a reused prefix if the cache turned over in the window: the tokens that
    # missed (and were written to the cache) exceed its capacity. Tokens queried would count the hits
    # too, so a hot shared prefix on busy traffic would look like thrash over any long enough window.
    written = queries - hits
    turnover = written / kv_tokens if kv_tokens else None
    remembered = (
        f"; the cache holds the new tokens of only the last {number(kv_tokens / (written / finished))} requests"
        if kv_tokens and finished and finished > 0 and written > 0
        else ""
    )
    turned = (
        f"{number(written)} prompt tokens missed the cache and were written to it in the window, "
        f"{times(turnover)} the KV capacity of {count(kv_tokens)} tokens{remembered}"
        if turnover is not None
        else ""
    )
    # hits beyond the incidental (a template's block or two) show the traffic shares something longer; with no
    # request counter (hits per request unknown) the hits are not shown incidental and count as before
    shared_evidence = per_hit is None or per_hit > INCIDENTAL_BLOCKS * block
    # the requests that re-used a prefix an earlier one brought in: the window's, less those served before the
    # cache first filled (their misses are first uses); unknown counters at the start: all of them
    q0, h0 = s("prefix_queries_first"), s("prefix_hits_first")
    first_uses = (
        first_use_requests(lookups, written, kv_tokens, q0 - h0 if q0 is not None and h0 is not None else None)
        if lookups and kv_tokens
        else 0.0
    )
    reusing = (lookups or 0.0) - first_uses
    first = (
        f" ({number(first_uses)} of the window's {number(lookups)} requests came before the cache first filled "
        "since the server started: their misses are first uses of a prefix, which can only miss)"
        if first_uses > 0 and lookups
        else ""
    )
    of_reusing = " re-using a prefix" if first else ""
    lost = ""
    if found is not None and found.share is None:
        ev.append(
            f"The {stated} is shorter than one {fig(block)}-token block: vLLM caches only full blocks, so no request "
            "can find it. Lengthen it to at least one block."
        )
        reason = True
    elif (
        found is not None
        and found.share is not None
        and per_hit is not None
        and found_by_fewer(found.share * (lookups or 0.0), reusing)
    ):
        judged = (
            f"requests reused {number(per_hit)} tokens each on average against the {stated}"
            f"{_whole(found, shared, block)}: about {percent(found.share * (lookups or 0.0) / reusing)} of the "
            f"requests{of_reusing} found it{first}, fewer than half"
        )
        if turnover is not None and turnover > 1:
            lost = judged
        else:
            ev.append(
                f"R{judged[1:]}. "
                + (
                    "The cache did not turn over in the window, so LRU eviction does not explain it: the requests "
                    "do not share that prefix as sent."
                    if turnover is not None
                    else "The KV capacity is unknown, so whether LRU evicted it cannot be told."
                )
            )
            reason = True
    elif found is None and turnover is not None and turnover > 1 and hits > 0:
        # the histograms show at least reused_share of the requests finding a prefix of at least reused_tokens (a
        # lower bound of both, from bucket bounds); tokens reused per request of at least that length say every
        # request may have found it, so the lower bound stands for the share only when they fall short of it
        if (
            reused_tokens
            and reused_share is not None
            and per_hit is not None
            and per_hit < reused_tokens
            and found_by_fewer(reused_share * (lookups or 0.0), reusing)
        ):
            lost = (
                f"{percent(reused_share * (lookups or 0.0) / reusing)} of the requests{of_reusing} reused a prefix of "
                f"at least {count(reused_tokens)} tokens each (vllm:request_prefill_kv_computed_tokens against "
                f"vllm:request_prompt_tokens){first}, fewer than half, and requests reused {number(per_hit)} tokens on "
                "average: the others found no such prefix, evicted if they share it"
            )
        elif not per_request_known and 0 < rate < LRU_THRASH_HIT_RATE and shared_evidence:
            lost = (
                "some hits came (vLLM before 0.29 exports no per-request token histograms, so this cannot be "
                "told from a hot shared prefix amid unique content)"
            )
    if lost:
        ev.append(
            f"{turned}, and {lost}: traffic that reuses prefixes further apart than the cache holds finds them "
            "evicted under LRU. Offload KV to CPU (LMCache) or reorder requests so reuse comes sooner."
        )
        reason = True
    if reason:
        ev.append(
            "If requests are meant to share prefixes, also look for variable tokens (timestamps, request ids) "
            "at the front of prompts: one differing early token changes every later block hash."
        )
        return Finding(
            "prefix_cache_ineffective",
            FIXED["prefix_cache_ineffective"],
            CONF_PREFIX,
            ev,
            recommend("prefix_cache_ineffective", Inputs(signals=signals, limits=limits)),
        )
    if (
        low_severity
        and found is None
        and shared_evidence
        and turnover is not None
        and turnover > 1
        and 0 < rate < LRU_THRASH_HIT_RATE
    ):
        ev.append(
            f"{turned}. Reported at low severity: requests reused {number(per_hit)} tokens each on average and no "
            "request is seen reusing a longer prefix, which is what a hot shared prefix amid unique content gives "
            "(a healthy cache) and also what longer prefixes often evicted give; the metrics cannot tell them apart. "
            "What would: the length of the prefix the traffic is meant to share against the tokens reused per "
            "request (pass it as --shared-prefix-tokens N: that tells them apart); vLLM's --kv-cache-metrics "
            "(vllm:kv_block_idle_before_evict_seconds against "
            "vllm:kv_block_reuse_gap_seconds); an external KV cache's hits."
        )
        return Finding("prefix_cache_ineffective", "ok", CONF_PREFIX_LOW, ev, [])
    if low_severity and found is not None and found.share is not None:
        ev.append(
            f"Reported at low severity: requests reused {number(per_hit)} tokens each on average against the "
            f"{stated}{_whole(found, shared, block)}: "
            + (
                f"about {percent(min(1.0, found.share * (lookups or 0.0) / reusing))} of the requests{of_reusing} "
                f"found it{first}, at least half"
                if reusing >= 1
                else f"about {percent(found.share)} of the requests found it{first}, and none is seen re-using a "
                "prefix an earlier request brought in"
            )
            + ". The cache serves what the traffic shares; the misses are the prompts' unique rest (a healthy cache)."
        )
        return Finding("prefix_cache_ineffective", "ok", CONF_PREFIX, ev, [])
    return None
