"""One contract, three stores: SQLite, Redis and PostgreSQL answer every Store method the same way (docs/stores.md).

Redis and PostgreSQL are the machine's (CI's) real servers, each test in its own namespace, dropped afterwards;
when one is unreachable its tests fail.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis

from hotloop.config import Settings
from hotloop.errors import InvalidParam, StoreUnavailable
from hotloop.metering.records import UsageRecord
from hotloop.stores.base import Store
from hotloop.stores.codec import encode_response
from hotloop.stores.postgres import PostgresStore
from hotloop.stores.redis import RedisStore
from hotloop.stores.retention import Retention, sweep
from hotloop.stores.url import open_store
from hotloop.wire.conversations import Conversation
from hotloop.wire.items import (
    FunctionCall,
    FunctionCallOutput,
    InputText,
    McpApprovalRequest,
    McpApprovalResponse,
    McpCall,
    McpListedTool,
    McpListTools,
    Message,
    OtherItem,
    OutputText,
)
from hotloop.wire.response import Response
from store_support import KINDS, REDIS_URL, drop_namespace, namespace, postgres_url, store_url

A, B = "owner-a", "owner-b"


def _settings(url: str, tmp_path: Path, **retention: Any) -> Settings:
    return Settings(store_url=url, data_dir=str(tmp_path), **retention)


@pytest.fixture(params=KINDS)
async def opened(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[str, str, Store]]:
    """(kind, url, store) in a fresh namespace."""
    kind: str = request.param
    ns = namespace()
    url = store_url(kind, ns, tmp_path)
    store = open_store(_settings(url, tmp_path))
    try:
        yield kind, url, store
    finally:
        await store.close()
        await drop_namespace(kind, ns)


@pytest.fixture
def store(opened: tuple[str, str, Store]) -> Store:
    return opened[2]


def user(text: str, item_id: str | None = None) -> Message:
    return Message(role="user", content=[InputText(text=text)], id=item_id)


def reply(text: str, item_id: str) -> Message:
    return Message(role="assistant", content=[OutputText(text=text)], id=item_id, status="completed")


def response(rid: str, *, parent: str | None = None, created_at: int = 1_700_000_000, text: str = "ok") -> Response:
    return Response(
        id=rid,
        created_at=created_at,
        status="completed",
        model="hotloop-sim",
        previous_response_id=parent,
        output=[reply(text, f"msg_{rid}")],
    )


def texts(items: list[Any]) -> list[str]:
    out = []
    for item in items:
        if isinstance(item, Message):
            out += [getattr(part, "text", "") for part in item.content]
        else:
            out.append(type(item).__name__)
    return out


async def test_save_get_delete_and_owner_isolation(store: Store) -> None:
    await store.save(A, response("resp_1"), [user("hi", "in_1")])
    got = await store.get(A, "resp_1")
    assert got == response("resp_1")
    assert await store.get(B, "resp_1") is None  # another key never sees it
    assert await store.get(A, "resp_missing") is None
    assert not await store.delete(B, "resp_1")
    assert await store.get(A, "resp_1") is not None
    assert await store.delete(A, "resp_1")
    assert await store.get(A, "resp_1") is None
    assert await store.input_items(A, "resp_1", after=None, limit=10, order="asc") is None
    assert await store.find_item(A, "in_1") is None
    assert not await store.delete(A, "resp_1")


async def test_save_replaces(store: Store) -> None:
    queued = response("resp_1")
    queued.status, queued.output = "queued", []
    await store.save(A, queued, [user("q", "in_1")])
    await store.save(A, response("resp_1", text="final"), [user("q", "in_1")])
    got = await store.get(A, "resp_1")
    assert got is not None and got.status == "completed" and texts(got.output) == ["final"]
    chain = await store.load_chain(A, "resp_1")
    assert chain is not None and texts(chain.context) == ["q", "final"]


async def test_input_items_paging(store: Store) -> None:
    items = [user(f"u{n}", f"in_{n}") for n in range(5)]
    await store.save(A, response("resp_1"), items)
    page = await store.input_items(A, "resp_1", after=None, limit=2, order="asc")
    assert page is not None and texts(page.items) == ["u0", "u1"] and page.has_more
    page = await store.input_items(A, "resp_1", after="in_1", limit=2, order="asc")
    assert page is not None and texts(page.items) == ["u2", "u3"] and page.has_more
    page = await store.input_items(A, "resp_1", after="in_3", limit=2, order="asc")
    assert page is not None and texts(page.items) == ["u4"] and not page.has_more
    page = await store.input_items(A, "resp_1", after=None, limit=10, order="desc")
    assert page is not None and texts(page.items) == ["u4", "u3", "u2", "u1", "u0"] and not page.has_more
    page = await store.input_items(A, "resp_1", after="in_2", limit=10, order="desc")
    assert page is not None and texts(page.items) == ["u1", "u0"]
    page = await store.input_items(A, "resp_1", after="in_unknown", limit=10, order="asc")
    assert page is not None and page.items == [] and not page.has_more
    assert await store.input_items(B, "resp_1", after=None, limit=10, order="asc") is None
    await store.save(A, response("resp_empty"), [])
    page = await store.input_items(A, "resp_empty", after=None, limit=10, order="asc")
    assert page is not None and page.items == [] and not page.has_more


async def test_load_chain_in_order(store: Store) -> None:
    call = FunctionCall(call_id="call_1", name="f", arguments="{}", id="fc_1")
    first = response("resp_1")
    first.output = [call]
    await store.save(A, first, [user("one", "in_1")])
    await store.save(A, response("resp_2", parent="resp_1", text="two-out"), [FunctionCallOutput("call_1", "42")])
    await store.save(A, response("resp_3", parent="resp_2", text="three-out"), [user("three", "in_3")])
    chain = await store.load_chain(A, "resp_3")
    assert chain is not None and chain.response.id == "resp_3"
    assert texts(chain.context) == ["one", "FunctionCall", "FunctionCallOutput", "two-out", "three", "three-out"]
    assert chain.context[1] == call
    middle = await store.load_chain(A, "resp_2")
    assert middle is not None and len(middle.context) == 4
    assert await store.load_chain(B, "resp_3") is None  # owner checked on every link
    assert await store.load_chain(A, "resp_missing") is None


async def test_mcp_items_round_trip(store: Store) -> None:
    """MCP items (protocol.md §1.10), in a response's output and a stateless client's input, come back as stored."""
    listing = McpListTools(
        id="mcpl_1",
        server_label="docs",
        tools=[McpListedTool(name="search", input_schema={"type": "object"}, annotations={"readOnlyHint": True})],
    )
    failed = McpCall(
        id="mcp_1",
        server_label="docs",
        name="search",
        arguments="{}",
        error={"type": "http_error", "code": 502, "message": "Bad Gateway"},
        status="failed",
    )
    request = McpApprovalRequest(id="mcpr_1", server_label="docs", name="delete", arguments='{"page": 3}')
    first = response("resp_1")
    first.output = [listing, failed, request]
    await store.save(A, first, [user("one", "in_1")])
    answer = McpApprovalResponse(approval_request_id="mcpr_1", approve=True, id="mcpa_1")
    ran = McpCall(
        id="mcp_2",
        server_label="docs",
        name="delete",
        arguments='{"page": 3}',
        output="deleted",
        status="completed",
        approval_request_id="mcpr_1",
    )
    second = response("resp_2", parent="resp_1")
    second.output = [ran]
    await store.save(A, second, [answer])
    assert await store.get(A, "resp_1") == first
    chain = await store.load_chain(A, "resp_2")
    assert chain is not None and chain.response == second
    assert chain.context[1:] == [listing, failed, request, answer, ran]
    assert await store.find_item(A, "mcpa_1") == answer
    assert await store.find_item(A, "mcpr_1") == request
    page = await store.input_items(A, "resp_2", after=None, limit=10, order="asc")
    assert page is not None and page.items == [answer]


async def test_load_chain_missing_or_foreign_ancestor(store: Store) -> None:
    await store.save(A, response("resp_1"), [user("one")])
    await store.save(A, response("resp_2", parent="resp_1"), [user("two")])
    await store.save(A, response("resp_3", parent="resp_2"), [user("three")])
    assert await store.delete(A, "resp_2")
    assert await store.load_chain(A, "resp_3") is None  # a hole in the chain: not continuable
    assert await store.load_chain(A, "resp_1") is not None
    await store.save(B, response("resp_b1"), [user("b")])
    await store.save(A, response("resp_a2", parent="resp_b1"), [user("a")])
    assert await store.load_chain(A, "resp_a2") is None  # an ancestor of another owner is not there for A


async def test_find_item_owner_scoped(store: Store) -> None:
    await store.save(A, response("resp_1"), [user("hello", "in_1")])
    found = await store.find_item(A, "in_1")
    assert isinstance(found, Message) and texts([found]) == ["hello"]
    output = await store.find_item(A, "msg_resp_1")
    assert isinstance(output, Message) and texts([output]) == ["ok"]
    assert await store.find_item(B, "in_1") is None
    assert await store.find_item(A, "in_nope") is None


def rec(n: int, owner: str = "o1", model: str = "m") -> UsageRecord:
    return UsageRecord(
        response_id=f"resp_{n}",
        owner=owner,
        model=model,
        status="completed",
        input_tokens=n,
        cached_tokens=1,
        output_tokens=2,
        created_at=1000.0 + n + n / 7,
        transport="http",
        timings={"total_ms": 1.5},
    )


async def test_usage_idempotent_paging_totals(store: Store) -> None:
    await store.append_usage([rec(3), rec(1), rec(2, model="x"), rec(9, owner="o2")])
    await store.append_usage([rec(1), rec(4), rec(4)])  # a retried batch (and a repeat inside one) counts once
    page = await store.usage("o1", after=None, limit=10, model=None)
    assert [r.response_id for r in page.records] == ["resp_1", "resp_2", "resp_3", "resp_4"]
    assert page.records[0] == rec(1) and not page.has_more
    totals = page.totals
    assert (totals.responses, totals.input_tokens, totals.cached_tokens, totals.output_tokens) == (4, 10, 4, 8)
    first = await store.usage("o1", after=None, limit=2, model=None)
    assert [r.response_id for r in first.records] == ["resp_1", "resp_2"] and first.has_more
    assert first.totals == totals  # totals cover every page
    rest = await store.usage("o1", after="resp_2", limit=2, model=None)
    assert [r.response_id for r in rest.records] == ["resp_3", "resp_4"] and not rest.has_more
    only_m = await store.usage("o1", after=None, limit=10, model="m")
    assert [r.response_id for r in only_m.records] == ["resp_1", "resp_3", "resp_4"]
    assert (only_m.totals.responses, only_m.totals.input_tokens) == (3, 8)
    # A cursor of another model still places the page by time.
    after_x = await store.usage("o1", after="resp_2", limit=10, model="m")
    assert [r.response_id for r in after_x.records] == ["resp_3", "resp_4"]
    assert (await store.usage("o1", after="resp_9", limit=10, model=None)).records == []  # o2's record
    assert (await store.usage("o1", after="resp_unknown", limit=10, model=None)).records == []
    other = await store.usage("o2", after=None, limit=10, model=None)
    assert [r.response_id for r in other.records] == ["resp_9"] and other.totals.responses == 1
    assert (await store.usage("o3", after=None, limit=10, model=None)).totals.responses == 0


async def bytes_of(store: Store) -> int:
    return await store.stored_bytes()


async def test_stored_bytes_follow_saves_and_deletes(store: Store) -> None:
    items = [user("x" * 300)]
    size = encode_response(response("resp_1"), items).size
    await store.save(A, response("resp_1"), items)
    assert await bytes_of(store) == size
    bigger = response("resp_1", text="y" * 500)
    await store.save(A, bigger, items)  # a replaced response counts once, at its new size
    assert await bytes_of(store) == encode_response(bigger, items).size
    await store.delete(A, "resp_1")
    assert await bytes_of(store) == 0


async def test_retention_ttl(store: Store) -> None:
    now = 1_800_000_000
    for n in range(5):
        await store.save(A, response(f"resp_old{n}", created_at=now - 3600 - n), [user("old")])
    await store.save(A, response("resp_new", created_at=now - 10), [user("new")])
    deleted = await sweep(store, Retention(ttl_s=600, batch=2), now=now)
    assert deleted == 5
    assert [await store.get(A, f"resp_old{n}") for n in range(5)] == [None] * 5
    assert await store.get(A, "resp_new") is not None
    assert await store.find_item(A, "msg_resp_old0") is None
    assert await bytes_of(store) == encode_response(response("resp_new", created_at=now - 10), [user("new")]).size


async def test_retention_byte_budget_oldest_first(store: Store) -> None:
    sizes = []
    for n in range(10):
        resp, items = response(f"resp_{n}", created_at=1_700_000_000 + n), [user(f"turn {n} " + "z" * 200)]
        sizes.append(encode_response(resp, items).size)
        await store.save(A, resp, items)
    budget = sum(sizes[-4:])  # room for the four newest
    deleted = await sweep(store, Retention(max_bytes=budget, batch=3), now=time.time())
    assert deleted == 6
    kept = [n for n in range(10) if await store.get(A, f"resp_{n}") is not None]
    assert kept == [6, 7, 8, 9]
    assert await bytes_of(store) == budget
    assert await sweep(store, Retention(max_bytes=budget), now=time.time()) == 0


async def test_concurrent_saves(store: Store) -> None:
    responses = [response(f"resp_{n}", created_at=1_700_000_000 + n) for n in range(40)]
    items = [[user(f"c{n}", f"in_c{n}")] for n in range(40)]
    await asyncio.gather(*(store.save(A, r, i) for r, i in zip(responses, items, strict=True)))
    got = await asyncio.gather(*(store.get(A, r.id) for r in responses))
    assert [g.id if g else None for g in got] == [r.id for r in responses]
    total = sum(encode_response(r, i).size for r, i in zip(responses, items, strict=True))
    assert await bytes_of(store) == total
    await asyncio.gather(*(store.delete(A, r.id) for r in responses[::2]))
    assert await bytes_of(store) == sum(
        encode_response(r, i).size for r, i in list(zip(responses, items, strict=True))[1::2]
    )


async def test_deletions_reach_other_replicas(opened: tuple[str, str, Store], tmp_path: Path) -> None:
    """A second store on the same data (another replica) hears of a DELETE and of a retention sweep."""
    kind, url, store = opened
    heard: list[str] = []
    gaps: list[float] = []
    replica = open_store(_settings(url, tmp_path, retention_ttl_s=3600.0))
    replica.start(heard.append, lambda: gaps.append(time.monotonic()))
    try:
        await _subscribed(store, heard)
        await store.save(A, response("resp_1"), [user("one")])
        await store.save(A, response("resp_old", created_at=int(time.time()) - 7200), [user("old")])
        assert await store.delete(A, "resp_1")
        deadline = time.monotonic() + 5
        while {"resp_1", "resp_old"} - set(heard):  # the replica's own sweeper expires resp_old
            assert time.monotonic() < deadline, (kind, heard)
            await asyncio.sleep(0.05)
        assert await store.get(A, "resp_old") is None
        assert gaps == []  # the first subscription is no gap
    finally:
        await replica.close()


async def _subscribed(store: Store, heard: list[str], timeout: float = 10.0) -> None:
    """Until a replica's deletion feed is subscribed: probes saved and deleted on `store`, one at a time, until the
    replica hears one (a deletion before its subscription is not heard)."""
    deadline = time.monotonic() + timeout
    for n in itertools.count():
        probe = f"resp_probe_{n}"
        await store.save(A, response(probe, created_at=int(time.time())), [user("probe")])  # not swept: new
        assert await store.delete(A, probe)
        waited = time.monotonic() + 1.0  # more than SQLite's poll interval
        while probe not in heard and time.monotonic() < waited:
            await asyncio.sleep(0.02)
        if any(name.startswith("resp_probe_") for name in heard):
            return
        assert time.monotonic() < deadline, "the replica never heard a deletion"


async def _until(done: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def _kill_feed(kind: str, replica: Store, before: set[int]) -> None:
    """Drop the replica's deletion feed connection on the server side (as a restarted server or a network fault
    would): its Redis pub/sub client (those that were not there before it started), its PostgreSQL LISTEN one."""
    if isinstance(replica, RedisStore):
        admin = Redis.from_url(REDIS_URL)
        try:
            ours = {int(c["id"]) for c in await admin.client_list(_type="pubsub")} - before
            assert ours, "the replica has no pub/sub connection"
            for client_id in ours:
                await admin.client_kill_filter(_id=str(client_id))
        finally:
            await admin.aclose()
    else:
        assert isinstance(replica, PostgresStore)
        conn = await asyncpg.connect(postgres_url(), timeout=5)
        try:
            killed = await conn.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
                replica.listener_name,
            )
            assert len(killed) == 1, (kind, killed)
        finally:
            await conn.close()


async def _pubsub_ids() -> set[int]:
    admin = Redis.from_url(REDIS_URL)
    try:
        return {int(c["id"]) for c in await admin.client_list(_type="pubsub")}
    finally:
        await admin.aclose()


@pytest.mark.parametrize("kind", ["redis", "postgresql"])
async def test_deletion_feed_gap_is_reported(kind: str, tmp_path: Path) -> None:
    """A feed connection that drops may miss deletions: once it is subscribed again the store calls on_gap (never
    for the first subscription), and deletions are heard again."""
    ns = namespace()
    url = store_url(kind, ns, tmp_path)
    store, replica = open_store(_settings(url, tmp_path)), open_store(_settings(url, tmp_path))
    heard: list[str] = []
    gaps: list[float] = []
    before = await _pubsub_ids() if kind == "redis" else set()
    replica.start(heard.append, lambda: gaps.append(time.monotonic()))
    try:
        for n in range(3):
            await store.save(A, response(f"resp_{n}"), [user(f"turn {n}")])
        assert await store.delete(A, "resp_0")
        await _until(lambda: "resp_0" in heard, f"{kind}: the first subscription hears deletions")
        assert gaps == []

        await _kill_feed(kind, replica, before)
        killed_at = time.monotonic()
        assert await store.delete(A, "resp_1")  # while the feed is down (or just back): may be missed
        await _until(lambda: gaps, f"{kind}: no gap reported after the feed came back")
        assert gaps[0] > killed_at
        assert await store.delete(A, "resp_2")  # the feed works again (on_gap ran once it was subscribed)
        await _until(lambda: "resp_2" in heard, f"{kind}: deletions are heard after the gap")
        assert len(gaps) == 1
    finally:
        await replica.close()
        await store.close()
        await drop_namespace(kind, ns)


async def test_bad_store_url_refuses(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown scheme 'mysql'"):
        open_store(_settings("mysql://x/y", tmp_path))
    with pytest.raises(ValueError, match="schema"):
        open_store(_settings("postgresql://root@127.0.0.1/test?schema=Bad-Name", tmp_path))


@pytest.mark.parametrize("kind", ["redis", "postgresql"])
async def test_unreachable_is_store_unavailable(kind: str, tmp_path: Path) -> None:
    from process_support import free_port

    url = store_url(kind, namespace(), tmp_path, host_port=("127.0.0.1", free_port()))  # nothing listens there
    store = open_store(_settings(url, tmp_path))
    try:
        with pytest.raises(StoreUnavailable):
            await store.get(A, "resp_1")
        with pytest.raises(StoreUnavailable):
            await store.save(A, response("resp_1"), [])
        with pytest.raises(StoreUnavailable):
            await store.load_chain(A, "resp_1")
        with pytest.raises(StoreUnavailable):
            await store.add_conversation_items(A, "conv_1", [user("x")])
        with pytest.raises(StoreUnavailable):
            await store.load_conversation(A, "conv_1")
    finally:
        await store.close()


def _record_commands(store: RedisStore) -> list[Any]:
    """From now on, the name of every command the store sends to Redis (one per round trip)."""
    commands: list[Any] = []
    send = store.client.execute_command

    async def counted(*args: Any, **options: Any) -> Any:
        commands.append(args[0])
        return await send(*args, **options)

    store.client.execute_command = counted  # type: ignore[method-assign]
    return commands


async def test_redis_chain_is_one_round_trip(tmp_path: Path) -> None:
    """However long the chain, loading it is one command to Redis (the Lua script walks the parent links)."""

    ns = namespace()
    store = open_store(_settings(store_url("redis", ns, tmp_path), tmp_path))
    assert isinstance(store, RedisStore)
    try:
        parent = None
        for n in range(30):
            await store.save(A, response(f"resp_{n}", parent=parent), [user(f"turn {n}")])
            parent = f"resp_{n}"
        await store.load_chain(A, "resp_0")  # the script is loaded (EVALSHA then EVAL happen once)
        commands = _record_commands(store)
        chain = await store.load_chain(A, "resp_29")
        assert chain is not None and len(chain.context) == 60
        assert commands == ["EVALSHA"]
    finally:
        await store.close()
        await drop_namespace("redis", ns)


# -- conversations ------------------------------------------------------------------------------------------------


def conversation(cid: str = "conv_1", **metadata: str) -> Conversation:
    return Conversation(id=cid, created_at=1_700_000_000, metadata=metadata)


async def page_texts(store: Store, cid: str, after: str | None, limit: int, order: Any) -> tuple[list[str], bool]:
    page = await store.conversation_items(A, cid, after=after, limit=limit, order=order)
    assert page is not None
    return texts(page.items), page.has_more


async def test_conversation_crud_and_owner_isolation(store: Store) -> None:
    await store.create_conversation(A, conversation(topic="demo"), [user("one", "msg_1"), reply("two", "msg_2")])
    assert await store.get_conversation(A, "conv_1") == conversation(topic="demo")
    assert await store.get_conversation(B, "conv_1") is None  # another key never sees it
    assert await store.get_conversation(A, "conv_missing") is None
    assert await store.update_conversation(B, "conv_1", {"x": "y"}) is None
    assert await store.add_conversation_items(B, "conv_1", [user("intruder", "msg_x")]) is False
    assert await store.conversation_items(B, "conv_1", after=None, limit=10, order="asc") is None
    assert await store.conversation_item(B, "conv_1", "msg_1") is None
    assert await store.delete_conversation_item(B, "conv_1", "msg_1") is None
    assert await store.load_conversation(B, "conv_1") is None
    assert not await store.delete_conversation(B, "conv_1")
    updated = await store.update_conversation(A, "conv_1", {"topic": "changed", "k": "v"})
    assert updated == conversation(topic="changed", k="v")
    assert await store.get_conversation(A, "conv_1") == updated
    assert await store.update_conversation(A, "conv_1", {}) == conversation()
    loaded = await store.load_conversation(A, "conv_1")
    assert loaded is not None and texts(loaded) == ["one", "two"] and loaded[1] == reply("two", "msg_2")
    assert await store.delete_conversation(A, "conv_1")
    assert await store.get_conversation(A, "conv_1") is None
    assert await store.load_conversation(A, "conv_1") is None
    assert await store.conversation_item(A, "conv_1", "msg_1") is None
    assert await store.add_conversation_items(A, "conv_1", [user("late")]) is False
    assert not await store.delete_conversation(A, "conv_1")
    # The same item ids in a new conversation: its own items, nothing left over from the deleted one.
    await store.create_conversation(A, conversation("conv_2"), [user("fresh", "msg_1")])
    assert texts(await store.load_conversation(A, "conv_2") or []) == ["fresh"]
    await store.create_conversation(A, conversation("conv_empty"), [])
    assert await store.load_conversation(A, "conv_empty") == []
    assert await page_texts(store, "conv_empty", None, 10, "desc") == ([], False)


async def test_conversation_items_paging(store: Store) -> None:
    await store.create_conversation(A, conversation(), [user(f"u{n}", f"msg_{n}") for n in range(3)])
    assert await store.add_conversation_items(A, "conv_1", [user(f"u{n}", f"msg_{n}") for n in range(3, 5)])
    assert await page_texts(store, "conv_1", None, 2, "asc") == (["u0", "u1"], True)
    assert await page_texts(store, "conv_1", "msg_1", 2, "asc") == (["u2", "u3"], True)
    assert await page_texts(store, "conv_1", "msg_3", 2, "asc") == (["u4"], False)
    assert await page_texts(store, "conv_1", "msg_4", 2, "asc") == ([], False)
    assert await page_texts(store, "conv_1", None, 10, "desc") == (["u4", "u3", "u2", "u1", "u0"], False)
    assert await page_texts(store, "conv_1", None, 5, "desc") == (["u4", "u3", "u2", "u1", "u0"], False)
    assert await page_texts(store, "conv_1", "msg_3", 2, "desc") == (["u2", "u1"], True)
    assert await page_texts(store, "conv_1", "msg_unknown", 10, "asc") == ([], False)
    assert await page_texts(store, "conv_1", "msg_unknown", 10, "desc") == ([], False)
    # An item without an id (a type hotloop keeps verbatim) is stored and listed, just not addressable.
    other = OtherItem(raw={"type": "web_search_call", "status": "completed"})
    assert await store.add_conversation_items(A, "conv_1", [other])
    page = await store.conversation_items(A, "conv_1", after="msg_4", limit=10, order="asc")
    assert page is not None and page.items == [other]


async def test_conversation_item_get_and_delete(store: Store) -> None:
    await store.create_conversation(A, conversation(), [user(f"u{n}", f"msg_{n}") for n in range(4)])
    found = await store.conversation_item(A, "conv_1", "msg_2")
    assert found == user("u2", "msg_2")
    assert await store.conversation_item(A, "conv_1", "msg_nope") is None
    assert await store.delete_conversation_item(A, "conv_1", "msg_2") is True
    assert await store.delete_conversation_item(A, "conv_1", "msg_2") is False
    assert await store.delete_conversation_item(A, "conv_missing", "msg_1") is None
    assert await store.conversation_item(A, "conv_1", "msg_2") is None
    assert await page_texts(store, "conv_1", "msg_1", 10, "asc") == (["u3"], False)
    assert await page_texts(store, "conv_1", "msg_2", 10, "asc") == ([], False)  # a deleted cursor: unknown
    assert await store.delete_conversation_item(A, "conv_1", "msg_3") is True  # the last one
    assert await store.add_conversation_items(A, "conv_1", [user("again", "msg_2")])  # its id is free again
    assert texts(await store.load_conversation(A, "conv_1") or []) == ["u0", "u1", "again"]


async def test_conversation_item_ids_unique(store: Store) -> None:
    await store.create_conversation(A, conversation(), [user("one", "msg_1")])
    with pytest.raises(InvalidParam, match="msg_1") as raised:
        await store.add_conversation_items(A, "conv_1", [user("two", "msg_2"), user("dup", "msg_1")])
    assert raised.value.param == "items"
    with pytest.raises(InvalidParam, match="msg_3"):
        await store.add_conversation_items(A, "conv_1", [user("a", "msg_3"), user("b", "msg_3")])
    with pytest.raises(InvalidParam, match="msg_9"):
        await store.create_conversation(A, conversation("conv_2"), [user("a", "msg_9"), user("b", "msg_9")])
    assert await store.get_conversation(A, "conv_2") is None  # a refused call stores nothing
    assert texts(await store.load_conversation(A, "conv_1") or []) == ["one"]
    assert await store.add_conversation_items(A, "conv_1", [user("two", "msg_2")])  # msg_2 was never stored
    assert texts(await store.load_conversation(A, "conv_1") or []) == ["one", "two"]


async def test_conversation_concurrent_appends(store: Store) -> None:
    """20 appends at once, two items each: every item lands, each call's pair stays together, in some order."""
    await store.create_conversation(A, conversation(), [user("start", "msg_start")])
    calls = [[user(f"{n}a", f"msg_{n}a"), user(f"{n}b", f"msg_{n}b")] for n in range(20)]
    results = await asyncio.gather(*(store.add_conversation_items(A, "conv_1", items) for items in calls))
    assert results == [True] * 20
    loaded = texts(await store.load_conversation(A, "conv_1") or [])
    assert loaded[0] == "start" and len(loaded) == 41
    pairs = [loaded[k : k + 2] for k in range(1, 41, 2)]
    assert all(first[:-1] == second[:-1] and (first[-1], second[-1]) == ("a", "b") for first, second in pairs)
    assert sorted(int(first[:-1]) for first, _ in pairs) == list(range(20))
    page = await store.conversation_items(A, "conv_1", after=None, limit=100, order="asc")
    assert page is not None and texts(page.items) == loaded  # paging sees the same single order


async def test_redis_conversation_load_is_one_round_trip(tmp_path: Path) -> None:

    ns = namespace()
    store = open_store(_settings(store_url("redis", ns, tmp_path), tmp_path))
    assert isinstance(store, RedisStore)
    try:
        await store.create_conversation(A, conversation(), [user(f"u{n}", f"msg_{n}") for n in range(20)])
        await store.load_conversation(A, "conv_1")  # the script is loaded
        commands = _record_commands(store)
        assert len(await store.load_conversation(A, "conv_1") or []) == 20
        assert commands == ["EVALSHA"]
    finally:
        await store.close()
        await drop_namespace("redis", ns)


async def test_sqlite_group_commit_fails_a_bad_write_alone(tmp_path: Path) -> None:
    """Writes that queue up while the writer is busy commit together; a write that fails in such a batch fails
    alone (the batch runs again write by write) and the others are kept."""
    import sqlite3
    import threading

    from hotloop.stores.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "group.db")
    gate = threading.Event()
    batches: list[int] = []
    try:
        holding = threading.Event()

        def hold(conn: sqlite3.Connection) -> None:
            holding.set()
            gate.wait(10)

        blocker = asyncio.ensure_future(store._write(hold))
        assert await asyncio.to_thread(holding.wait, 10)  # the writer runs the blocker
        saves = [store.save(A, response(f"resp_{n}"), [user(f"u{n}")]) for n in range(20)]

        def bad(conn: sqlite3.Connection) -> None:
            batches.append(conn.total_changes)
            conn.execute("INSERT INTO no_such_table VALUES (1)")

        tasks = [asyncio.ensure_future(job) for job in [*saves[:10], store._write(bad), *saves[10:]]]
        await _until(lambda: store._writes.qsize() == len(tasks), "the writes queue behind the blocker")
        gate.set()
        outcomes = await asyncio.gather(blocker, *tasks, return_exceptions=True)
    finally:
        await store.close()
    assert isinstance(outcomes[11], StoreUnavailable) and "no_such_table" in str(outcomes[11])
    assert [outcome for n, outcome in enumerate(outcomes[1:]) if n != 10] == [None] * 20
    assert len(batches) == 2  # tried in the batch, then alone
    reopened = SQLiteStore(tmp_path / "group.db")
    try:
        got = await asyncio.gather(*(reopened.get(A, f"resp_{n}") for n in range(20)))
    finally:
        await reopened.close()
    assert all(g is not None for g in got)
