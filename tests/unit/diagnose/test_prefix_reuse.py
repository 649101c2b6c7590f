"""Prefix-cache findings per prefix, not per token, on hand-built signals (docs/diagnosis.md).

vLLM 0.29 observes, per finished request, its prompt tokens (vllm:request_prompt_tokens) and its prompt less the
tokens found in the prefix cache (vllm:request_prefill_kv_computed_tokens), in the same 1-2-5 buckets. For bounds
e1 < e2 at least F_computed(e1) - F_prompt(e2) of the requests reused at least e2 - e1 tokens each.
"""

from __future__ import annotations

import math

from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.rules import SharedPrefixFound, diagnose_target, shared_prefix_found
from kvpilot.diagnose.signals import Signals, finish_signals, prefix_reuse

EDGES = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)


def histogram(sizes: dict[float, int]) -> list[tuple[float, float]]:
    """Cumulative bucket counts of observations ``{size: how many}`` on vLLM's 1-2-5 edges."""
    out = [(float(e), float(sum(n for v, n in sizes.items() if v <= e))) for e in EDGES]
    return [*out, (math.inf, float(sum(sizes.values())))]


def signals(prompt: dict[float, int], computed: dict[float, int], **values) -> Signals:
    base = {
        "samples_in_window": 30.0,
        "last_sample_time": 1000.0,
        "preemptions_increase": 0.0,
        "running_avg": 3.0,
        "running_max": 4.0,
        "waiting_avg": 0.0,
        "waiting_max": 0.0,
        "kv_usage_avg": 0.2,
        "kv_usage_max": 0.3,
        **values,
    }
    sig = Signals(values=base, window_seconds=300.0, end=1000.0)
    sig.buckets["prompt_tokens"] = histogram(prompt)
    sig.buckets["computed_tokens"] = histogram(computed)
    return finish_signals(sig)


def test_prefix_reuse_bound_from_the_two_histograms():
    # 1,000 prompts of 3,200 tokens; 130 computed 200 (a 3,000-token prefix hit), 870 computed 3,200:
    # F_computed(200) - F_prompt(2,000) = 0.13 - 0 -> at least 13 % reused at least 2,000 - 200 = 1,800 tokens
    assert prefix_reuse(histogram({3200: 1000}), histogram({200: 130, 3200: 870})) == (0.13, 1800.0)
    # 40 of 1,000 (4 % < 5 %): too few to be a prefix the traffic shares
    assert prefix_reuse(histogram({3200: 1000}), histogram({200: 40, 3200: 960})) == (None, None)
    # no histogram: unknown
    assert prefix_reuse([], histogram({200: 1})) == (None, None)


def test_a_hot_system_prompt_amid_unique_documents_is_no_warning():
    # the healthy server: 1,000 requests of about 50,000 tokens (unique documents of 49,000 + a shared
    # 1,000-token system prompt) that 97 % of them hit: 970,000 of 50,000,000 queried tokens = 1.9 %, the cache
    # (200,000 tokens) turned over 245x. Requests reused 970 tokens each (>= one block) and no longer prefix is
    # seen (a 1,000-token shift within the (20,000, 50,000] bucket): no warning, the verdict is healthy, and a
    # finding at severity ok says the metrics cannot tell a hot prefix from a longer one often evicted
    sig = signals(
        {45000: 1000},
        {44000: 970, 45000: 30},
        prefix_queries_increase=50_000_000.0,
        prefix_hits_increase=970_000.0,
        requests_finished_increase=1000.0,
    )
    d = diagnose_target(sig, resolve_limits(cli={"kv_cache_tokens": 200000, "max_num_seqs": 64}))
    assert (d.verdict, d.severity) == ("healthy", "ok")
    [f] = [f for f in d.findings if f.verdict == "prefix_cache_ineffective"]
    assert f.severity == "ok"
    assert "the metrics cannot tell them apart" in " ".join(f.evidence)
    assert "970 tokens per request reused on average" in f.evidence[0]


def test_a_long_prefix_most_requests_miss_is_a_warning():
    # prompts of 3,200 tokens sharing 3,000-token prefixes; 13 % found theirs (computed 200): a prefix of at least
    # 1,800 tokens reused by 13 % < 50 % of the requests, 390 tokens a request, the 49,152-token cache turned
    # over: a warning
    def case(hit: int) -> object:
        return diagnose_target(
            signals(
                {3200: 1000},
                {200: hit, 3200: 1000 - hit},
                prefix_queries_increase=3_200_000.0,
                prefix_hits_increase=3000.0 * hit,
                requests_finished_increase=1000.0,
            ),
            resolve_limits(cli={"kv_cache_tokens": 49152, "max_num_seqs": 64}),
        )

    d = case(130)
    assert (d.verdict, d.severity) == ("prefix_cache_ineffective", "warning")
    text = " ".join(d.evidence)
    assert "13.0 % of the requests reused a prefix of at least 1,800 tokens each" in text
    assert "390 tokens on average: the others found no such prefix" in text
    # 499 found theirs (49.9 %, 1,497 a request; 46.8 % of the tokens hit, under 50 %): fewer than half -> a warning
    assert case(499).verdict == "prefix_cache_ineffective"
    # 500 found theirs: half the requests, not fewer; 46.9 % of tokens hit, over 25 %: no finding
    d = case(500)
    assert d.verdict == "healthy"
    assert not [f for f in d.findings if f.verdict == "prefix_cache_ineffective"]


def test_hits_under_a_block_a_request_are_a_warning_only_with_evidence_of_sharing():
    # 1,000 requests of 45,000 tokens, 10 hit a 1,000-token prefix: 10 tokens a request on average, under one
    # 16-token block, on a cache that turned over. The counters read the same as random-token traffic whose
    # requests find a template's first block now and then: no evidence anything longer was there to share, so
    # no finding on them alone
    sig = signals(
        {45000: 1000},
        {44000: 10, 45000: 990},
        prefix_queries_increase=45_000_000.0,
        prefix_hits_increase=10_000.0,
        requests_finished_increase=1000.0,
    )
    d = diagnose_target(sig, resolve_limits(cli={"kv_cache_tokens": 200000, "max_num_seqs": 64}))
    assert d.verdict == "healthy"
    assert not [f for f in d.findings if f.verdict == "prefix_cache_ineffective"]
    # the 1,000-token prefix stated: 10 tokens of 992 cached (whole blocks) a request = 1 % found it -> warning
    lim = resolve_limits(cli={"kv_cache_tokens": 200000, "max_num_seqs": 64, "shared_prefix_tokens": 1000})
    d = diagnose_target(sig, lim)
    assert (d.verdict, d.severity) == ("prefix_cache_ineffective", "warning")
    # 48 hits a request (3 blocks, more than a template's incidental 2): the ambiguity at severity ok, healthy
    sig = signals(
        {45000: 1000},
        {44000: 48, 45000: 952},
        prefix_queries_increase=45_000_000.0,
        prefix_hits_increase=48_000.0,
        requests_finished_increase=1000.0,
    )
    d = diagnose_target(sig, resolve_limits(cli={"kv_cache_tokens": 200000, "max_num_seqs": 64}))
    assert d.verdict == "healthy"
    assert [f.severity for f in d.findings if f.verdict == "prefix_cache_ineffective"] == ["ok"]


def test_random_token_traffic_gives_no_prefix_finding():
    # a real server's random-token load: 900 prompts of 128-384 tokens (256 on average: 230,400 queried), nothing
    # repeated; a template's first 16-token block found by some requests: 0 to 2 blocks a request (0-12.5 % of
    # the tokens), on a 32,768-token cache turned over 6-7x. No evidence of anything to share: no finding, at
    # any severity, as the primary verdict or beside it
    lim = resolve_limits(cli={"kv_cache_tokens": 32768, "max_num_seqs": 64, "block_size": 16})
    for per_request in (0.0, 1.0, 11.5, 16.0, 32.0):
        sig = signals(
            {128: 300, 256: 300, 384: 300},
            {128 - per_request: 300, 256 - per_request: 300, 384 - per_request: 300},
            prefix_queries_increase=230_400.0,
            prefix_hits_increase=900 * per_request,
            requests_finished_increase=900.0,
        )
        d = diagnose_target(sig, lim)
        assert d.verdict == "healthy", per_request
        assert not [f for f in d.findings if f.verdict == "prefix_cache_ineffective"], per_request
    # the other side: 48 tokens a request (3 blocks) is more than a template gives: the ok-severity finding
    # saying the counters cannot tell a hot prefix from longer ones evicted
    sig = signals(
        {128: 300, 256: 300, 384: 300},
        {80: 300, 208: 300, 336: 300},
        prefix_queries_increase=230_400.0,
        prefix_hits_increase=900 * 48.0,
        requests_finished_increase=900.0,
    )
    assert [f.severity for f in diagnose_target(sig, lim).findings if f.verdict == "prefix_cache_ineffective"] == ["ok"]


def test_a_connector_that_supplies_every_token_is_remote_prefill_not_an_eviction():
    # prefill/decode disaggregation: vLLM counts a remote prefill's load as external prefix-cache hits, so the
    # connector hit 541,152 of 541,152 queried tokens (vLLM's own remote-KV recording) and the GPU none: the prompts
    # are computed elsewhere, no reason to expect GPU hits (99 % and up is the connector's own work)
    def case(ext_hits: float) -> object:
        sig = signals(
            {2000: 270},
            {2000: 270},
            prefix_queries_increase=541152.0,
            prefix_hits_increase=0.0,
            external_prefix_queries_increase=541152.0,
            external_prefix_hits_increase=ext_hits,
            requests_finished_increase=270.0,
        )
        return diagnose_target(sig, resolve_limits(cli={"kv_cache_tokens": 122736, "max_num_seqs": 256}))

    assert case(541152.0).verdict == "healthy"
    assert case(0.99 * 541152).verdict == "healthy"
    # 98.9 %: an offload cache that first-time prompts missed, holding what the GPU evicted -> the warning
    d = case(0.989 * 541152)
    assert d.verdict == "prefix_cache_ineffective"
    assert "the GPU cache had evicted it" in " ".join(d.evidence)


def test_the_share_of_requests_finding_a_stated_shared_prefix_counts_whole_blocks():
    # vLLM caches whole 16-token blocks: a 256-token prefix is found as 256 tokens, a 260-token one as 256 too
    # 70 tokens a request against 256: 70 / 256 = 27.3 % found it, fewer than half
    assert shared_prefix_found(70.0, 256, 16) == SharedPrefixFound(256, 70 / 256, False)
    # 128 / 256 = exactly half: found by most (the ground truth calls fewer than half evicted); 127.9 is fewer
    assert shared_prefix_found(128.0, 256, 16).found_by_most
    assert not shared_prefix_found(127.9, 256, 16).found_by_most
    # a 260-token prefix: 129 / 256 = 50.4 % (129 / 260 = 49.6 % would call it evicted)
    assert shared_prefix_found(129.0, 260, 16) == SharedPrefixFound(256, 129 / 256, True)
    # hits on other reused content: 259 a request against 256 caps at every request
    assert shared_prefix_found(259.0, 256, 16) == SharedPrefixFound(256, 1.0, True)
    # a 10-token prefix holds no full block: nothing to find
    assert shared_prefix_found(50.0, 10, 16) == SharedPrefixFound(0, None, False)


def _documents(per_request: int, kv_cache_tokens: int = 200000, **cli) -> object:
    # 1,000 requests of about 50,000 tokens (45,000-token bucket), each reusing per_request tokens on average: a
    # 1,000-token shift inside the (20,000, 50,000] bucket, so the histograms show no longer prefix
    sig = signals(
        {45000: 1000},
        {44000: per_request, 45000: 1000 - per_request},
        prefix_queries_increase=50_000_000.0,
        prefix_hits_increase=1000.0 * per_request,
        requests_finished_increase=1000.0,
    )
    return diagnose_target(sig, resolve_limits(cli={"kv_cache_tokens": kv_cache_tokens, "max_num_seqs": 64, **cli}))


def test_a_stated_shared_prefix_tells_a_hot_one_from_one_most_requests_miss():
    # a 1,000-token shared prefix is 62 whole 16-token blocks = 992 tokens. 400 tokens a request (0.8 % of the
    # tokens hit, the 200,000-token cache turned over 248x): without its length the ambiguity, at severity ok
    d = _documents(400)
    assert d.verdict == "healthy"
    [f] = [f for f in d.findings if f.verdict == "prefix_cache_ineffective"]
    assert f.severity == "ok"
    assert "--shared-prefix-tokens N: that tells them apart" in " ".join(f.evidence)
    # with it: 400 / 992 = 40.3 % of the requests found it, fewer than half -> the warning
    d = _documents(400, shared_prefix_tokens=1000)
    assert (d.verdict, d.severity) == ("prefix_cache_ineffective", "warning")
    text = " ".join(d.evidence)
    assert "against the 1,000-token shared prefix (--shared-prefix-tokens) (992 in whole 16-token blocks" in text
    assert "about 40.3 % of the requests found it, fewer than half" in text
    # 495 / 992 = 49.9 %: fewer than half -> the warning; 496 / 992 = 50 %: half, not fewer -> healthy, and the
    # secondary finding at severity ok says the cache serves the shared prefix
    assert _documents(495, shared_prefix_tokens=1000).verdict == "prefix_cache_ineffective"
    d = _documents(496, shared_prefix_tokens=1000)
    assert d.verdict == "healthy"
    [f] = [f for f in d.findings if f.verdict == "prefix_cache_ineffective"]
    assert f.severity == "ok"
    assert "about 50.0 % of the requests found it, at least half" in " ".join(f.evidence)
    assert "cannot tell" not in " ".join(f.evidence)


def test_a_stated_shared_prefix_few_requests_find_in_a_cache_that_did_not_turn_over_is_not_eviction():
    # 100 tokens a request against 992: 10.1 %, yet the 49,900,000 tokens written fit a 100,000,000-token cache
    d = _documents(100, kv_cache_tokens=100_000_000, shared_prefix_tokens=1000)
    assert d.verdict == "prefix_cache_ineffective"
    assert "eviction does not explain it: the requests do not share that prefix as sent" in " ".join(d.evidence)


def test_a_stated_shared_prefix_shorter_than_a_block_is_never_cached():
    # 10 tokens: no full 16-token block, so vLLM hashes none of it and no request can find it
    d = _documents(16, shared_prefix_tokens=10)
    assert d.verdict == "prefix_cache_ineffective"
    assert "10-token shared prefix (--shared-prefix-tokens) is shorter than one 16-token block" in " ".join(d.evidence)
