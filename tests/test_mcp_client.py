"""hotloop.mcp.Clients against real MCP servers from the SDK (mcp_support.py): listing every page, calling, errors
of every kind as results, timeouts and cancellation, sessions reused by key and closed when idle, the allowlist
before any connection and on every redirect, both transports. What concerns streamable HTTP runs with both of its
clients (`kind`: the lean one, the SDK's); legacy SSE always has the SDK's."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import pytest

from hotloop.mcp import Clients, Endpoint, ListFailed, NotAllowed
from hotloop.mcp.clients import ClientKind
from mcp_support import PAGED_TOOLS, TOOLS, McpServers

CAP = 1000  # max_output_bytes of the tests' clients
# (client, transport) of the tests that run on either transport
EVERY = [("lean", "streamable_http"), ("sdk", "streamable_http"), ("sdk", "sse")]


def under(*prefixes: str) -> Callable[[str], bool]:
    return lambda url: url.startswith(prefixes)


@pytest.fixture(params=["lean", "sdk"])
def kind(request: pytest.FixtureRequest) -> ClientKind:
    kind: ClientKind = request.param
    return kind


def make(kind: ClientKind, **settings: Any) -> Clients:
    return Clients(client=kind, **settings)


def streams(kind: ClientKind) -> int:
    """The event streams one streamable HTTP session holds open: the SDK's GET stream; the lean client opens none."""
    return 1 if kind == "sdk" else 0


@pytest.fixture
async def clients(mcp_server: McpServers, kind: ClientKind) -> AsyncIterator[Clients]:
    pool = make(kind, allowed=under(mcp_server.base + "/"), call_timeout_s=5, list_timeout_s=5, max_output_bytes=CAP)
    yield pool
    await pool.close()


@pytest.fixture
async def sse_clients(mcp_server: McpServers) -> AsyncIterator[Clients]:
    pool = Clients(allowed=under(mcp_server.base + "/"), call_timeout_s=5, list_timeout_s=5, max_output_bytes=CAP)
    yield pool
    await pool.close()


@pytest.fixture
def http(mcp_server: McpServers) -> Endpoint:
    return Endpoint(mcp_server.url("/mcp"))


@pytest.fixture
def sse(mcp_server: McpServers) -> Endpoint:
    return Endpoint(mcp_server.url("/sse"), transport="sse")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_lists_tools_as_plain_structs(clients: Clients, http: Endpoint, mcp_server: McpServers) -> None:
    tools = await clients.list_tools("alice", http)
    assert [tool.name for tool in tools] == list(TOOLS)
    add = tools[0]
    assert add.description == "Add two integers."
    assert add.annotations == {"title": "Addition", "readOnlyHint": True}
    assert add.input_schema["required"] == ["a", "b"]
    assert add.input_schema["properties"]["a"]["type"] == "integer"
    assert tools[1].annotations is None
    assert msgspec.json.decode(msgspec.json.encode(tools)) == msgspec.to_builtins(tools)  # nothing but plain data


async def test_a_key_reuses_its_session(
    clients: Clients, http: Endpoint, mcp_server: McpServers, kind: ClientKind
) -> None:
    first = await clients.list_tools("alice", http)
    assert await clients.list_tools("alice", http) == first
    assert (await clients.call_tool("alice", http, "add", {"a": 2, "b": 3})).output == "5"
    assert (await clients.call_tool("alice", http, "echo", {"text": "héllo"})).output == "héllo"
    counts = mcp_server.counts
    assert counts.sessions == 1 and counts.method("tools/list") == 2 and counts.method("tools/call") == 2
    assert await counts.until(lambda c: c.active == streams(kind)) and counts.requests["GET /mcp"] == streams(kind)
    assert clients.stats.sessions == 1


async def test_a_call_sends_no_listing(clients: Clients, http: Endpoint, mcp_server: McpServers) -> None:
    # The SDK's ClientSession.call_tool would list the tools first on a session that has not (output schemas).
    assert (await clients.call_tool("alice", http, "add", {"a": 1, "b": 1})).output == "2"
    assert mcp_server.counts.method("tools/list") == 0 and mcp_server.counts.method("tools/call") == 1


async def test_owners_and_headers_get_sessions_of_their_own(clients: Clients, mcp_server: McpServers) -> None:
    one = Endpoint(mcp_server.url("/mcp"), (("Authorization", "Bearer one"),))
    two = Endpoint(mcp_server.url("/mcp"), (("Authorization", "Bearer two"),))
    await clients.list_tools("alice", one)
    await clients.list_tools("bob", one)
    await clients.list_tools("alice", two)
    await clients.call_tool("bob", one, "add", {"a": 1, "b": 2})
    assert mcp_server.counts.sessions == 3
    assert mcp_server.counts.header_values("authorization") == {"Bearer one", "Bearer two"}


async def test_lists_every_page(clients: Clients, mcp_server: McpServers) -> None:
    paged = Endpoint(mcp_server.url("/paged/mcp"))
    tools = await clients.list_tools("alice", paged)
    assert [tool.name for tool in tools] == PAGED_TOOLS
    assert tools[0].description == "Tool tool0" and tools[0].input_schema == {"type": "object", "properties": {}}
    assert mcp_server.counts.method("tools/list") == 3  # pages of 2, 2 and 1
    assert (await clients.call_tool("alice", paged, "tool3", {})).output == "called tool3"


async def test_a_json_rpc_error_is_a_protocol_error(clients: Clients, mcp_server: McpServers) -> None:
    result = await clients.call_tool("alice", Endpoint(mcp_server.url("/paged/mcp")), "nope", {})
    assert result.error is not None and result.error.type == "mcp_protocol_error"
    assert (result.error.code, result.error.message) == (-32602, "Unknown tool: nope")


async def test_a_failing_tool_is_an_execution_error(clients: Clients, http: Endpoint) -> None:
    result = await clients.call_tool("alice", http, "fail", {"message": "no luck"})
    assert result.output is None and result.error is not None
    assert result.error.type == "mcp_tool_execution_error"
    assert result.error.content == [{"type": "text", "text": "Error executing tool fail: no luck"}]
    unknown = await clients.call_tool("alice", http, "nope", {})
    assert unknown.error is not None and unknown.error.type == "mcp_tool_execution_error"
    assert clients.stats.failures == {"mcp_tool_execution_error": 2}


async def test_output_is_capped_in_utf8_bytes(clients: Clients, http: Endpoint) -> None:
    plain = await clients.call_tool("alice", http, "big", {"n": 5000})
    assert plain.output == "x" * CAP + "\n[output truncated: 5000 bytes]"
    euros = await clients.call_tool("alice", http, "big", {"n": 400, "char": "€"})  # 3 bytes each: 1200
    assert euros.output == "€" * 333 + "\n[output truncated: 1200 bytes]"  # no character cut in two
    fits = await clients.call_tool("alice", http, "big", {"n": CAP})
    assert fits.output == "x" * CAP


async def test_an_answer_past_the_receive_bound_fails(clients: Clients, http: Endpoint) -> None:
    # What the SDK buffers of one event is bounded (here 1 MiB: 4 x the cap, at least the SDK's own bound).
    result = await clients.call_tool("alice", http, "big", {"n": 2 << 20})
    assert result.error is not None and result.error.type == "mcp_protocol_error"
    assert (await clients.call_tool("alice", http, "add", {"a": 1, "b": 2})).output == "3"


async def test_other_parts_come_as_json(clients: Clients, http: Endpoint) -> None:
    result = await clients.call_tool("alice", http, "mixed", {})
    assert result.output == 'a red dot\n{"type":"image","data":"iVBORw0=","mimeType":"image/png"}'


async def test_concurrent_calls_share_one_session(clients: Clients, http: Endpoint, mcp_server: McpServers) -> None:
    results = await asyncio.gather(*(clients.call_tool("alice", http, "add", {"a": i, "b": 1}) for i in range(20)))
    assert [result.output for result in results] == [str(i + 1) for i in range(20)]
    assert mcp_server.counts.sessions == 1


async def test_a_timeout_is_a_protocol_error(mcp_server: McpServers, http: Endpoint, kind: ClientKind) -> None:
    pool = make(kind, allowed=under(mcp_server.base), call_timeout_s=0.3)
    try:
        result = await pool.call_tool("alice", http, "sleep", {"seconds": 10})
        assert result.error is not None and result.error.type == "mcp_protocol_error" and result.error.code == -32001
        assert result.error.message is not None and result.error.message.startswith("Request timed out")
        assert 0.3 <= result.seconds < 1.0
        assert await mcp_server.counts.until(lambda c: c.sleeps_cancelled == 1)  # the server was told to stop
        assert (await pool.call_tool("alice", http, "add", {"a": 1, "b": 2})).output == "3"  # the session lives on
        assert mcp_server.counts.sessions == 1
        assert pool.stats.failures == {"mcp_protocol_error": 1} and pool.stats.calls == 2
    finally:
        await pool.close()


@pytest.mark.parametrize(("kind", "transport"), EVERY)
async def test_cancelling_a_call_is_prompt(clients: Clients, mcp_server: McpServers, transport: str) -> None:
    endpoint = Endpoint(mcp_server.url("/mcp" if transport == "streamable_http" else "/sse"), transport=transport)  # type: ignore[arg-type]
    call = asyncio.create_task(clients.call_tool("alice", endpoint, "sleep", {"seconds": 30}))
    assert await mcp_server.counts.until(lambda c: c.sleeps == 1)
    started = time.perf_counter()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert time.perf_counter() - started < 0.2
    assert await mcp_server.counts.until(lambda c: c.sleeps_cancelled == 1)  # cancelled on the server
    assert (await clients.call_tool("alice", endpoint, "add", {"a": 1, "b": 2})).output == "3"
    assert mcp_server.counts.sessions == 1
    assert clients.stats.calls == 1  # the cancelled call is not counted


async def test_sse_transport(sse_clients: Clients, sse: Endpoint, mcp_server: McpServers) -> None:
    clients = sse_clients
    assert [tool.name for tool in await clients.list_tools("alice", sse)] == list(TOOLS)
    assert (await clients.call_tool("alice", sse, "add", {"a": 20, "b": 22})).output == "42"
    failed = await clients.call_tool("alice", sse, "fail", {})
    assert failed.error is not None and failed.error.type == "mcp_tool_execution_error"
    assert (await clients.call_tool("alice", sse, "big", {"n": 2000})).output == "x" * CAP + (
        "\n[output truncated: 2000 bytes]"
    )
    counts = mcp_server.counts
    assert counts.sessions == 1 and counts.requests["GET /sse"] == 1 and counts.method("tools/list") == 1


async def test_http_error_status(clients: Clients, http: Endpoint, mcp_server: McpServers) -> None:
    mcp_server.fail_with("/down/mcp", 401)
    down = Endpoint(mcp_server.url("/down/mcp"))
    with pytest.raises(ListFailed, match="HTTP 401"):
        await clients.list_tools("alice", down)
    result = await clients.call_tool("alice", down, "add", {"a": 1, "b": 2})
    assert result.error is not None and (result.error.type, result.error.code) == ("http_error", 401)
    # On an open session: that call fails, the session serves the next.
    assert (await clients.call_tool("alice", http, "add", {"a": 1, "b": 2})).output == "3"
    mcp_server.fail_with("/mcp", 503)
    result = await clients.call_tool("alice", http, "add", {"a": 1, "b": 2})
    assert result.error is not None and (result.error.type, result.error.code) == ("http_error", 503)
    del mcp_server.arranged.statuses["/mcp"]
    assert (await clients.call_tool("alice", http, "add", {"a": 1, "b": 2})).output == "3"
    assert mcp_server.counts.requests["POST /mcp"] > 0 and mcp_server.counts.sessions == 1


async def test_a_failed_sse_post_answers_at_once(sse_clients: Clients, sse: Endpoint, mcp_server: McpServers) -> None:
    clients = sse_clients
    # The SDK's SSE transport never answers a request whose POST failed: the call must not wait for its timeout.
    await clients.list_tools("alice", sse)
    mcp_server.fail_with("/messages/", 500)
    result = await clients.call_tool("alice", sse, "add", {"a": 1, "b": 2})
    assert result.error is not None and (result.error.type, result.error.code) == ("http_error", 500)
    assert result.seconds < 1.0
    mcp_server.arranged.statuses.clear()
    assert (await clients.call_tool("alice", sse, "add", {"a": 1, "b": 2})).output == "3"
    assert mcp_server.counts.sessions == 2  # the broken session was dropped, a new one opened


@pytest.mark.parametrize(("kind", "transport"), EVERY)
async def test_an_unreachable_server(kind: ClientKind, transport: str) -> None:
    endpoint = Endpoint(f"http://127.0.0.1:{closed_port()}/sse", transport=transport)  # type: ignore[arg-type]
    pool = make(kind, allowed=under("http://127.0.0.1:"))
    try:
        with pytest.raises(ListFailed, match="could not be reached"):
            await pool.list_tools("alice", endpoint)
        result = await pool.call_tool("alice", endpoint, "add", {})
        assert result.error is not None and (result.error.type, result.error.code) == ("http_error", 502)
    finally:
        await pool.close()


async def test_a_silent_server_is_bounded(kind: ClientKind) -> None:
    with socket.socket() as silent:  # accepts connections (the kernel does), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        endpoint = Endpoint(f"http://127.0.0.1:{silent.getsockname()[1]}/mcp")
        pool = make(kind, allowed=under("http://127.0.0.1:"), list_timeout_s=0.3, call_timeout_s=0.3)
        try:
            started = time.perf_counter()
            with pytest.raises(ListFailed, match="timed out"):
                await pool.list_tools("alice", endpoint)
            assert time.perf_counter() - started < 1.0
            call = asyncio.create_task(pool.call_tool("bob", endpoint, "add", {}))
            await asyncio.sleep(0.05)
            started = time.perf_counter()
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            assert time.perf_counter() - started < 0.2
            result = await pool.call_tool("bob", endpoint, "add", {})
            assert result.error is not None and result.error.code == -32001
        finally:
            await pool.close()


async def test_a_forgotten_session_is_reopened(clients: Clients, http: Endpoint, mcp_server: McpServers) -> None:
    await clients.list_tools("alice", http)
    mcp_server.forget_sessions()  # the server restarted: it answers 404 to the old session id
    assert (await clients.call_tool("alice", http, "add", {"a": 1, "b": 2})).output == "3"
    assert mcp_server.counts.sessions == 2 and mcp_server.counts.statuses[404] >= 1


async def test_idle_sessions_are_closed(
    mcp_server: McpServers, http: Endpoint, sse: Endpoint, kind: ClientKind
) -> None:
    now = [1000.0]
    pool = make(kind, allowed=under(mcp_server.base), idle_s=60, clock=lambda: now[0])
    try:
        await pool.list_tools("alice", http)
        await pool.list_tools("alice", sse)
        call = asyncio.create_task(pool.call_tool("bob", http, "sleep", {"seconds": 1}))
        assert await mcp_server.counts.until(lambda c: c.sleeps == 1)
        now[0] += 59
        pool.sweep()
        assert mcp_server.counts.requests["DELETE /mcp"] == 0
        now[0] += 1
        pool.sweep()  # alice's two are idle; bob's is in use
        # Left open: bob's call's POST (and the SDK's event stream).
        left = 1 + streams(kind)
        assert await mcp_server.counts.until(lambda c: c.requests["DELETE /mcp"] == 1 and c.active == left)
        assert (await call).output == "slept 1"
        await pool.list_tools("alice", http)
        assert mcp_server.counts.sessions == 4  # alice's reopened
    finally:
        await pool.close()
    assert await mcp_server.counts.until(lambda c: c.active == 0)  # every stream closed


async def test_the_sweeper_runs_by_itself(mcp_server: McpServers, http: Endpoint, kind: ClientKind) -> None:
    pool = make(kind, allowed=under(mcp_server.base), idle_s=0.1)
    try:
        await pool.list_tools("alice", http)
        assert await mcp_server.counts.until(lambda c: c.requests["DELETE /mcp"] == 1, timeout=2)
    finally:
        await pool.close()


async def test_close_closes_every_session(
    mcp_server: McpServers, http: Endpoint, sse: Endpoint, kind: ClientKind
) -> None:
    pool = make(kind, allowed=under(mcp_server.base))
    await pool.list_tools("alice", http)
    await pool.list_tools("alice", sse)
    await pool.list_tools("bob", http)
    assert await mcp_server.counts.until(lambda c: c.active == 1 + 2 * streams(kind))  # the event streams
    await pool.close()
    assert await mcp_server.counts.until(lambda c: c.active == 0)
    assert mcp_server.counts.requests["DELETE /mcp"] == 2


async def test_a_url_outside_the_allowlist_is_never_contacted(mcp_server: McpServers, kind: ClientKind) -> None:
    pool = make(kind, allowed=under(mcp_server.url("/mcp")))
    try:
        for endpoint in (Endpoint(mcp_server.url("/paged/mcp")), Endpoint(mcp_server.url("/sse"), transport="sse")):
            with pytest.raises(NotAllowed):
                await pool.list_tools("alice", endpoint)
            with pytest.raises(NotAllowed):
                await pool.call_tool("alice", endpoint, "add", {"a": 1, "b": 2})
        assert mcp_server.counts.total == 0 and pool.stats.sessions == 0
    finally:
        await pool.close()


async def test_a_redirect_outside_the_allowlist_is_refused(mcp_server: McpServers, kind: ClientKind) -> None:
    # Same origin, so the SDK would follow it; the allowlist is a path prefix and the target is outside it.
    pool = make(kind, allowed=under(mcp_server.url("/ok/")))
    try:
        moved = Endpoint(mcp_server.redirect("/ok/mcp", "/mcp"))
        with pytest.raises(NotAllowed, match="/mcp was refused"):
            await pool.list_tools("alice", moved)
        result = await pool.call_tool("alice", moved, "add", {"a": 1, "b": 2})
        assert result.error is not None and (result.error.type, result.error.code) == ("http_error", 307)
        moved_sse = Endpoint(mcp_server.redirect("/ok/sse", "/sse"), transport="sse")
        with pytest.raises(NotAllowed):
            await pool.list_tools("alice", moved_sse)
        assert set(mcp_server.counts.requests) == {"POST /ok/mcp", "GET /ok/sse"}  # nothing reached the targets
    finally:
        await pool.close()


async def test_a_redirect_inside_the_allowlist_is_followed(clients: Clients, mcp_server: McpServers) -> None:
    moved = Endpoint(mcp_server.redirect("/old/mcp", "/mcp"))
    assert len(await clients.list_tools("alice", moved)) == len(TOOLS)
    assert mcp_server.counts.requests["POST /mcp"] >= 1


async def test_a_cross_origin_redirect_is_not_followed(mcp_server: McpServers, kind: ClientKind) -> None:
    # Allowed or not, a redirect is followed only within the endpoint's origin (the SDK's rule, and the lean
    # client's): localhost is another origin.
    other = f"http://localhost:{mcp_server.port}/mcp"
    pool = make(kind, allowed=under(mcp_server.base, f"http://localhost:{mcp_server.port}"))
    try:
        with pytest.raises(ListFailed, match="not followed"):
            await pool.list_tools("alice", Endpoint(mcp_server.redirect("/away/mcp", other)))
        assert "POST /mcp" not in mcp_server.counts.requests
    finally:
        await pool.close()


async def test_header_values_are_never_shown(
    mcp_server: McpServers, caplog: pytest.LogCaptureFixture, kind: ClientKind
) -> None:
    secret = "s3cr3t-token-value"
    mcp_server.fail_with("/down/mcp", 401)
    endpoint = Endpoint(mcp_server.url("/down/mcp"), (("Authorization", f"Bearer {secret}"),))
    pool = make(kind, allowed=under(mcp_server.base))
    caplog.set_level(logging.DEBUG)
    try:
        with pytest.raises(ListFailed) as failed:
            await pool.list_tools("alice", endpoint)
        result = await pool.call_tool("alice", endpoint, "add", {})
    finally:
        await pool.close()
    shown = [str(failed.value), repr(endpoint), str(msgspec.to_builtins(result.error)), caplog.text]
    assert not any(secret in text for text in shown)
    assert mcp_server.counts.header_values("authorization") == {f"Bearer {secret}"}  # it was sent


async def test_stats(clients: Clients, http: Endpoint, mcp_server: McpServers) -> None:
    await clients.list_tools("alice", http)
    await clients.call_tool("alice", http, "add", {"a": 1, "b": 2})
    await clients.call_tool("alice", http, "fail", {})
    mcp_server.fail_with("/down/mcp", 500)
    await clients.call_tool("alice", Endpoint(mcp_server.url("/down/mcp")), "add", {})
    with pytest.raises(ListFailed):
        await clients.list_tools("alice", Endpoint(mcp_server.url("/down/mcp")))
    stats = clients.stats
    assert (stats.calls, stats.lists, stats.list_failures) == (3, 2, 1)
    assert stats.failures == {"mcp_tool_execution_error": 1, "http_error": 1}
    assert stats.call_seconds > 0 and stats.sessions == 3
