"""Request.hash_runs: one value per full block, equal exactly when the token prefixes are equal; one run per segment."""

from __future__ import annotations

from kvpilot.engine.request import Request


def _hashes(segments, n_blocks, **kw):
    prompt = sum(n for _, n in segments)
    return Request("r", prompt, 1, segments=segments, **kw).hashes(n_blocks, 16)


def test_blocks_are_equal_up_to_the_first_differing_token():
    # block size 16: A and B share tokens 0-39 ("doc"), then differ; blocks 0 (0-15) and 1 (16-31) are equal,
    # block 2 (32-47) holds doc 32-39 then a/b 0-7: different
    a = _hashes((("doc", 40), ("a", 24)), 4)
    b = _hashes((("doc", 40), ("b", 24)), 4)
    assert a[:2] == b[:2]
    assert a[2] != b[2]
    assert a[3] != b[3]
    # a prompt that continues "a" further shares A's four blocks (tokens 0-63)
    assert _hashes((("doc", 40), ("a", 30)), 4) == a
    # one long "doc" segment: blocks 0-1 equal (doc 0-31), block 2 is doc 32-47, not doc 32-39 + a 0-7
    c = _hashes((("doc", 48),), 3)
    assert c[:2] == a[:2]
    assert c[2] != a[2]
    # "doc 0-39, doc 0-23" is not "doc 0-63": a segment always starts at its key's token 0
    assert _hashes((("doc", 40), ("doc", 24)), 4)[2:] != _hashes((("doc", 64),), 4)[2:]


def test_every_value_is_distinct_within_a_request_and_extra_keys_change_all():
    h = _hashes((("doc", 40), ("a", 100)), 8)
    assert len(set(h)) == 8
    assert set(h).isdisjoint(_hashes((("doc", 40), ("a", 100)), 8, lora_id=1))
    assert set(h).isdisjoint(_hashes((("doc", 40), ("a", 100)), 8, cache_salt="s"))


def test_runs_are_the_blocks_of_each_segment_with_consecutive_values():
    # segments x (tokens 0-19) and y (20-99), then the generated tokens: blocks 0 (0-15) ends in x; 1-5 (16-95) in y;
    # 6 (96-111) and on end in the generated tokens
    r = Request("r", 100, 300, segments=(("x", 20), ("y", 80)))
    all_runs = r.hash_runs(0, 20, 16)
    assert [n for _, n in all_runs] == [1, 5, 14]
    for h, _ in all_runs:
        assert r.hashes(20, 16).count(h) == 1
    # a run's values are consecutive, 16 apart: block 1 of y ends 12 tokens into it, block 5 at 76
    (h0, _), (h1, _), _ = all_runs
    assert r.hashes(6, 16)[1:] == [h1, h1 + 16, h1 + 32, h1 + 48, h1 + 64]
    assert r.block_hash(0, 16) == h0
    # any range gives the same values as the whole
    whole = r.hashes(20, 16)
    for a, b in ((0, 1), (1, 6), (3, 9), (6, 20), (19, 20)):
        assert [v for h, n in r.hash_runs(a, b, 16) for v in range(h, h + 16 * n, 16)] == whole[a:b]
    assert Request("r", 100, 300, segments=(("x", 20), ("y", 80))).hashes(20, 16) == whole
    assert len(whole) == 20  # blocks past the prompt hash the generated tokens ("gen", request id)
    # a segment shorter than a block ends no block: it has no run
    assert [n for _, n in Request("s", 40, 1, segments=(("a", 3), ("b", 37))).hash_runs(0, 2, 16)] == [2]
