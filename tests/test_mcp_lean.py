"""The lean MCP client (hotloop.mcp.streamable) against real MCP servers from the SDK (mcp_support.py), in each way
a streamable HTTP server answers: an event stream (/mcp), a JSON body (/json/mcp), no session at all
(/stateless/mcp). The same listing and calls through the SDK's client and the lean one give the same results;
the lean one keeps one connection for sequential calls, tells the server when a call is cancelled, reopens a
session the server forgot, answers the server's ping, and never shows a header's value."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import pytest

from hotloop.mcp import CallResult, Clients, Endpoint, ListFailed
from hotloop.mcp.clients import ClientKind
from hotloop.mcp.jsonrpc import PROTOCOL_VERSION
from mcp_support import TOOLS, McpServers

CAP = 1000  # max_output_bytes of the tests' clients
MODES = ["/mcp", "/json/mcp", "/stateless/mcp"]  # event streams, JSON bodies, no session
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("add", {"a": 2, "b": 3}),  # text, and structured content beside it
    ("echo", {"text": "héllo\nwörld"}),
    ("structured", {"a": 1, "b": 2}),  # structured content alone
    ("fail", {"message": "no luck"}),  # isError
    ("crash", {}),  # a tool that raises
    ("mixed", {}),  # a text part and an image part
    ("big", {"n": 5000}),  # past the cap
    ("big", {"n": 400, "char": "€"}),  # past the cap, in 3-byte characters
    ("big", {"n": CAP}),  # at the cap
    ("nope", {}),  # an unknown tool
    ("chatty", {"text": "done"}),  # progress notifications before the response
]


def under(prefix: str) -> Callable[[str], bool]:
    return lambda url: url.startswith(prefix)


def clients(servers: McpServers, kind: ClientKind, **settings: Any) -> Clients:
    limits: dict[str, Any] = {"call_timeout_s": 5, "list_timeout_s": 5, "max_output_bytes": CAP, **settings}
    return Clients(allowed=under(servers.base + "/"), client=kind, **limits)


@pytest.fixture
async def lean(mcp_server: McpServers) -> AsyncIterator[Clients]:
    pool = clients(mcp_server, "lean")
    yield pool
    await pool.close()


def timeless(result: CallResult) -> CallResult:
    return msgspec.structs.replace(result, seconds=0.0)


async def run_all(pool: Clients, endpoint: Endpoint) -> tuple[list[Any], list[CallResult]]:
    listed = await pool.list_tools("alice", endpoint)
    results = [timeless(await pool.call_tool("alice", endpoint, name, arguments)) for name, arguments in CALLS]
    return listed, results


@pytest.mark.parametrize("path", MODES)
async def test_both_clients_answer_alike(mcp_server: McpServers, path: str) -> None:
    endpoint = Endpoint(mcp_server.url(path))
    sdk, lean = clients(mcp_server, "sdk"), clients(mcp_server, "lean")
    try:
        sdk_tools, sdk_results = await run_all(sdk, endpoint)
        lean_tools, lean_results = await run_all(lean, endpoint)
    finally:
        await sdk.close()
        await lean.close()
    assert [tool.name for tool in lean_tools] == list(TOOLS)
    for sdk_tool, lean_tool in zip(sdk_tools, lean_tools, strict=True):
        assert lean_tool == sdk_tool
    for (name, _), sdk_result, lean_result in zip(CALLS, sdk_results, lean_results, strict=True):
        assert lean_result == sdk_result, name
    assert lean_results[0].output == "5" and lean_results[2].output == '{"sum":3,"terms":[1,2]}'
    assert lean_results[6].output == "x" * CAP + "\n[output truncated: 5000 bytes]"
    assert lean_results[4].error is not None and lean_results[4].error.type == "mcp_tool_execution_error"
    assert lean.stats == msgspec.structs.replace(sdk.stats, call_seconds=lean.stats.call_seconds)


async def test_both_clients_fail_alike(mcp_server: McpServers) -> None:
    """A JSON-RPC error, an error status, a listing of every page: the same through both clients."""
    paged = Endpoint(mcp_server.url("/paged/mcp"))
    mcp_server.fail_with("/down/mcp", 503)
    down = Endpoint(mcp_server.url("/down/mcp"))
    outcomes: dict[str, list[Any]] = {}
    for kind in ("sdk", "lean"):
        pool = clients(mcp_server, kind)
        try:
            with pytest.raises(ListFailed) as failed:
                await pool.list_tools("alice", down)
            outcomes[kind] = [
                await pool.list_tools("alice", paged),
                timeless(await pool.call_tool("alice", paged, "nope", {})),
                timeless(await pool.call_tool("alice", paged, "tool3", {})),
                timeless(await pool.call_tool("alice", down, "add", {})),
                str(failed.value),
            ]
        finally:
            await pool.close()
    assert outcomes["lean"] == outcomes["sdk"]
    error = outcomes["lean"][1].error
    assert (error.type, error.code, error.message) == ("mcp_protocol_error", -32602, "Unknown tool: nope")
    assert outcomes["lean"][3].error.code == 503


@pytest.mark.parametrize("path", ["/mcp", "/json/mcp"])
async def test_sequential_calls_keep_one_connection(lean: Clients, mcp_server: McpServers, path: str) -> None:
    endpoint = Endpoint(mcp_server.url(path))
    for i in range(20):
        assert (await lean.call_tool("alice", endpoint, "add", {"a": i, "b": 1})).output == str(i + 1)
    counts = mcp_server.counts
    # initialize, the initialized notification and 20 calls, every one on the first connection
    assert counts.method("tools/call") == 20 and counts.connections == 1
    assert counts.requests[f"POST {path}"] == 22 and counts.requests[f"GET {path}"] == 0


async def test_concurrent_calls_take_connections_of_their_own(lean: Clients, mcp_server: McpServers) -> None:
    endpoint = Endpoint(mcp_server.url("/mcp"))
    calls = [lean.call_tool("alice", endpoint, "sleep", {"seconds": 0.2}) for _ in range(5)]
    assert [result.output for result in await asyncio.gather(*calls)] == ["slept 0.2"] * 5
    assert mcp_server.counts.sessions == 1 and mcp_server.counts.connections >= 5


@pytest.mark.parametrize("path", MODES)
async def test_a_cancelled_call_is_cancelled_on_the_server(lean: Clients, mcp_server: McpServers, path: str) -> None:
    endpoint = Endpoint(mcp_server.url(path))
    call = asyncio.create_task(lean.call_tool("alice", endpoint, "sleep", {"seconds": 30}))
    assert await mcp_server.counts.until(lambda c: c.sleeps == 1)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await mcp_server.counts.until(lambda c: c.method("notifications/cancelled") == 1)
    if path != "/stateless/mcp":  # a stateless server has no session to find the request in
        assert await mcp_server.counts.until(lambda c: c.sleeps_cancelled == 1)
    assert (await lean.call_tool("alice", endpoint, "add", {"a": 1, "b": 2})).output == "3"


@pytest.mark.parametrize("path", ["/mcp", "/json/mcp"])
async def test_a_forgotten_session_is_opened_again(lean: Clients, mcp_server: McpServers, path: str) -> None:
    endpoint = Endpoint(mcp_server.url(path))
    await lean.list_tools("alice", endpoint)
    mcp_server.forget_sessions()  # a restarted server: 404 to the old session id
    assert (await lean.call_tool("alice", endpoint, "add", {"a": 1, "b": 2})).output == "3"
    assert mcp_server.counts.sessions == 2 and mcp_server.counts.statuses[404] >= 1
    assert len(mcp_server.counts.header_values("mcp-session-id")) == 2


@pytest.mark.parametrize("kind", ["lean", "sdk"])
async def test_the_servers_ping_is_answered(mcp_server: McpServers, kind: ClientKind) -> None:
    pool = clients(mcp_server, kind)
    try:
        result = await pool.call_tool("alice", Endpoint(mcp_server.url("/mcp")), "pinging", {})
    finally:
        await pool.close()
    assert result.output == "pong"


async def test_the_transports_headers(lean: Clients, mcp_server: McpServers) -> None:
    """Mcp-Session-Id and MCP-Protocol-Version on every request after initialize; DELETE on close."""
    endpoint = Endpoint(mcp_server.url("/mcp"), (("X-Tenant", "blue"), ("Accept", "text/plain")))
    await lean.call_tool("alice", endpoint, "add", {"a": 1, "b": 2})
    await lean.close()
    headers = mcp_server.counts.headers
    assert [request.get("mcp-protocol-version") for request in headers] == [None, *[PROTOCOL_VERSION] * 3]
    assert (
        headers[0].get("mcp-session-id") is None
        and len({request.get("mcp-session-id") for request in headers[1:]}) == 1
    )
    assert all(request["x-tenant"] == "blue" for request in headers)
    assert all(request["accept"] == "application/json, text/event-stream" for request in headers)  # not the endpoint's
    assert mcp_server.counts.requests["DELETE /mcp"] == 1


async def test_header_values_are_never_shown(
    lean: Clients, mcp_server: McpServers, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "s3cr3t-token-value"
    caplog.set_level(logging.DEBUG)
    good = Endpoint(mcp_server.url("/mcp"), (("Authorization", f"Bearer {secret}"),))
    broken = Endpoint(mcp_server.url("/mcp"), (("Authorization", f"Bearer {secret}\r\nX-Evil: 1"),))
    assert (await lean.call_tool("alice", good, "add", {"a": 1, "b": 2})).output == "3"
    refused = await lean.call_tool("alice", broken, "add", {"a": 1, "b": 2})
    with pytest.raises(ListFailed) as failed:
        await lean.list_tools("alice", broken)
    await lean.close()
    assert refused.error is not None and refused.error.type == "mcp_protocol_error"
    assert "Authorization" in str(failed.value)
    shown = [str(failed.value), str(msgspec.to_builtins(refused.error)), repr(good), repr(broken), caplog.text]
    assert not any(secret in text for text in shown)
    assert mcp_server.counts.header_values("authorization") == {f"Bearer {secret}"}  # the good one was sent
    assert "x-evil" not in {name for request in mcp_server.counts.headers for name in request}
