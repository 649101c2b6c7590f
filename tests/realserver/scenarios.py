"""The real-server tier's servers and loads: each bottleneck produced for real, each with a control.

Loads are closed-loop (``vllm bench serve --max-concurrency N``: N clients, each sending its next request when the
last one finished), so the queue a limit builds is set by the clients, not by how fast this machine happens to be:
N clients against a cap below N keep N - cap requests waiting whatever the step time. Random-token prompts
(``--dataset-name random``) share nothing, so the prefix cache finds only chance hits.

Sizes: the model's KV bytes per token are 2 (K, V) x 4 layers x 2 KV heads x 64 x 2 bytes = 2,048, and vLLM's CPU
block is 128 tokens, so ``--kv-cache-memory-bytes`` 64 MiB holds 32,768 tokens (256 blocks) and 6 MiB 3,072
tokens (24 blocks); a 256 -> 64 request (``--random-range-ratio 0.5``: prompts of 128-384 tokens, outputs of 32-96)
needs 2-4 blocks, so 24 of them need about 72 blocks where 24 exist.
"""

from __future__ import annotations

from tests.realserver.harness import Load
from tests.realserver.server import ServerSpec

MIB = 1 << 20
RANDOM_CHAT = ("--dataset-name", "random", "--random-input-len", "256", "--random-output-len", "64",
               "--random-range-ratio", "0.5", "--ignore-eos")  # fmt: skip
LONG_PROMPTS = ("--dataset-name", "random", "--random-input-len", "1024", "--random-output-len", "16",
                "--random-range-ratio", "0.25", "--ignore-eos")  # fmt: skip
SHARED_PROMPT = ("--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "768",
                 "--prefix-repetition-suffix-len", "64", "--prefix-repetition-num-prefixes", "1",
                 "--prefix-repetition-output-len", "32", "--ignore-eos")  # fmt: skip


def closed(n: int, prompts: int = 1500) -> tuple[str, ...]:
    """``n`` clients sending back to back, more prompts than the window can serve (the load is stopped)."""
    return ("--max-concurrency", str(n), "--request-rate", "inf", "--num-prompts", str(prompts))


SEQS2 = ServerSpec("cpu-seqs2", max_num_seqs=2, max_num_batched_tokens=2048, kv_cache_bytes=64 * MIB)
SEQS8 = ServerSpec("cpu-seqs8", max_num_seqs=8, max_num_batched_tokens=2048, kv_cache_bytes=64 * MIB)
KV_SMALL = ServerSpec("cpu-kv-small", max_num_seqs=64, max_num_batched_tokens=2048, kv_cache_bytes=6 * MIB)
BUDGET = ServerSpec("cpu-budget", max_num_seqs=64, max_num_batched_tokens=128, kv_cache_bytes=64 * MIB)
#: the control: every limit raised above what the loads ask for, so the same loads find no limit (16 clients of
#: 1,024-token prompts fit one 8,192-token step whole; with 2,048 the budget still refused a quarter of the time)
ROOMY = ServerSpec("cpu-roomy", max_num_seqs=64, max_num_batched_tokens=8192, kv_cache_bytes=64 * MIB)

SEQS_LOAD = Load("seqs-cap", (*RANDOM_CHAT, *closed(16)), description="16 clients, max_num_seqs 2", what_if=True)
SEQS8_LOAD = Load("seqs-cap-8", (*RANDOM_CHAT, *closed(32)), description="32 clients, max_num_seqs 8", what_if=True)
NEAR_LOAD = Load("near-limits", (*RANDOM_CHAT, *closed(6)), description="6 clients, max_num_seqs 8")
KV_LOAD = Load("kv-exhaustion", (*RANDOM_CHAT, *closed(24)), description="24 clients, 24 KV blocks", what_if=True)
BUDGET_LOAD = Load("token-budget", (*LONG_PROMPTS, *closed(16)), description="16 clients, 1024-token prompts, "
                   "a 128-token budget", what_if=True)  # fmt: skip
SHARED_LOAD = Load("shared-prompt", (*SHARED_PROMPT, *closed(4)), description="4 clients, one 768-token system prompt")
IDLE_LOAD = Load(
    "idle-after-burst",
    ("--dataset-name", "random", "--random-input-len", "128", "--random-output-len", "16", "--ignore-eos",
     "--request-rate", "inf", "--num-prompts", "8"),
    warmup=12.0,
    description="a burst of 8 requests, then nothing for the window",
)  # fmt: skip

#: server -> its loads, in the order they run (the controls run the same loads on ROOMY)
PLAN: dict[str, tuple[ServerSpec, tuple[Load, ...]]] = {
    "seqs2": (SEQS2, (SEQS_LOAD,)),
    "seqs8": (SEQS8, (SEQS8_LOAD, NEAR_LOAD)),
    "kv-small": (KV_SMALL, (KV_LOAD,)),
    "budget": (BUDGET, (BUDGET_LOAD,)),
    "roomy": (ROOMY, (SEQS_LOAD, KV_LOAD, BUDGET_LOAD, SHARED_LOAD, IDLE_LOAD)),
}
