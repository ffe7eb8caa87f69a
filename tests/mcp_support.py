"""Real MCP servers from the `mcp` SDK on loopback, for the MCP client's tests and the end-to-end ones.

One uvicorn server on a thread (`McpServers`) serves, on one free port:

    /mcp         MCPServer's TOOLS over streamable HTTP, each answer an event stream
    /json/mcp    the same tools, each answer a JSON body (the server's `json_response`)
    /stateless/mcp  the same tools with no session (`stateless_http`: no Mcp-Session-Id), answers as event streams
    /sse         the same tools over legacy SSE (its messages are POSTed to /messages/)
    /paged/mcp   a lowlevel server listing PAGED_TOOLS tools PAGE_SIZE at a time (MCPServer does not paginate);
                 calling one answers "called NAME", any other name a JSON-RPC error (-32602)

behind a recorder that counts what arrives (`Counts`: HTTP requests, JSON-RPC methods, sessions, TCP connections,
requests still open, the headers sent, the sleep tool's runs) and does what a test arranges: a redirect, an error
status, forgetting every session so far (a restarted server).

conftest.py's fixtures: `mcp_servers` (the servers, started once per run) and `mcp_server` (the same, its counts
and arrangements reset for the test):

    async def test_listing(mcp_server: McpServers) -> None:
        tools = await clients.list_tools("me", Endpoint(mcp_server.url("/mcp")))
        assert mcp_server.counts.method("tools/list") == 1 and mcp_server.counts.sessions == 1
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import mcp_types
import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from openai.types.responses import Response
from starlette.applications import Starlette

from http_support import check_sequence
from openai_types_support import openai_typed
from schema import check_event, check_response

PAGE_SIZE = 2
PAGED_TOOLS = [f"tool{i}" for i in range(5)]  # three pages: 2, 2, 1
TOOLS = ("add", "echo", "fail", "sleep", "big", "mixed", "structured", "crash", "chatty", "pinging")
Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class Counts:
    """What the servers received since the last `reset()`. Written on the server's thread, read on the test's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Requests not yet answered in full (open event streams among them): a gauge, not reset, since a request a
        # test left open (an event stream still closing) ends during the next test.
        self.active = 0
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.requests: Counter[str] = Counter()  # "POST /mcp", "GET /sse", "DELETE /mcp", …
            self.methods: Counter[str] = Counter()  # JSON-RPC methods, notifications included
            self.statuses: Counter[int] = Counter()
            self.peers: set[tuple[str, int]] = set()  # client (host, port): one per TCP connection
            self.headers: list[dict[str, str]] = []  # each request's headers, names lowercased
            self.sleeps = 0  # runs of the sleep tool started
            self.sleeps_cancelled = 0  # … and cancelled before they ended (the client's cancellation arrived)

    def method(self, name: str) -> int:
        return self.methods[name]

    @property
    def sessions(self) -> int:
        """MCP sessions opened: one `initialize` each, on either transport."""
        return self.methods["initialize"]

    @property
    def connections(self) -> int:
        return len(self.peers)

    @property
    def total(self) -> int:
        """HTTP requests of any kind, redirected and refused ones included."""
        return sum(self.requests.values())

    def header_values(self, name: str) -> set[str]:
        """The values a header had on the requests that carried it."""
        with self._lock:
            return {headers[name] for headers in self.headers if name in headers}

    def request(self, method: str, path: str, peer: tuple[str, int] | None, headers: dict[str, str]) -> None:
        with self._lock:
            self.requests[f"{method} {path}"] += 1
            self.headers.append(headers)
            if peer is not None:
                self.peers.add(peer)

    def messages(self, body: bytes) -> None:
        try:
            decoded = json.loads(body)
        except ValueError:
            return
        with self._lock:
            for message in decoded if isinstance(decoded, list) else [decoded]:
                if isinstance(message, dict) and isinstance(message.get("method"), str):
                    self.methods[message["method"]] += 1

    def add(self, name: str, value: int) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + value)

    def answered(self, status: int) -> None:
        with self._lock:
            self.statuses[status] += 1

    async def until(self, check: Callable[[Counts], bool], timeout: float = 5.0) -> bool:
        """Wait, without blocking the event loop, until `check(self)` holds; False once `timeout` passed."""
        deadline = time.monotonic() + timeout
        while not check(self):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True


class Arranged:
    """What the recorder does instead of passing a request on; `clear()` undoes it all."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.redirects: dict[str, str] = {}  # path → Location, answered 307
        self.statuses: dict[str, int] = {}  # path → an HTTP error status, answered with a small JSON body
        self.forgotten: set[str] = set()  # mcp-session-ids answered 404 (the server "restarted")
        self.session_ids: set[str] = set()  # every mcp-session-id the servers issued


class Recorder:
    """ASGI middleware in front of the MCP apps: counts every request and its JSON-RPC messages, then answers what
    `arranged` says or passes the request on."""

    def __init__(self, app: Any, counts: Counts, arranged: Arranged) -> None:
        self.app = app
        self.counts = counts
        self.arranged = arranged

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        headers = {name.decode().lower(): value.decode() for name, value in scope["headers"]}
        peer = scope.get("client")
        self.counts.request(scope["method"], path, tuple(peer) if peer else None, headers)
        arranged = self.arranged
        if path in arranged.redirects:
            await _answer(send, 307, [(b"location", arranged.redirects[path].encode())])
            self.counts.answered(307)
        elif path in arranged.statuses:
            status = arranged.statuses[path]
            await _answer(send, status, [(b"content-type", b"application/json")], b'{"error": "arranged"}')
            self.counts.answered(status)
        elif headers.get("mcp-session-id") in arranged.forgotten:
            await _answer(send, 404, [(b"content-type", b"application/json")], b'{"error": "unknown session"}')
            self.counts.answered(404)
        else:
            await self._pass(scope, receive, send)

    async def _pass(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = bytearray()

        async def receiving() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
                if not message.get("more_body"):
                    self.counts.messages(bytes(body))
            return message

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.counts.answered(message["status"])
                for name, value in message.get("headers", []):
                    if name.lower() == b"mcp-session-id":
                        self.arranged.session_ids.add(value.decode())
            await send(message)

        self.counts.add("active", 1)
        try:
            await self.app(scope, receiving, sending)
        finally:
            self.counts.add("active", -1)


async def _answer(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes = b"") -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def tool_server(counts: Counts) -> MCPServer:
    """MCPServer with TOOLS: ones that succeed, fail (isError, or raising), sleep, answer big, answer text and an
    image, answer structured content alone, log while they run, ping the client before answering."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    server = MCPServer("hotloop-test-tools", log_level="WARNING")
    root.setLevel(level)  # MCPServer configures the root logger: the test run's logging stays as it was
    root.handlers[:] = handlers

    @server.tool(annotations=mcp_types.ToolAnnotations(read_only_hint=True, title="Addition"))
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def echo(text: str) -> str:
        """The text, as it came."""
        return text

    @server.tool()
    def fail(message: str = "it broke") -> str:
        """Always raises: the call's result is an isError one."""
        raise ToolError(message)

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Sleep, then say so; counts its runs and their cancellations."""
        counts.add("sleeps", 1)
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            counts.add("sleeps_cancelled", 1)
            raise
        return f"slept {seconds:g}"

    @server.tool()
    def big(n: int, char: str = "x") -> str:
        """`char` repeated `n` times."""
        return char * n

    @server.tool()
    def mixed() -> list[mcp_types.TextContent | mcp_types.ImageContent]:
        """A text part and an image part."""
        return [mcp_types.TextContent(text="a red dot"), mcp_types.ImageContent(data="iVBORw0=", mime_type="image/png")]

    @server.tool()
    def structured(a: int, b: int) -> mcp_types.CallToolResult:
        """Structured content, and no content part."""
        return mcp_types.CallToolResult(content=[], structured_content={"sum": a + b, "terms": [a, b]})

    @server.tool()
    def crash() -> str:
        """Raises an error that is not a ToolError."""
        raise RuntimeError("it crashed")

    @server.tool()
    async def chatty(text: str, ctx: Context) -> str:
        """Notifies the client on the answer's stream (progress, before the response), then answers."""
        for step in range(3):
            params = mcp_types.ProgressNotificationParams(progress_token="chatty", progress=step, total=3)
            notification = mcp_types.ProgressNotification(params=params)
            await ctx.request_context.session.send_notification(notification, related_request_id=ctx.request_id)
        return text

    @server.tool()
    async def pinging(ctx: Context) -> str:
        """Pings the client on the answer's stream, and answers once the client has answered the ping."""
        metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
        await ctx.request_context.session.send_request(
            mcp_types.PingRequest(), mcp_types.EmptyResult, metadata=metadata
        )
        return "pong"

    return server


def paged_server() -> Server[Any]:
    """A lowlevel server listing PAGED_TOOLS PAGE_SIZE at a time (cursor: the next tool's index)."""

    async def list_tools(ctx: Any, params: mcp_types.PaginatedRequestParams | None) -> mcp_types.ListToolsResult:
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + PAGE_SIZE
        tools = [
            mcp_types.Tool(name=name, description=f"Tool {name}", input_schema={"type": "object", "properties": {}})
            for name in PAGED_TOOLS[start:end]
        ]
        return mcp_types.ListToolsResult(tools=tools, next_cursor=str(end) if end < len(PAGED_TOOLS) else None)

    async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        if params.name not in PAGED_TOOLS:  # a JSON-RPC error, where MCPServer answers isError
            raise MCPError(code=mcp_types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=f"called {params.name}")])

    return Server("hotloop-test-paged", on_list_tools=list_tools, on_call_tool=call_tool)


def build_app(counts: Counts, arranged: Arranged) -> Recorder:
    tools, json_tools, stateless_tools = tool_server(counts), tool_server(counts), tool_server(counts)
    paged = paged_server()
    streamable = tools.streamable_http_app()  # /mcp
    sse = tools.sse_app()  # /sse, /messages/
    json_app = json_tools.streamable_http_app(streamable_http_path="/json/mcp", json_response=True)
    stateless_app = stateless_tools.streamable_http_app(streamable_http_path="/stateless/mcp", stateless_http=True)
    paged_app = paged.streamable_http_app(streamable_http_path="/paged/mcp")
    servers = (tools, json_tools, stateless_tools, paged)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for server in servers:
                await stack.enter_async_context(server.session_manager.run())
            yield

    apps = (streamable, sse, json_app, stateless_app, paged_app)
    app = Starlette(routes=[route for each in apps for route in each.routes], lifespan=lifespan)
    return Recorder(app, counts, arranged)


class McpServers:
    """The MCP servers on a daemon thread; `url(path)` on it, `counts` of what arrived, `arranged` behaviours."""

    def __init__(self) -> None:
        self.counts = Counts()
        self.arranged = Arranged()
        config = uvicorn.Config(
            build_app(self.counts, self.arranged),
            host="127.0.0.1",
            port=0,
            log_config=None,  # uvicorn would reconfigure logging for the whole test run
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=1,  # open event streams do not hold the shutdown
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="mcp-test-servers", daemon=True)
        self.port = 0

    def start(self, timeout: float = 30) -> McpServers:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the MCP test servers did not start")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base + path

    def reset(self) -> McpServers:
        self.counts.reset()
        self.arranged.clear()
        return self

    def redirect(self, path: str, to: str) -> str:
        """Answer requests for `path` with a 307 to `to` (a path here, or a URL); returns `path`'s URL."""
        self.arranged.redirects[path] = to
        return self.url(path)

    def fail_with(self, path: str, status: int) -> None:
        self.arranged.statuses[path] = status

    def forget_sessions(self) -> None:
        """Answer 404 to every session opened so far, as a restarted server does."""
        self.arranged.forgotten |= self.arranged.session_ids


@contextlib.contextmanager
def serving() -> Iterator[McpServers]:
    """The servers, started (about 0.1 s) and stopped after."""
    servers = McpServers().start()
    try:
        yield servers
    finally:
        servers.stop()


# -- what the end-to-end tests send and check (test_mcp_loop.py, test_mcp_clients.py, test_console_mcp.py) --------

LABEL = "tools"


def mcp_tool(servers: McpServers, **fields: Any) -> dict[str, Any]:
    """The `mcp` tool of a request for the streamable HTTP server, its echo tool only, run without approval."""
    return {
        "type": "mcp",
        "server_label": LABEL,
        "server_url": servers.url("/mcp"),
        "require_approval": "never",
        "allowed_tools": ["echo"],
        **fields,
    }


def approved(calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """A stateless history whose approved requests make hotloop run `calls` ((tool, arguments) of the server
    `LABEL`) first, at once: a test chooses the arguments the model would have written."""
    # Ids of their own: a history sent again is a resend of the first (pipeline/resend.py), its approvals answered.
    ids = [f"mcpr_{uuid.uuid4().hex}" for _ in calls]
    history: list[dict[str, Any]] = [{"role": "user", "content": "Go."}]
    for request_id, (name, arguments) in zip(ids, calls, strict=True):
        history.append(
            {
                "type": "mcp_approval_request",
                "id": request_id,
                "server_label": LABEL,
                "name": name,
                "arguments": json.dumps(arguments),
            }
        )
    history += [{"type": "mcp_approval_response", "approval_request_id": i, "approve": True} for i in ids]
    return history


def of_type(response: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [item for item in response["output"] if item["type"] == kind]


def check_mcp_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Streamed events, SSE or WebSocket frames: each valid for the Open Responses schema and typed by
    openai-python (MCP ones field for field), the lifecycle rules (http_support.check_sequence: `output_item.done`
    in output order, equal to the terminal output), and each MCP call's events in OpenAI's order. Returns the
    terminal response, checked too."""
    for event in events:
        check_event(event)
        if not event["type"].startswith("hotloop:"):
            openai_typed("event", event)
    final = check_sequence(events)
    check_response(final)
    Response.model_validate(final)
    for item in final["output"]:
        if item["type"] == "mcp_call":
            kinds = [event["type"] for event in events if event.get("item_id") == item["id"]]
            assert kinds[0] in ("response.mcp_call_arguments.delta", "response.mcp_call_arguments.done"), kinds
            if item["status"] == "incomplete":  # cut short while the model wrote it: never run
                assert kinds[-1] == "response.mcp_call_arguments.done" and "response.mcp_call.in_progress" not in kinds
                continue
            end = "response.mcp_call.completed" if item["status"] == "completed" else "response.mcp_call.failed"
            assert kinds[-2:] == ["response.mcp_call.in_progress", end], kinds
    return final
