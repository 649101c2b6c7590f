"""Prefix-cache findings per prefix, not per token, on hand-built signals (docs/diagnosis.md).

vLLM 0.29 observes, per finished request, its prompt tokens (vllm:request_prompt_tokens) and its prompt less the
tokens found in the prefix cache (vllm:request_prefill_kv_computed_tokens), in the same 1-2-5 buckets. For bounds
e1 < e2 at least F_computed(e1) - F_prompt(e2) of the requests reused at least e2 - e1 tokens each.
"""

from __future__ import annotations

import math

from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.rules import (
    SharedPrefixFound,
    diagnose_target,
    first_use_requests,
    found_by_fewer,
    shared_prefix_found,
)
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
    assert shared_prefix_found(70.0, 256, 16) == SharedPrefixFound(256, 70 / 256)
    assert found_by_fewer(70 / 256, 1.0)
    # 128 / 256 = exactly half: found by most (the ground truth calls fewer than half evicted); 127.9 is fewer
    assert not found_by_fewer(shared_prefix_found(128.0, 256, 16).share or 0.0, 1.0)
    assert found_by_fewer(shared_prefix_found(127.9, 256, 16).share or 0.0, 1.0)
    # a 260-token prefix: 129 / 256 = 50.4 % (129 / 260 = 49.6 % would call it evicted)
    assert shared_prefix_found(129.0, 260, 16) == SharedPrefixFound(256, 129 / 256)
    assert not found_by_fewer(129 / 256, 1.0)
    # hits on other reused content: 259 a request against 256 caps at every request
    assert shared_prefix_found(259.0, 256, 16) == SharedPrefixFound(256, 1.0)
    # a 10-token prefix holds no full block: nothing to find
    assert shared_prefix_found(50.0, 10, 16) == SharedPrefixFound(0, None)


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


def test_requests_before_the_cache_first_filled_are_first_uses():
    # a 10,000-token cache, 4,000 tokens written before the window: 6,000 still free. The window wrote 30,000 over
    # 60 requests (500 a request): the first 6,000 / 500 = 12 of them came before it filled
    assert first_use_requests(60.0, 30_000.0, 10_000.0, 4_000.0) == 12.0
    # the window wrote 6,000 tokens, exactly the room left: none of its requests can have met an evicted prefix
    assert first_use_requests(60.0, 6_000.0, 10_000.0, 4_000.0) == 60.0
    # 6,001 written: the cache filled just before the last request's last token: 60 x 6,000 / 6,001
    assert first_use_requests(60.0, 6_001.0, 10_000.0, 4_000.0) == 60.0 * 6_000.0 / 6_001.0
    # 10,000 written before the window: the cache had filled, no first uses credited; unknown counters: none
    assert first_use_requests(60.0, 30_000.0, 10_000.0, 10_000.0) == 0.0
    assert first_use_requests(60.0, 30_000.0, 10_000.0, None) == 0.0


def test_found_by_fewer_than_half_of_the_requests_re_using_a_prefix():
    # 4 of 10: 40 % < 50 %; 5 of 10: half, not fewer
    assert found_by_fewer(4.0, 10.0)
    assert not found_by_fewer(5.0, 10.0)
    # 0 of 1 re-using request: fewer; no whole re-using request (0.9, or all first uses): nothing to judge
    assert found_by_fewer(0.0, 1.0)
    assert not found_by_fewer(0.0, 0.9)
    assert not found_by_fewer(0.0, 0.0)


def _young(per_request: int, first_queries: float | None, finished: float = 1000.0) -> object:
    # 1,000 requests of 50,000 tokens against a 992-token stated prefix in a 100,000,000-token cache: the window
    # wrote 50,000,000 - 1,000 x per_request tokens
    sig = signals(
        {45000: 1000},
        {44000: per_request, 45000: 1000 - per_request},
        prefix_queries_increase=50_000_000.0,
        prefix_hits_increase=finished * per_request,
        requests_finished_increase=finished,
        **({"prefix_queries_first": first_queries, "prefix_hits_first": 0.0} if first_queries is not None else {}),
    )
    return diagnose_target(
        sig, resolve_limits(cli={"kv_cache_tokens": 100_000_000, "max_num_seqs": 64, "shared_prefix_tokens": 1000})
    )


def test_first_uses_of_a_prefix_before_the_cache_filled_are_not_evidence_of_loss():
    # nothing found (0 tokens a request), the cache never turned over: with the counters at the window's start
    # unknown, the requests do not share the prefix as sent
    assert _young(0, None).verdict == "prefix_cache_ineffective"
    # the server wrote 0 tokens before the window and the window's 50,000,000 fit the 100,000,000-token cache:
    # every request came before it first filled, every miss a prefix's first use: no finding of loss
    d = _young(0, 0.0)
    assert d.verdict == "healthy"
    # 50,000,001 written before: 49,999,999 free < the 50,000,000 written in the window: 1,000 x 49,999,999 /
    # 50,000,000 = 999.99998 requests credited, 0.00002 left: no whole re-using request, nothing to judge
    assert _young(0, 50_000_001.0).verdict == "healthy"
    # 50,000,000 written before, the cache full at the window's start: no credit, the finding stands
    assert _young(0, 100_000_000.0).verdict == "prefix_cache_ineffective"


def test_a_young_cache_judges_the_share_among_the_requests_re_using_a_prefix():
    # 400 tokens a request against 992: 40.3 % of all 1,000 requests found it (403.2). The window wrote
    # 49,600,000; with 24,800,000 written before, 75,200,000 were free: 75.2 / 49.6 x 1,000 > 1,000, all first
    # uses -> healthy. With 74,800,000 before, 25,200,000 free: 25.2 / 49.6 x 1,000 = 508.1 requests first uses,
    # 491.9 re-using: 403.2 / 491.9 = 82 % found it -> healthy, at severity ok
    d = _young(400, 74_800_000.0)
    assert d.verdict == "healthy"
    [f] = [f for f in d.findings if f.verdict == "prefix_cache_ineffective"]
    assert f.severity == "ok"
    assert "about 82.0 % of the requests re-using a prefix found it (508 of the window's 1,000 requests" in " ".join(
        f.evidence
    )
    # 90,000,000 written before: 10,000,000 free, 201.6 first uses, 798.4 re-using: 403.2 / 798.4 = 50.5 %, at least
    # half -> healthy; 95,000,000 before: 100.8 first uses, 899.2 re-using: 44.8 % -> the warning
    assert _young(400, 90_000_000.0).verdict == "healthy"
    assert _young(400, 95_000_000.0).verdict == "prefix_cache_ineffective"


def test_a_lower_bound_of_the_share_is_no_evidence_when_hits_reach_the_reused_length():
    # 100 prompts of 4,000 tokens, 10 of them computing 1 token: the pair (computed <= 1, prompt > 2,000) proves 10 %
    # of the requests reused at least 2,000 - 1 = 1,999 tokens; 400,000 queried, the 2,656-token cache turned over
    def case(per_request: float) -> object:
        return diagnose_target(
            signals(
                {4000: 100},
                {1: 10, 4000: 90},
                prefix_queries_increase=400_000.0,
                prefix_hits_increase=100.0 * per_request,
                requests_finished_increase=100.0,
            ),
            resolve_limits(cli={"kv_cache_tokens": 2656, "max_num_seqs": 64}),
        )

    # 1,998 tokens a request (49.95 % of the tokens hit), short of the 1,999 proven: not every request found such a
    # prefix, and 10 % < 50 % is read as the share -> the warning
    d = case(1998.0)
    assert d.verdict == "prefix_cache_ineffective"
    assert "10.0 % of the requests reused a prefix of at least 1,999 tokens each" in " ".join(d.evidence)
    # 1,999 tokens a request: as many as the length proven reused, so every request may have found it -> no warning
    assert case(1999.0).verdict == "healthy"
