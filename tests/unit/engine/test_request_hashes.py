"""Request.ensure_hashes: one value per full block, equal exactly when the token prefixes are equal."""

from __future__ import annotations

from kvpilot.engine.request import Request


def _hashes(segments, n_blocks, **kw):
    prompt = sum(n for _, n in segments)
    return Request("r", prompt, 1, segments=segments, **kw).ensure_hashes(n_blocks, 16)


def test_blocks_are_equal_up_to_the_first_differing_token():
    # block size 16: A and B share tokens 0-39 ("doc"), then differ; blocks 0 (0-15) and 1 (16-31) are equal,
    # block 2 (32-47) holds doc 32-39 then a/b 0-7: different
    a = _hashes((("doc", 40), ("a", 24)), 4)
    b = _hashes((("doc", 40), ("b", 24)), 4)
    assert a[:2] == b[:2]
    assert a[2] != b[2] and a[3] != b[3]
    # a prompt that continues "a" further shares A's four blocks (tokens 0-63)
    assert _hashes((("doc", 40), ("a", 30)), 4) == a
    # one long "doc" segment: blocks 0-1 equal (doc 0-31), block 2 is doc 32-47, not doc 32-39 + a 0-7
    c = _hashes((("doc", 48),), 3)
    assert c[:2] == a[:2] and c[2] != a[2]
    # "doc 0-39, doc 0-23" is not "doc 0-63": a segment always starts at its key's token 0
    assert _hashes((("doc", 40), ("doc", 24)), 4)[2:] != _hashes((("doc", 64),), 4)[2:]


def test_every_value_is_distinct_within_a_request_and_extra_keys_change_all():
    h = _hashes((("doc", 40), ("a", 100)), 8)
    assert len(set(h)) == 8
    assert set(h).isdisjoint(_hashes((("doc", 40), ("a", 100)), 8, lora_id=1))
    assert set(h).isdisjoint(_hashes((("doc", 40), ("a", 100)), 8, cache_salt="s"))


def test_extending_in_steps_gives_the_values_of_one_call():
    r = Request("r", 100, 300, segments=(("x", 20), ("y", 80)))
    for n in (1, 2, 5, 6, 7, 12, 20):
        r.ensure_hashes(n, 16)
    assert r.block_hashes == Request("r", 100, 300, segments=(("x", 20), ("y", 80))).ensure_hashes(20, 16)
    assert len(r.block_hashes) == 20  # blocks past the prompt hash the generated tokens ("gen", request id)
