"""The driver's per-step ground truth: why vLLM 0.29.0's scheduler left the head of its queue waiting.

Tiny workloads where the reason follows from arithmetic written here. Block size 16; vLLM's block pool keeps one
block aside (the null block), so ``num_gpu_blocks`` B holds ``(B - 1) x 16`` tokens. A prompt of P tokens computes
in one step (chunked prefill, budget permitting) and samples the first output token; each later step computes one
token per running request and samples the next, so ``output_len`` L takes L steps.
"""

from __future__ import annotations

import pytest

from kvpilot.engine.request import Request
from tests.conftest import require_vllm_python
from tests.reference.compare import make_engine
from tests.reference.harness import driver_spec, run_vllm

pytestmark = pytest.mark.vllm_ref


def _req(i: int, prompt: int, output: int, t: float = 0.0) -> Request:
    return Request(f"r{i}", prompt, output, t, segments=[(f"u{i}", prompt)])


#: name -> (engine flags, requests, driver features, per-request fields)
CASES: dict[str, tuple[dict, list[Request], dict, dict]] = {
    # 3 requests, 2 slots: r2 waits while r0 and r1 run their 4 steps each
    "max-num-seqs": (
        {"max_num_seqs": 2, "num_gpu_blocks": 100, "max_model_len": 256, "max_num_batched_tokens": 256},
        [_req(i, 32, 4) for i in range(3)],
        {},
        {},
    ),
    # 2 blocks = 1 usable block of 16 tokens: r0's 10-token prompt takes it, r1's finds none
    "one-block-kv": (
        {"max_num_seqs": 8, "num_gpu_blocks": 2, "max_model_len": 16, "max_num_batched_tokens": 64},
        [_req(i, 10, 3) for i in range(2)],
        {},
        {},
    ),
    # 3 blocks = 2 usable: both 10-token prompts get one block; the 17th token of r0 needs a second block
    "preemption": (
        {"max_num_seqs": 8, "num_gpu_blocks": 3, "max_model_len": 32, "max_num_batched_tokens": 64},
        [_req(i, 10, 12) for i in range(2)],
        {},
        {},
    ),
    # budget 16, a 64-token prompt: r0 prefills in 4 chunks of 16, each using the whole budget
    "budget-used": (
        {"max_num_seqs": 8, "num_gpu_blocks": 100, "max_model_len": 128, "max_num_batched_tokens": 16},
        [_req(i, 64, 3) for i in range(2)],
        {},
        {},
    ),
    # chunked prefill off, budget 128: r0's 100 tokens leave 28, too few for r1's 100 unchunked
    "prompt-cannot-be-chunked": (
        {
            "max_num_seqs": 8,
            "num_gpu_blocks": 100,
            "max_model_len": 128,
            "max_num_batched_tokens": 128,
            "enable_chunked_prefill": False,
        },
        [_req(i, 100, 3) for i in range(2)],
        {},
        {},
    ),
    # 1 slot and 1 usable block: vLLM checks the running cap before asking the KV cache
    "cap-before-kv": (
        {"max_num_seqs": 1, "num_gpu_blocks": 2, "max_model_len": 16, "max_num_batched_tokens": 64},
        [_req(i, 10, 3) for i in range(2)],
        {},
        {},
    ),
    # 1 slot, budget 16 used up by r0's chunks: the budget runs out at the cap
    "budget-at-cap": (
        {"max_num_seqs": 1, "num_gpu_blocks": 100, "max_model_len": 128, "max_num_batched_tokens": 16},
        [_req(i, 64, 3) for i in range(2)],
        {},
        {},
    ),
    # one request alone: nothing ever waits
    "alone": (
        {"max_num_seqs": 8, "num_gpu_blocks": 100, "max_model_len": 128, "max_num_batched_tokens": 64},
        [_req(0, 40, 5)],
        {},
        {},
    ),
    # --max-loras 1: r1's adapter b cannot join a batch running adapter a (r0, r2)
    "lora-deferred": (
        {"max_num_seqs": 8, "num_gpu_blocks": 100, "max_model_len": 256, "max_num_batched_tokens": 256},
        [_req(i, 32, 4) for i in range(3)],
        {"lora": {"max_loras": 1}},
        {"r0": {"lora": "a"}, "r1": {"lora": "b"}, "r2": {"lora": "a"}},
    ),
    # prefill done elsewhere: prompts of 64, 128, 192 tokens, each transfer 10 ms + 1 ms per token, side by side
    "remote-kv": (
        {"max_num_seqs": 8, "num_gpu_blocks": 100, "max_model_len": 256, "max_num_batched_tokens": 256},
        [_req(i, 64 * (i + 1), 3) for i in range(3)],
        {"remote_kv": {"seconds_per_token": 0.001, "latency": 0.01}},
        {f"r{i}": {"remote_prefill": True} for i in range(3)},
    ),
    # 3 draft tokens per decode step, each accepted with probability 0.6 by the stand-in verifier
    "speculative": (
        {"max_num_seqs": 8, "num_gpu_blocks": 100, "max_model_len": 256, "max_num_batched_tokens": 256},
        [_req(i, 32, 10) for i in range(2)],
        {"speculative": {"num_speculative_tokens": 3, "acceptance_rate": 0.6, "seed": 1}},
        {},
    ),
    # one slot, priority policy: r2 (priority 1) overtakes r1 (priority 5), both queued behind r0
    "priority": (
        {"max_num_seqs": 1, "num_gpu_blocks": 100, "max_model_len": 256, "max_num_batched_tokens": 256},
        [_req(0, 32, 4), _req(1, 32, 4, 0.0001), _req(2, 32, 4, 0.0001)],
        {"policy": "priority"},
        {"r1": {"priority": 5}, "r2": {"priority": 1}},
    ),
}


@pytest.fixture(scope="module")
def runs() -> dict[str, list[dict]]:
    python = require_vllm_python()
    specs = [
        driver_spec(name, make_engine(**flags), reqs, features=features, request_fields=fields, snapshot_interval=0.01)
        for name, (flags, reqs, features, fields) in CASES.items()
    ]
    answer = run_vllm(python, specs)
    # the last step of each run schedules nothing (it reports the finished requests): left out, except while
    # KV transfers are in flight (the engine loops with nothing to run until one lands)
    return {
        r["name"]: [s for s in r["steps"] if s["scheduled"] or s["preempted"] or s["refusal"] != "none"]
        for r in answer["results"]
    } | {f"{r['name']}:snapshots": r["snapshots"] + [[r["end"], r["final"]]] for r in answer["results"]}


def refusals(steps: list[dict]) -> list[tuple[str, str]]:
    return [(s["refusal"], s["refusal_detail"]) for s in steps]


def test_running_at_max_num_seqs(runs):
    steps = runs["max-num-seqs"]
    # r0, r1: 4 steps each (prefill + 3 decodes), all with r2 waiting; then r2 alone: 4 steps, nothing waits
    assert [sorted(s["scheduled"]) for s in steps] == [["r0", "r1"]] * 4 + [["r2"]] * 4
    assert refusals(steps) == [("max_num_seqs", "running_at_cap")] * 4 + [("none", "")] * 4


def test_kv_cache_refuses_the_second_prompt(runs):
    steps = runs["one-block-kv"]
    # r0: 10 + 3 tokens fit its block; r1 needs a block while r0 holds the only one (3 steps), then runs alone
    assert refusals(steps) == [("kv_cache", "allocate_slots")] * 3 + [("none", "")] * 3
    assert [s["queue"] for s in steps] == [1, 1, 1, 0, 0, 0]


def test_a_step_that_preempts_is_a_kv_refusal(runs):
    steps = runs["preemption"]
    # step 1 prefills both (10 tokens each, one block each); step k >= 2 writes token 10 + k - 1 of each, so
    # steps 2-7 fit (tokens 11-16), step 8 needs r0's 17th slot with no block free: r1 (last running) is preempted
    assert [s["preempted"] for s in steps[:8]] == [[]] * 7 + [["r1"]]
    assert refusals(steps[:8]) == [("none", "")] * 7 + [("kv_cache", "preempted")]
    # then r1 waits for a block until r0 (12 outputs: steps 1-12, holding 2 blocks) finishes
    assert refusals(steps[8:12]) == [("kv_cache", "allocate_slots")] * 4
    assert refusals(steps[12:]) == [("none", "")] * len(steps[12:])


def test_budget_used_by_a_chunked_prompt(runs):
    steps = runs["budget-used"]
    # 64 / 16 = 4 chunks of r0, each leaving no budget for r1; step 5: r0 decodes 1, r1 gets 15
    assert [s["scheduled"] for s in steps[:5]] == [{"r0": 16}] * 4 + [{"r0": 1, "r1": 15}]
    assert refusals(steps[:5]) == [("token_budget", "budget_used")] * 4 + [("none", "")]


def test_a_prompt_that_cannot_be_chunked(runs):
    steps = runs["prompt-cannot-be-chunked"]
    # 128 - 100 = 28 < 100: r1 waits one step; step 2 has 127 left after r0's decode token
    assert [s["scheduled"] for s in steps[:2]] == [{"r0": 100}, {"r0": 1, "r1": 100}]
    assert refusals(steps[:2]) == [("token_budget", "prompt_cannot_be_chunked"), ("none", "")]


def test_the_running_cap_is_checked_before_the_kv_cache(runs):
    steps = runs["cap-before-kv"]
    # KV is full too (r0 holds the only block), but with 1 of 1 running the loop never reaches allocate_slots
    assert refusals(steps) == [("max_num_seqs", "running_at_cap")] * 3 + [("none", "")] * 3


def test_a_budget_spent_at_the_cap_is_the_budget(runs):
    steps = runs["budget-at-cap"]
    # r0's 4 chunks each spend the budget of 16 with 1 of 1 running: schedule()'s waiting loop never starts
    # (`while ... and token_budget > 0` is checked before `num_running >= max_num_running_reqs`), so the budget
    # stopped admission; then r0 decodes (1 token, budget left) at the cap for its 2 decode steps: the cap
    assert [s["scheduled"] for s in steps[:4]] == [{"r0": 16}] * 4
    assert (
        refusals(steps[:6]) == [("token_budget", "budget_used_at_cap")] * 4 + [("max_num_seqs", "running_at_cap")] * 2
    )


def test_nothing_waiting_is_none(runs):
    steps = runs["alone"]
    assert len(steps) == 5
    assert refusals(steps) == [("none", "")] * 5


def test_an_adapter_that_cannot_join_the_batch_is_a_lora_refusal(runs):
    steps = runs["lora-deferred"]
    # max_loras 1: r0 (a) is admitted, r1 (b) set aside, r2 (a) joins; r1 runs once adapter a's requests finish
    assert [sorted(s["scheduled"]) for s in steps] == [["r0", "r2"]] * 4 + [["r1"]] * 4
    assert refusals(steps) == [("lora", "max_loras")] * 4 + [("none", "")] * 4
    # vLLM counts the set-aside request as deferred, and names the adapters in vllm:lora_requests_info
    families = {f[0]: f[3] for f in runs["lora-deferred:snapshots"][1][1]}  # t = 0.01 s, inside r0's 4 steps
    deferred = [v for n, labels, v in families["vllm:num_requests_waiting_by_reason"] if labels["reason"] == "deferred"]
    assert deferred == [1.0]
    assert {labels["max_lora"] for _, labels, _ in families["vllm:lora_requests_info"]} == {"1"}


def test_a_request_waiting_for_remote_kv_is_an_other_refusal(runs):
    steps = runs["remote-kv"]
    # transfers land at 10 + 64 = 74 ms, 10 + 128 = 138 ms, 10 + 192 = 202 ms; until then the request waits in
    # WAITING_FOR_REMOTE_KVS; once loaded it recomputes only its last prompt token, then decodes
    firsts = {rid: next(s for s in steps if rid in s["scheduled"]) for rid in ("r0", "r1", "r2")}
    assert [firsts[r]["start"] for r in ("r0", "r1", "r2")] == pytest.approx([0.074, 0.138, 0.202])
    assert all(firsts[r]["scheduled"][r] == 1 for r in firsts)
    before_r2 = [s for s in steps if s["start"] < 0.202 - 1e-9]
    assert {(s["refusal"], s["refusal_detail"]) for s in before_r2} == {("other", "WAITING_FOR_REMOTE_KVS")}
    assert steps[0]["scheduled"] == {}
    assert steps[0]["duration"] == pytest.approx(0.074)
    assert {s["refusal"] for s in steps if s["start"] >= 0.202 - 1e-9} == {"none"}


def test_priority_policy_admits_the_lower_value_first(runs):
    steps = runs["priority"]
    order = [next(iter(s["scheduled"])) for s in steps if any(n > 1 for n in s["scheduled"].values())]
    assert order == ["r0", "r2", "r1"]
    # while r0 and then r2 hold the one slot, the queue's head waits on max_num_seqs
    assert {s["refusal"] for s in steps if s["queue"]} == {"max_num_seqs"}


def test_speculative_decoding_schedules_the_drafts_and_vllm_counts_them(runs):
    steps = runs["speculative"]
    # the prefill step computes 32 tokens each; every later step 1 + 3 drafts per request
    assert steps[0]["scheduled"] == {"r0": 32, "r1": 32}
    decodes = [n for s in steps[1:] for n in s["scheduled"].values()]
    assert decodes
    assert set(decodes) == {4}
    final = {f[0]: f[3] for f in runs["speculative:snapshots"][-1][1]}
    drafts = final["vllm:spec_decode_num_draft_tokens"][0][2]
    accepted = final["vllm:spec_decode_num_accepted_tokens"][0][2]
    assert drafts == 3 * len(decodes)
    # each request's 10 tokens: 1 from its prefill, then per decode step 1 + the drafts accepted
    assert 0 < accepted < drafts
    assert all(s["refusal"] == "none" for s in steps)
