"""The byte-bounded LRU under the token, safety-scan, resend and encoded-prompt caches (lru.py)."""

from __future__ import annotations

import pytest

from hotloop.lru import ByteLRU

pytestmark = pytest.mark.fast  # the fast tier: `make unit-fast`


def _lru(max_bytes: int) -> ByteLRU[str, str]:
    return ByteLRU(max_bytes, len)


def test_the_least_recently_used_goes_first_and_the_bound_holds() -> None:
    lru = _lru(10)
    lru.put("a", "aaaa")
    lru.put("b", "bbbb")
    assert lru.get("a") == "aaaa"  # now the most recent: b goes first
    lru.put("c", "cccc")
    assert "b" not in lru and list(lru.values()) == ["aaaa", "cccc"]
    assert (lru.bytes, lru.evictions, len(lru)) == (8, 1, 2)


def test_peek_leaves_the_order_as_it_is() -> None:
    lru = _lru(10)
    lru.put("a", "aaaa")
    lru.put("b", "bbbb")
    assert lru.peek("a") == "aaaa" and lru.peek("x") is None
    lru.put("c", "cccc")
    assert "a" not in lru and "b" in lru


def test_put_replaces_and_add_keeps_what_a_key_holds() -> None:
    lru = _lru(10)
    lru.put("a", "aaaa")
    lru.put("b", "bb")
    lru.put("a", "a")  # replaced, and the most recent now
    assert lru.peek("a") == "a" and lru.bytes == 3 and list(lru.values()) == ["bb", "a"]
    lru.add("b", "something else")  # a content-addressed key: its value never changes
    assert lru.peek("b") == "bb" and lru.bytes == 3 and list(lru.values()) == ["bb", "a"]


def test_a_value_bigger_than_the_bound_is_not_kept() -> None:
    lru = _lru(4)
    lru.put("a", "aaa")
    lru.put("a", "too long")  # what the key held stays
    lru.add("b", "too long")
    assert lru.peek("a") == "aaa" and "b" not in lru and lru.bytes == 3 and lru.evictions == 0
    off = _lru(0)
    off.put("a", "x")
    assert len(off) == 0 and off.bytes == 0
