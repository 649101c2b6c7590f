"""lora_slot_cap, unexplained_queue and defaults the gauges contradict, on hand-built signals.

- lora_slot_cap: vLLM 0.29 skips a waiting request whose LoRA adapter would make the step's adapters exceed
  max_loras (Scheduler.schedule), counting it in vllm:num_requests_waiting_by_reason{reason="deferred"};
  vllm:lora_requests_info's labels name every adapter with a request in flight and max_lora.
- unexplained_queue: a queue no admission limit measures as binding (never the nearest limit named).
- a default the gauges contradict (running above it, steps above 1.1 x the default budget) is rejected.
"""

from __future__ import annotations

from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.model import VERDICTS
from kvpilot.diagnose.rules import diagnose_target
from kvpilot.diagnose.signals import compute_signals
from kvpilot.metrics.exposition import Sample
from tests.unit.diagnose.test_rules import make

QUEUE = dict(waiting_avg=6, waiting_max=9, waiting_median=6, waiting_trend_per_s=0.0)
ROOM = dict(running_avg=8, running_max=9, kv_usage_avg=0.09, kv_usage_max=0.1)
LIMITS = {"max_num_seqs": 256, "max_num_batched_tokens": 8192}
#: 8 running decode 8 tokens per step: 0.1 % of the budget
STEPS = dict(iteration_tokens_sum_increase=8000.0, iteration_steps_increase=1000.0)
#: the issue's queue: 5 of 256 running, KV at a third of its ceiling, nothing deferred
FEW_RUNNING = dict(QUEUE, running_avg=5, running_max=6, kv_usage_avg=0.3, kv_usage_max=0.31, waiting_deferred_avg=0)


def steps(tokens_per_step: float) -> dict:
    """1,000 engine steps averaging ``tokens_per_step`` tokens."""
    return dict(iteration_tokens_sum_increase=tokens_per_step * 1000, iteration_steps_increase=1000.0)


def test_deferred_requests_with_every_lora_slot_held_are_a_lora_slot_cap():
    # 6 deferred on average while both max_loras slots held an adapter (2 of 2), 4 adapters seen over the window:
    # the adapters' slots refused them (vLLM 0.29 names an adapter only once a request of it was scheduled)
    lora = dict(waiting_deferred_avg=6, lora_max_loras=2, lora_adapters_max=2, lora_adapters_seen=4)
    d = diagnose_target(make(**QUEUE, **ROOM, **STEPS, **lora), resolve_limits(cli=LIMITS))
    assert (d.verdict, d.severity, d.confidence) == ("lora_slot_cap", "warning", 0.8)
    text = " ".join(d.evidence)
    assert "while all 2 LoRA slots (max_loras) held an adapter with scheduled requests, 4 adapters over the" in text
    assert "The checks before it had room" in text
    [r] = d.recommendations
    assert (r.flag, r.current, r.suggested) == ("--max-loras", 2, 4)
    assert "--max-cpu-loras" in r.expected_effect
    # only 2 adapters seen for 2 slots: still at least one more slot (M + 1 = 3)
    d = diagnose_target(make(**QUEUE, **ROOM, **STEPS, **{**lora, "lora_adapters_seen": 2}), resolve_limits(cli=LIMITS))
    assert d.recommendations[0].suggested == 3
    # a slot free (1 of 2): the deferral is not LoRA's; nothing else binds -> unexplained_queue, naming the
    # deferred count and the slots
    d = diagnose_target(make(**QUEUE, **ROOM, **STEPS, **{**lora, "lora_adapters_max": 1}), resolve_limits(cli=LIMITS))
    assert d.verdict == "unexplained_queue"
    text = " ".join(d.evidence)
    assert "6 on average were deferred" in text
    assert "up to 1 of 2 slots held an adapter" in text
    # nothing deferred: LoRA refused no one, whatever the slots
    d = diagnose_target(
        make(**QUEUE, **ROOM, **STEPS, **{**lora, "waiting_deferred_avg": 0}), resolve_limits(cli=LIMITS)
    )
    assert d.verdict == "unexplained_queue"


def test_preemptions_beside_a_deferred_head_on_full_lora_slots_are_the_lora_cap():
    # 20 waiting, 18 of them deferred on average, a deferred request in at least half the samples (median 1), both
    # max_loras slots held, 14 preemptions with KV peaking at the ceiling once (average 22 %). vLLM 0.29 visits its
    # deferred requests first (Scheduler._select_waiting_queue_for_scheduling under FCFS), so the head was skipped
    # on max_loras in every step but the 14 that preempted: the LoRA slots held the queue
    queue = dict(waiting_avg=20, waiting_max=30, waiting_median=20, waiting_trend_per_s=0.0)
    kv = dict(running_avg=6, running_max=9, kv_usage_avg=0.22, kv_usage_max=0.99, preemptions_increase=14.0)
    lora = dict(waiting_deferred_avg=18, waiting_deferred_median=1, lora_max_loras=1, lora_adapters_max=1)
    d = diagnose_target(make(**queue, **kv, **STEPS, **lora, lora_adapters_seen=4), resolve_limits(cli=LIMITS))
    assert d.verdict == "lora_slot_cap"
    kv_note = next(f for f in d.findings if f.verdict == "kv_cache_exhaustion")
    assert "the LoRA slots held the queue, not the KV cache" in " ".join(kv_note.evidence)
    # the other side of the line: a deferred request in fewer than half the samples (median 0): the head was a
    # request the KV cache refused most of the time, and the preemptions make it the KV cache
    d = diagnose_target(
        make(**queue, **kv, **STEPS, **{**lora, "waiting_deferred_median": 0}, lora_adapters_seen=4),
        resolve_limits(cli=LIMITS),
    )
    assert d.verdict == "kv_cache_exhaustion"
    # a deferred head but a LoRA slot free (1 of 2): not LoRA's deferral; the preemptions decide
    d = diagnose_target(
        make(**queue, **kv, **STEPS, **{**lora, "lora_max_loras": 2}, lora_adapters_seen=4),
        resolve_limits(cli=LIMITS),
    )
    assert d.verdict == "kv_cache_exhaustion"


def test_a_plateau_under_a_deferred_head_on_full_lora_slots_is_not_read_as_a_cap():
    # no flags: max_num_seqs unknown (vLLM's default 256 assumed). 2 running in every sample, decode-only steps, a
    # queue and KV room: alone, a flat batch read as an inferred cap of 2. With a deferred request heading the queue
    # (median 4) while the one LoRA slot held an adapter, the deferral is vLLM's own record that the slot refused the
    # head, and a batch held to one adapter's requests sits flat as well: no cap is read off it (vLLM 0.29, a drawn
    # scenario: max_loras 1, 11 adapters, the head refused on the LoRA slot in 89 % of the queued time and never on
    # max_num_seqs, read as a cap of 2 before)
    flat = dict(QUEUE, running_avg=2, running_max=2, running_median=2, running_min=2, kv_usage_avg=0.2)
    flat["kv_usage_max"] = 0.3
    d = diagnose_target(make(**flat, **steps(2.0)), resolve_limits())
    assert d.verdict == "max_num_seqs_cap"
    lora = dict(waiting_deferred_avg=6, waiting_deferred_median=4, lora_max_loras=1, lora_adapters_max=1)
    d = diagnose_target(make(**flat, **steps(2.0), **lora, lora_adapters_seen=11), resolve_limits())
    assert d.verdict == "lora_slot_cap"
    assert "inferred: running sat at" not in " ".join(d.evidence)
    # deferred in fewer than half the samples (median 0): the head was not deferred, the plateau is a cap again
    d = diagnose_target(make(**flat, **steps(2.0), **{**lora, "waiting_deferred_median": 0}), resolve_limits())
    assert d.verdict == "max_num_seqs_cap"


def test_a_request_deferred_now_and_then_beside_a_full_kv_cache_is_not_the_lora_cap():
    # 300 waiting, 0.14 deferred on average and none in most samples (median 0), all 4 LoRA slots held at times;
    # 4 running hold 88 % of the KV cache (22 % each), peaking at 98 %, past the ceiling 1 - 2 x 0.22 = 0.56: the head
    # that waits is a request the KV cache refuses, not a deferred one (vLLM visits deferred requests first only
    # while there are any)
    queue = dict(waiting_avg=300, waiting_max=400, waiting_median=300, waiting_trend_per_s=0.0)
    kv = dict(running_avg=4, running_max=4, kv_usage_avg=0.88, kv_usage_max=0.98)
    lora = dict(waiting_deferred_avg=0.14, waiting_deferred_median=0, lora_max_loras=4, lora_adapters_max=4)
    d = diagnose_target(make(**queue, **kv, **STEPS, **lora, lora_adapters_seen=6), resolve_limits(cli=LIMITS))
    assert d.verdict == "kv_cache_exhaustion"
    # a deferred request in half the samples (median 1): the head is a deferred one, skipped on max_loras first
    d = diagnose_target(
        make(**queue, **kv, **STEPS, **{**lora, "waiting_deferred_median": 1}, lora_adapters_seen=6),
        resolve_limits(cli=LIMITS),
    )
    assert d.verdict == "lora_slot_cap"


def test_lora_gauge_read_from_a_recording():
    # vllm:lora_requests_info: each step sets the current label set's series to the server's time; an older
    # set keeps the time it was last current. Window 300 s: the server's newest time is 1,400, so sets current
    # since 1,100 count: {a,b} (max_lora 2), not the stale {c} of time 500
    labels = {"namespace": "llm", "pod": "p"}
    old = {**labels, "max_lora": "2", "running_lora_adapters": "c", "waiting_lora_adapters": "c"}
    now = {**labels, "max_lora": "2", "running_lora_adapters": "a,b", "waiting_lora_adapters": "a,b"}
    t0 = 1_000_000.0
    samples = [Sample("vllm:num_requests_running", {**labels, "model_name": "m"}, 2.0, t0 + 10 * i) for i in range(30)]
    samples += [Sample("vllm:lora_requests_info", old, 500.0, t0 + 10 * i) for i in range(30)]
    samples += [Sample("vllm:lora_requests_info", now, 1110.0 + 10 * i, t0 + 10 * i) for i in range(30)]
    [sig] = compute_signals(samples, 300.0).values()
    assert (sig.get("lora_max_loras"), sig.get("lora_adapters_max"), sig.get("lora_adapters_seen")) == (2.0, 2.0, 2.0)
    # the stale set becomes current again at the window's end (time 1,400): still 2 at once, 3 seen
    samples.append(Sample("vllm:lora_requests_info", old, 1400.0, t0 + 290))
    [sig] = compute_signals(samples, 300.0).values()
    assert (sig.get("lora_adapters_max"), sig.get("lora_adapters_seen")) == (2.0, 3.0)
    # a server without --enable-lora exports no such gauge: unknown, never 0 slots
    [sig] = compute_signals(samples[:30], 300.0).values()
    assert sig.get("lora_max_loras") is None
    assert sig.get("lora_adapters_max") is None


def test_no_limit_binding_with_the_flags_known_is_an_unexplained_queue():
    # the case: steps at 37 % of the budget (3,031 of 8,192), 2 % of max_num_seqs (5 of 256), KV at a
    # third of its ceiling: something outside the three limits holds the queue; never token_budget_cap 0.4
    # nor "pass the flags" when they were passed
    sig = make(**FEW_RUNNING, **steps(3031))
    d = diagnose_target(sig, resolve_limits(cli=LIMITS))
    assert (d.verdict, d.severity, d.confidence) == ("unexplained_queue", "warning", 0.7)
    text = " ".join(d.evidence)
    assert "steps averaged 3,031 tokens of the 8,192-token budget (cli) = 37.0 %" in text
    assert "running 5 of max_num_seqs 256 (cli) = 2.0 %" in text
    assert "Not read" not in text
    assert "pass --max" not in text
    for cause in ("Deferred requests", "grammar", "remote instance", "Chunked prefill switched off", "priority"):
        assert cause in text
    assert {r.flag for r in d.recommendations} == {"--enable-chunked-prefill", "--scheduling-policy"}
    # the budget not read (vLLM's default 2,048 for an unknown GPU) and steps of 1,500 (73 %, not full, no
    # prefill time to infer a smaller budget from): the same, asking for the limit that was assumed (and only
    # that one), at 0.7 - 0.2 = 0.5
    sig = make(**FEW_RUNNING, **steps(1500))
    d = diagnose_target(sig, resolve_limits(cli={"max_num_seqs": 256}))
    assert d.verdict == "unexplained_queue"
    assert d.confidence == 0.5
    assert "Not read, vLLM's default assumed: --max-num-batched-tokens; pass it" in " ".join(d.evidence)


def test_a_budget_known_only_as_at_least_the_mean_step_is_not_full_by_definition():
    # steps average 3,031 tokens, more than 1.1 x vLLM's default 2,048: the server runs a budget of at least
    # 3,031, but how full its steps are is unknown (never "100 % of the budget"); with slots free, KV room and
    # nothing deferred the budget is left by elimination, inferred (0.8 - 0.2)
    sig = make(**FEW_RUNNING, **steps(3031))
    d = diagnose_target(sig, resolve_limits(cli={"max_num_seqs": 256}))
    assert (d.verdict, d.confidence) == ("token_budget_cap", 0.6)
    assert "100.0 % of the budget" not in d.evidence[0]
    assert "elimination" in d.evidence[0]
    # requests deferred: elimination no longer leaves the budget alone -> unexplained_queue
    d = diagnose_target(make(**{**sig.values, "waiting_deferred_avg": 2.0}), resolve_limits(cli={"max_num_seqs": 256}))
    assert d.verdict == "unexplained_queue"


def test_chunked_prefill_off_is_named_when_prompts_do_not_fit_what_a_step_leaves():
    # 6,000-token prompts, steps averaging 3,031 of 8,192: a step leaves 5,161 tokens, less than a prompt, and
    # prompts are prefilled in 1.1 step times (not chunked): consistent with chunked prefill off
    sig = make(
        **FEW_RUNNING,
        **steps(3031),
        prompt_tokens_per_s=6000.0,
        requests_finished_per_s=1.0,
        itl_sum_increase=10.0,
        itl_count_increase=1000.0,
        prefill_time_sum_increase=0.011 * 100,
        prefill_time_count_increase=100.0,
    )
    text = " ".join(diagnose_target(sig, resolve_limits(cli=LIMITS)).evidence)
    assert "prompts average 6,000 tokens more than the 5,161 tokens an average step leaves" in text
    assert "(consistent with it: check the server's flags)" in text


def test_defaults_the_gauges_contradict_are_rejected():
    # running reached 1,013 on a server whose max_num_seqs was not read (vLLM's default 256 for an unknown GPU):
    # it runs a larger one, at least 1,013; the evidence never says "of 256 (default)"
    sig = make(running_avg=700, running_max=1013, waiting_avg=0, waiting_max=0, kv_usage_avg=0.3, kv_usage_max=0.4)
    d = diagnose_target(sig, resolve_limits())
    text = " ".join(d.evidence)
    assert d.verdict == "healthy"
    assert "of max_num_seqs 1,013" in text
    assert "256" not in text
    assert d.signals["inferred_max_num_seqs"] == 1013
    # pinned there with a queue (1,010 of 1,013, 3 finished per step): max_num_seqs_cap at 1,013, inferred
    sig = make(
        running_avg=1010,
        running_max=1013,
        kv_usage_avg=0.3,
        kv_usage_max=0.4,
        requests_finished_increase=3000.0,
        iteration_steps_increase=1000.0,
        iteration_tokens_sum_increase=1013000.0,
        **QUEUE,
    )
    d = diagnose_target(sig, resolve_limits())
    assert (d.verdict, d.confidence) == ("max_num_seqs_cap", 0.6)
    assert "of 256" not in " ".join(d.evidence)
    assert "at least 1,013" in d.evidence[0]
    # a max of 256 does not contradict the default 256: nothing inferred
    sig = make(running_avg=100, running_max=256, waiting_avg=0, waiting_max=0, kv_usage_avg=0.3, kv_usage_max=0.4)
    assert diagnose_target(sig, resolve_limits()).signals["inferred_max_num_seqs"] is None


def test_the_verdict_vocabulary_is_the_designs():
    # the design's contract (verdicts, lowercase), and the JSON schema's enum
    import json
    from pathlib import Path

    design = [
        "kv_cache_exhaustion",
        "max_num_seqs_cap",
        "token_budget_cap",
        "lora_slot_cap",
        "compute_bound",
        "unexplained_queue",
        "prefix_cache_ineffective",
        "healthy",
        "idle",
        "no_data",
        "target_down",
        "metrics_schema_mismatch",
    ]
    assert list(VERDICTS) == design
    schema = json.loads((Path(__file__).resolve().parents[3] / "docs" / "diagnose-output.schema.json").read_text())
    assert schema["$defs"]["verdict"]["enum"] == design
