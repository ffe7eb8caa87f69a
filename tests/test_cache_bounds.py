"""Byte-bounded caches (docs/reliability.md): the chain cache, every WebSocket connection cache together and the
token cache stay within their bounds, evict least recently used first, and show it in /metrics."""

from __future__ import annotations

import weakref
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import RunningServer, start_server
from hotloop.pipeline.state.chain_cache import ChainCache
from hotloop.pipeline.state.context import ChainState, Context, item_nbytes
from hotloop.pipeline.state.session import Session
from hotloop.pipeline.state.state_lru import STATE_OVERHEAD, StateLRU
from hotloop.wire.items import InputText, Message, OutputText
from hotloop.wire.request import CreateRequest
from hotloop.wire.response import Response
from metrics_support import scrape
from process_support import eventually
from wsutil import WS, final

KIB = 1024


def _message(text: str, role: str = "user") -> Message:
    part = OutputText(text=text) if role == "assistant" else InputText(text=text)
    return Message(role=role, content=[part])  # type: ignore[arg-type]


def _state(response_id: str, context: Context, *, owner: str = "", stored: bool = True) -> ChainState:
    return ChainState(
        response=Response(id=response_id, created_at=0, model="hotloop-sim", status="completed"),
        context=context,
        call_ids=frozenset(),
        model=None,  # type: ignore[arg-type]  # not read by the caches
        request=CreateRequest(),
        owner=owner,
        stored_chain=stored,
    )


def _chain(length: int, size: int) -> list[ChainState]:
    """One conversation of `length` turns, each adding a user message and an answer of about `size` bytes."""
    context, states = Context(), []
    for turn in range(length):
        context = context.extend([_message("u" * size), _message("a" * size, "assistant")])
        states.append(_state(f"resp_{turn}", context))
    return states


# -- sizes ------------------------------------------------------------------------------------------------------


def test_context_bytes_grow_with_new_items_only() -> None:
    first = [_message("hello " * 100), _message("answer " * 50, "assistant")]
    base = Context().extend(first)
    assert base.nbytes == sum(item_nbytes(item) for item in first)
    assert base.added_bytes == base.nbytes
    more = [_message("x" * 5000)]
    child = base.extend(more)
    assert child.nbytes == base.nbytes + item_nbytes(more[0])
    assert child.added_bytes == item_nbytes(more[0])
    # The running totals are shared with the list: the parent's items are not measured again.
    assert child.storage is base.storage and len(child._sizes) == len(child) + 1
    # A fork from the older view copies the list and its totals; the sibling is measured on its own.
    fork = base.extend([_message("y" * 10)])
    assert fork.storage is not base.storage
    assert fork.nbytes == base.nbytes + item_nbytes(_message("y" * 10))
    assert child.nbytes == base.nbytes + item_nbytes(more[0])


def test_a_chain_is_charged_once_not_per_turn() -> None:
    states = _chain(50, 1000)
    lru: StateLRU[str] = StateLRU(1 << 30)
    for state in states:
        lru.put(state.response.id, state)
    whole = states[-1].context.storage_bytes
    # Fifty cached turns share one list: the charge is the list once plus each state's own part.
    assert lru.bytes == whole + sum(STATE_OVERHEAD + state.context.added_bytes for state in states)
    assert lru.bytes < 3 * whole
    for state in states:
        lru.pop(state.response.id)
    assert lru.bytes == 0 and len(lru) == 0


# -- StateLRU ---------------------------------------------------------------------------------------------------


def test_bytes_never_exceed_the_bound_and_lru_goes_first() -> None:
    bound = 64 * KIB
    lru: StateLRU[str] = StateLRU(bound)
    for index in range(60):
        assert lru.put(f"r{index}", _chain(1, 1000 + 37 * index)[0])
        lru.touch("r0")  # the oldest one stays in use
        assert lru.bytes <= bound
    assert "r0" in lru  # recently used: never evicted
    assert "r1" not in lru  # least recently used: evicted first
    assert "r59" in lru and "r58" in lru
    assert lru.evictions == 60 - len(lru) > 0


def test_a_state_bigger_than_the_bound_is_not_kept() -> None:
    lru: StateLRU[str] = StateLRU(8 * KIB)
    small = _chain(1, 100)[0]
    assert lru.put("small", small)
    assert not lru.put("big", _chain(1, 20_000)[0])
    assert "big" not in lru and "small" in lru
    assert lru.evictions == 1 and lru.bytes <= 8 * KIB


def test_entry_bound_and_eviction_callback() -> None:
    told: list[Hashable] = []

    class Owner:
        def evicted(self, key: Hashable) -> None:
            told.append(key)

    owner = Owner()
    lru: StateLRU[str] = StateLRU(1 << 30, max_entries=2)
    for key in ("a", "b", "c"):
        lru.put(key, _chain(1, 10)[0], weakref.WeakMethod(owner.evicted))
    assert told == ["a"] and len(lru) == 2
    lru.pop("b")  # an explicit removal is not an eviction
    assert told == ["a"] and lru.evictions == 1
    del owner  # the callback is weak: a dead owner is simply not told
    lru.put("d", _chain(1, 10)[0])
    lru.put("e", _chain(1, 10)[0])
    assert told == ["a"] and len(lru) == 2


def test_chain_cache_is_bounded_in_bytes_and_answers_its_owner_only() -> None:
    cache = ChainCache(max_entries=1000, max_bytes=30 * KIB)
    for index in range(20):
        state = _state(f"resp_{index}", Context().extend([_message("z" * 4000)]), owner="alice")
        cache.put(state)
        assert cache.bytes <= 30 * KIB
    assert cache.evictions > 0 and len(cache) < 20
    assert cache.get("resp_19", "alice") is not None
    assert cache.get("resp_19", "bob") is None
    assert cache.get("resp_0", "alice") is None  # evicted: the store answers it
    cache.put(_state("unstored", Context(), stored=False))
    assert cache.get("unstored", "alice") is None
    for index in range(20):
        cache.forget(f"resp_{index}")
    assert cache.bytes == 0


def test_connection_caches_share_one_budget() -> None:
    budget: StateLRU[Any] = StateLRU(40 * KIB)
    first, second = Session("", caching=True, budget=budget), Session("", caching=True, budget=budget)
    first.remember(None, _state("resp_a", Context().extend([_message("a" * 6000)])))
    first.remember("side", _state("resp_b", Context().extend([_message("b" * 6000)])))
    assert first.cached("resp_a") is not None  # used: resp_b is now the least recent
    second.remember(None, _state("resp_c", Context().extend([_message("c" * 6000)])))
    assert budget.bytes <= 40 * KIB
    assert first.cached("resp_b") is None and first.latest("side") is None  # evicted from the other connection
    assert first.cached("resp_a") is not None and second.cached("resp_c") is not None
    second.clear()  # a closed connection frees its share
    first.evict(None, "resp_a")  # a failed continuation drops its parent (§3.8.3)
    assert budget.bytes == 0 and len(budget) == 0


# -- a real server: eviction semantics and metrics ----------------------------------------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(
        tmp_path_factory.mktemp("small"),
        models=["hotloop-sim"],
        connection_cache_bytes=120 * KIB,
        chain_cache_bytes=120 * KIB,
        token_cache_bytes=16 * KIB,
    )
    yield running
    running.stop()


def _fill(ws: WS, count: int, size: int, **body: Any) -> list[str]:
    return [final(ws.turn(input="w" * size + str(index), **body))["id"] for index in range(count)]


def test_evicted_lane_falls_back_to_the_store_or_is_not_found(small: RunningServer) -> None:
    before = scrape(small)
    with WS(small.ws_url) as old, WS(small.ws_url) as hog:
        unstored = final(old.turn(input="keep me" * 2000, store=False))["id"]
        stored = final(old.turn(input="me too" * 2000, store=True, stream_id="s"))["id"]
        for lane in ("x", "y", "z", "v", "w", None):  # 6 lanes x ~50 KiB on another connection push both out
            _fill(hog, 1, 12_000, store=False, stream_id=lane)
        after = scrape(small)
        assert after.value("hotloop_cache_entries", cache="connection") >= 2
        assert after.value("hotloop_cache_bytes", cache="connection") <= 120 * KIB
        assert after.value("hotloop_cache_max_bytes", cache="connection") == 120 * KIB
        evicted = after.value("hotloop_cache_evictions_total", cache="connection")
        assert evicted - before.value("hotloop_cache_evictions_total", cache="connection") >= 2
        # §3.8.2: a store:false miss is final; a stored parent is hydrated from the store.
        frame = old.error(input="next", previous_response_id=unstored)
        assert frame["error"]["code"] == "previous_response_not_found"
        assert final(old.turn(input="next", previous_response_id=stored, stream_id="s"))["status"] == "completed"
        assert after.value("hotloop_cache_entries", cache="connection") <= 6


def test_chain_and_token_caches_stay_within_bounds(small: RunningServer) -> None:
    before = scrape(small)
    with small.http() as http:
        ids = []
        for index in range(10):
            reply = http.post("/responses", json={"input": f"{index} " + "h" * 8_000})  # ~35 KiB a chain
            assert reply.status_code == 200, reply.text
            ids.append(reply.json()["id"])
            assert scrape(small).value("hotloop_cache_bytes", cache="chain") <= 120 * KIB
        assert 2 <= scrape(small).value("hotloop_cache_entries", cache="chain") < 10
        # The oldest chain was evicted from memory and still continues, from the store.
        reply = http.post("/responses", json={"input": "more", "previous_response_id": ids[0]})
        assert reply.status_code == 200, reply.text
        history = [{"role": "user", "content": f"message {n} " + "t" * 2000} for n in range(12)]
        assert http.post("/responses", json={"input": history}).status_code == 200
    after = scrape(small)
    for cache, bound in (("chain", 120 * KIB), ("tokens", 16 * KIB)):
        assert 0 < after.value("hotloop_cache_bytes", cache=cache) <= bound
        assert after.value("hotloop_cache_evictions_total", cache=cache) > before.value(
            "hotloop_cache_evictions_total", cache=cache
        )
        assert after.types["hotloop_cache_evictions"] == "counter"


def test_closed_connection_frees_its_cache(tmp_path: Path) -> None:
    running = start_server(tmp_path, models=["hotloop-sim"])
    try:
        service = running.service
        with WS(running.ws_url) as ws:
            final(ws.turn(input="x" * 10_000, store=False))
            final(ws.turn(input="y", store=False, stream_id="lane"))
            assert service.connection_states.bytes > 10_000 and len(service.connection_states) == 2
        assert eventually(lambda: service.connection_states.bytes == 0 and len(service.connection_states) == 0)
    finally:
        running.stop()
