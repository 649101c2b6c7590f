"""The V1 scheduler model: chunked prefill, running-first order, preemption, max_num_seqs, sink."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvpilot.engine import Engine, EngineConfig, Request
from kvpilot.engine.workloads import poisson


def _engine(**kw):
    base = {"gpu": "h100-sxm", "model": "qwen2.5-1.5b", "max_model_len": 8192}
    base.update(kw)
    return Engine(EngineConfig(**base))


def test_prompt_longer_than_the_budget_is_chunked():
    eng = _engine(max_num_batched_tokens=2048, kv_cache_tokens=16384)
    eng.add_request(Request("a", 5000, 1))
    sizes = []
    while not eng.is_idle():
        out = eng.step()
        sizes.append(out.num_tokens)
    # 5,000 = 2,048 + 2,048 + 904; the first (and only) token comes with the last chunk
    assert sizes == [2048, 2048, 904]
    (req,) = eng.finished
    assert req.first_token_time == eng.now


def test_running_requests_are_served_before_new_prefills():
    eng = _engine(max_num_batched_tokens=256, max_num_seqs=8, kv_cache_tokens=16384)
    eng.add_request(Request("a", 100, 10))
    eng.step()  # a's prefill (100 tokens) -> first token
    eng.add_request(Request("b", 1000, 1))
    out = eng.step()
    # a's decode (1 token) first, then b's first chunk with the remaining 255 tokens
    assert out.num_tokens == 256
    assert eng.running[0].request_id == "a"
    assert eng.running[1].num_computed == 255


def test_full_pool_preempts_the_newest_request_and_admits_nobody_that_step():
    # 7 blocks of 16 tokens = 6 usable. A and B have 47-token prompts: 3 blocks each.
    eng = _engine(
        num_gpu_blocks=7,
        block_size=16,
        max_model_len=96,
        max_num_batched_tokens=256,
        max_num_seqs=4,
        enable_prefix_caching=False,
    )
    a, b, c = Request("a", 47, 40), Request("b", 47, 40), Request("c", 16, 2)
    eng.add_request(a)
    eng.add_request(b)
    eng.step()  # both prefilled (47 tokens each), one token sampled each -> 48 tokens
    assert eng.pool.num_free == 0
    eng.step()  # decode: token 48 fits the 3rd block (48 = 3 x 16) -> 49 tokens each
    eng.add_request(c)  # c would fit in a freed block
    out = eng.step()  # a needs a 4th block: none free -> preempt b (the newest)
    assert out.preemptions == 1
    assert [r.request_id for r in eng.running] == ["a"]
    assert [r.request_id for r in eng.waiting] == ["b", "c"]  # b at the front
    assert b.num_computed == 0
    assert b.blocks == []
    assert b.num_output == 2
    assert out.num_scheduled == 1  # nobody admitted in a step that preempted
    assert eng.pool.num_free == 6 - 4  # b's 3 blocks returned, a took one: 4 in use


def test_preempted_request_recomputes_and_rehits_its_own_blocks():
    eng = _engine(
        num_gpu_blocks=7,
        block_size=16,
        max_model_len=96,
        max_num_batched_tokens=256,
        max_num_seqs=4,
        enable_prefix_caching=True,
    )
    a, b = Request("a", 47, 8), Request("b", 47, 8)
    eng.add_request(a)
    eng.add_request(b)
    eng.run([])
    assert eng.num_preemptions >= 1
    assert b.num_preemptions >= 1
    assert a.num_output == 8
    assert b.num_output == 8
    # b's two full prompt blocks (32 tokens) kept their hashes at the tail of the free queue;
    # its unhashed partial block went to the front and was the one a took
    assert b.num_hit == 32
    # counted once: prefix queries only for requests scheduled the first time (2 x 47 tokens)
    assert eng.prefix_queries == 94


@settings(max_examples=25, deadline=None)
@given(cap=st.integers(1, 6), rate=st.floats(1.0, 40.0), seed=st.integers(0, 10**6))
def test_max_num_seqs_is_never_exceeded(cap, rate, seed):
    eng = _engine(max_num_seqs=cap, kv_cache_tokens=8192, max_model_len=2048)
    seen = []
    eng.run(
        poisson(
            rate,
            num_requests=30,
            seed=seed,
            prompt_len={"dist": "uniform", "min": 10, "max": 600},
            output_len={"dist": "uniform", "min": 1, "max": 50},
        ),
        on_step=lambda _e, out: seen.append(out.running if out else 0),
    )
    assert max(seen) <= cap
    assert eng.num_finished == 30


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), blocks=st.integers(40, 200))
def test_prefix_hits_are_whole_blocks_and_leave_the_last_token(seed, blocks):
    eng = _engine(num_gpu_blocks=blocks, block_size=16, max_model_len=512)
    wl = poisson(
        20.0,
        num_requests=40,
        seed=seed,
        prefix_groups=3,
        prefix_len=100,
        prompt_len={"dist": "uniform", "min": 101, "max": 300},
        output_len=5,
    )
    eng.run(wl)
    for r in eng.finished:
        assert r.prefix_hit_tokens % 16 == 0
        assert r.prefix_hit_tokens <= min(100, r.prompt_len - 1)  # only the shared prefix
    pool = eng.pool
    assert pool.num_free == blocks - 1  # everything returned
    assert eng.kv_cache_usage == 0.0


class FakeSink:
    def __init__(self):
        self.steps, self.queues, self.requests = [], [], []

    def set_queue(self, **kw):
        self.queues.append(kw)

    def record_step(self, **kw):
        self.steps.append(kw)

    def record_request(self, **kw):
        self.requests.append(kw)


def test_metrics_sink_receives_consistent_values():
    sink = FakeSink()
    eng = Engine(EngineConfig(gpu="l4", kv_cache_tokens=4096, max_model_len=2048), metrics=sink)
    eng.run(poisson(5.0, num_requests=40, seed=3, prompt_len=700, output_len=60, prefix_groups=2, prefix_len=320))
    assert sum(s["generation_tokens"] for s in sink.steps) == eng.generation_tokens == 40 * 60
    assert sum(s["prompt_tokens"] for s in sink.steps) == 40 * 700
    assert sum(s["preemptions"] for s in sink.steps) == eng.num_preemptions
    assert sum(s["prefix_hits"] for s in sink.steps) == eng.prefix_hits > 0
    # one record_step per step; the gauges once per step, or once per fast-forwarded stretch (its last state)
    assert len(sink.steps) == eng.num_steps > len(sink.queues) > 0
    assert all(q["waiting"] == q["waiting_capacity"] + q["waiting_deferred"] for q in sink.queues)
    assert all(0.0 <= q["kv_cache_usage"] <= 1.0 for q in sink.queues)
    # preemptions are also reported when their request next produces output (vLLM's IterationStats)
    assert sum(s["preemptions_reported"] for s in sink.steps) == eng.num_preemptions
    # TTFT and inter-token gaps arrive per step, as vLLM observes them: one TTFT per request, 59 gaps each
    assert sum(len(s["ttfts"]) for s in sink.steps) == 40
    assert sum(n for s in sink.steps for _, n in s["itl_counts"]) == 40 * 59
    # grouped as (gap, count): a step's tokens whose previous token ended the previous step share one gap
    assert all(n >= 1 and gap > 0 for s in sink.steps for gap, n in s["itl_counts"])
    assert len(sink.requests) == 40
    for r in sink.requests:
        ttft = r["queue_time"] + r["prefill_time"]
        assert r["e2e"] >= ttft > 0
        assert abs(ttft + r["decode_time"] - r["e2e"]) < 1e-9
        assert abs(r["inference_time"] - r["prefill_time"] - r["decode_time"]) < 1e-9
        assert r["generation_tokens"] == r["max_tokens"] == 60  # output_len 60 is the request's cap
        assert r["finished_reason"] == "length"


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6), blocks=st.integers(8, 40), caching=st.booleans(), budget=st.sampled_from([16, 64, 512])
)
def test_engine_keeps_the_pool_consistent_under_preemption(seed, blocks, caching, budget):
    # tiny pools force preemptions; shared prefixes force block sharing (ref counts > 1)
    eng = _engine(
        num_gpu_blocks=blocks,
        block_size=4,
        max_model_len=4 * (blocks - 1),
        max_num_batched_tokens=budget,
        max_num_seqs=8,
        enable_prefix_caching=caching,
    )
    wl = poisson(
        50.0,
        num_requests=25,
        seed=seed,
        prefix_groups=2,
        prefix_len=6,
        prompt_len={"dist": "uniform", "min": 7, "max": 2 * (blocks - 1)},
        output_len={"dist": "uniform", "min": 1, "max": 2 * (blocks - 1)},
    )

    def check(e, _out):
        pool = e.pool
        queue = pool.free_queue()
        assert len(queue) == len(set(queue)) == pool.num_free
        holders: dict[int, int] = {}
        for r in e.running:
            assert len(r.blocks) * 4 >= r.num_computed  # the table holds the computed tokens
            for b in r.blocks:
                holders[b] = holders.get(b, 0) + 1
        for r in e.waiting:
            assert r.blocks == []
            assert r.num_computed == 0
        assert not set(holders) & set(queue)  # never both free and referenced
        ref_cnt = pool.snapshot([r.table for r in e.running])["ref_cnt"]
        for b in range(1, pool.num_blocks):
            assert ref_cnt[b] == holders.get(b, 0)
        assert e.kv_cache_usage == 1 - pool.num_free / (pool.num_blocks - 1)
        assert len(e.running) <= 8

    eng.run(wl, on_step=check)
    assert eng.num_finished == 25
    assert eng.pool.num_free == blocks - 1
