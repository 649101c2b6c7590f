"""The cache-turnover finding on the founding experiment's own numbers.

The founding experiment (vLLM 0.29.0, Qwen2.5-1.5B-Instruct, 8 GB GPU): a KV cache of 21,520 tokens, ten documents
of random words of about 5,011 tokens each (no shared prefixes), sent one at a time: in order, again in the same
order, then in reverse, prefix caching on. Prefix-cache hits per pass: 0, 0, 21,488 tokens. TTFT p50 576.2 ms on the
second pass (about 560 ms of it recomputing the prompt); with LMCache holding 1.5 GB of KV in CPU memory the second
pass's TTFT was 48.6 ms, its connector serving 48,640 tokens (19 full 256-token chunks of each document).
Qwen2.5-1.5B stores 28 layers x 2 (K, V) x 2 KV heads x 128 x 2 bytes = 28,672 bytes of KV per token.

A window of one pass: ten requests at one a second (concurrency 1), 10 s.
"""

from __future__ import annotations

from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.rules import diagnose_target
from kvpilot.diagnose.signals import Signals, finish_signals
from kvpilot.kv.spec import ModelConfig

WINDOW = 10.0

KV_TOKENS = 21_520
DOC_TOKENS = 5_011
DOCS = 10
QWEN_1_5B = {
    "num_hidden_layers": 28,
    "num_key_value_heads": 2,
    "hidden_size": 1536,
    "num_attention_heads": 12,
    "torch_dtype": "bfloat16",
}
BYTES_PER_TOKEN = 28 * 2 * 2 * 128 * 2


def make(**values) -> Signals:
    """Signals of a live target over the 10 s window, sampled at 1 Hz, with ``values`` set."""
    base = {"samples_in_window": WINDOW, "last_sample_time": 1000.0, "preemptions_increase": 0.0, **values}
    return finish_signals(Signals(values=base, window_seconds=WINDOW, end=1000.0))


def one_pass(hits: float, ttft_s: float = 0.5762, prefill_s: float = 0.560):
    sig = make(
        running_avg=1,
        running_max=1,
        waiting_avg=0,
        waiting_max=0,
        kv_usage_avg=0.23,
        kv_usage_max=0.25,
        prefix_queries_increase=float(DOCS * DOC_TOKENS),
        prefix_hits_increase=hits,
        requests_finished_increase=float(DOCS),
        prefill_time_sum_increase=DOCS * prefill_s,
        prefill_time_count_increase=float(DOCS),
    )
    sig.fit["ttft_sum_increase"] = DOCS * ttft_s
    sig.fit["ttft_count_increase"] = float(DOCS)
    return diagnose_target(
        sig, resolve_limits(cli={"kv_cache_tokens": KV_TOKENS}), model_config=ModelConfig.read(QWEN_1_5B)
    )


def turnover_lines(d) -> str:
    return " ".join(e for e in d.evidence if "Cache turnover" in e or "offload tier" in e)


def test_the_cyclic_re_read_states_the_horizon_the_offload_and_its_ttft():
    d = one_pass(hits=0.0)
    # no queue at concurrency 1: healthy, and nothing to warn about
    assert (d.verdict, d.severity) == ("healthy", "ok")
    assert not [f for f in d.findings if f.severity != "ok"]
    text = turnover_lines(d)
    # horizon: 21,520 tokens / (50,110 tokens / 10 s) = 4.29 s
    assert "a prompt survives about 4.29 s" in text
    assert "more than 21,520 tokens of other prompts" in text
    # the working set: 50,110 tokens x 28,672 B = 1.437e9 B = 1.34 GiB, between what the experiment's tier served
    # (48,640 tokens = 1.395e9 B) and the 1.5 GB it had
    assert 48_640 * BYTES_PER_TOKEN <= DOCS * DOC_TOKENS * BYTES_PER_TOKEN <= 1.5e9
    assert "CPU offload tier (LMCache) of 1.34 GiB" in text
    # loads 19 x 256 = 4,864 tokens per document (the 48,640 / 10 the connector served)
    assert "load its 4,864 tokens" in text


def test_the_predicted_ttft_with_offload_is_near_the_measured_one():
    d = one_pass(hits=0.0)
    # (576.2 - 560) + 560 x 147 / 5,011 + 4,864 x 28,672 / 16e9 s = 16.2 + 16.4 + 8.7 = 41.3 ms; measured with
    # LMCache 48.6 ms (storing the chunks adds a few ms the estimate leaves out): within 20 %
    text = turnover_lines(d)
    predicted = float(text.split("predicted TTFT ")[1].split(" ms")[0])
    assert abs(predicted - 48.6) <= 0.2 * 48.6
    assert "against 576 ms measured" in text


def test_the_reversed_pass_which_hits_gives_no_turnover_finding():
    # 21,488 of 50,110 tokens hit: 2,149 a request, far above a template's incidental block or two
    d = one_pass(hits=21_488.0)
    assert "Cache turnover" not in " ".join(d.evidence)
    assert not [f for f in d.findings if f.verdict == "prefix_cache_ineffective" and f.severity != "ok"]


def test_short_prompts_or_a_cache_that_did_not_turn_over_give_none():
    # prompts shorter than one 256-token offload chunk: nothing an offload tier could serve
    sig = make(
        running_avg=1,
        running_max=1,
        waiting_avg=0,
        waiting_max=0,
        prefix_queries_increase=200.0 * 1000,
        prefix_hits_increase=0.0,
        requests_finished_increase=1000.0,
    )
    d = diagnose_target(sig, resolve_limits(cli={"kv_cache_tokens": KV_TOKENS}))
    assert "Cache turnover" not in " ".join(d.evidence)
    # long prompts, but fewer tokens entered than the cache holds (4 documents, 20,044 < 21,520): no turnover
    sig = make(
        running_avg=1,
        running_max=1,
        waiting_avg=0,
        waiting_max=0,
        prefix_queries_increase=4.0 * DOC_TOKENS,
        prefix_hits_increase=0.0,
        requests_finished_increase=4.0,
    )
    d = diagnose_target(sig, resolve_limits(cli={"kv_cache_tokens": KV_TOKENS}))
    assert "Cache turnover" not in " ".join(d.evidence)
