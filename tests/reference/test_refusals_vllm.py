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


#: name -> (engine flags, requests)
CASES = {
    # 3 requests, 2 slots: r2 waits while r0 and r1 run their 4 steps each
    "max-num-seqs": (
        {"max_num_seqs": 2, "num_gpu_blocks": 100, "max_model_len": 256, "max_num_batched_tokens": 256},
        [_req(i, 32, 4) for i in range(3)],
    ),
    # 2 blocks = 1 usable block of 16 tokens: r0's 10-token prompt takes it, r1's finds none
    "one-block-kv": (
        {"max_num_seqs": 8, "num_gpu_blocks": 2, "max_model_len": 16, "max_num_batched_tokens": 64},
        [_req(i, 10, 3) for i in range(2)],
    ),
    # 3 blocks = 2 usable: both 10-token prompts get one block; the 17th token of r0 needs a second block
    "preemption": (
        {"max_num_seqs": 8, "num_gpu_blocks": 3, "max_model_len": 32, "max_num_batched_tokens": 64},
        [_req(i, 10, 12) for i in range(2)],
    ),
    # budget 16, a 64-token prompt: r0 prefills in 4 chunks of 16, each using the whole budget
    "budget-used": (
        {"max_num_seqs": 8, "num_gpu_blocks": 100, "max_model_len": 128, "max_num_batched_tokens": 16},
        [_req(i, 64, 3) for i in range(2)],
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
    ),
    # 1 slot and 1 usable block: vLLM checks the running cap before asking the KV cache
    "cap-before-kv": (
        {"max_num_seqs": 1, "num_gpu_blocks": 2, "max_model_len": 16, "max_num_batched_tokens": 64},
        [_req(i, 10, 3) for i in range(2)],
    ),
    # 1 slot, budget 16 used up by r0's first chunk: the budget is checked first (the loop's while condition)
    "budget-before-cap": (
        {"max_num_seqs": 1, "num_gpu_blocks": 100, "max_model_len": 128, "max_num_batched_tokens": 16},
        [_req(i, 64, 3) for i in range(2)],
    ),
    # one request alone: nothing ever waits
    "alone": (
        {"max_num_seqs": 8, "num_gpu_blocks": 100, "max_model_len": 128, "max_num_batched_tokens": 64},
        [_req(0, 40, 5)],
    ),
}


@pytest.fixture(scope="module")
def runs() -> dict[str, list[dict]]:
    python = require_vllm_python()
    specs = [driver_spec(name, make_engine(**flags), reqs) for name, (flags, reqs) in CASES.items()]
    answer = run_vllm(python, specs)
    # the last step of each run schedules nothing (it reports the finished requests): left out
    return {r["name"]: [s for s in r["steps"] if s["scheduled"] or s["preempted"]] for r in answer["results"]}


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


def test_the_budget_is_checked_before_the_running_cap(runs):
    steps = runs["budget-before-cap"]
    # r0's 4 chunks each spend the budget of 16 (the while condition) before the cap of 1 is looked at; then
    # r0 decodes (1 token, budget left) at the cap: max_num_seqs for its 2 decode steps
    assert refusals(steps[:6]) == [("token_budget", "budget_used")] * 4 + [("max_num_seqs", "running_at_cap")] * 2


def test_nothing_waiting_is_none(runs):
    steps = runs["alone"]
    assert len(steps) == 5
    assert refusals(steps) == [("none", "")] * 5
