"""One MCP session on the official `mcp` SDK, for one key: the SDK's transport and `ClientSession`, opened, held and
closed by a task of its own. anyio's task groups and cancel scopes (inside every SDK context manager) must be entered
and exited by the same task, and a session outlives the call that opened it; callers only send requests through it,
each in a task of its own. Legacy SSE endpoints always use it; streamable HTTP ones when `mcp_client = "sdk"`."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import httpx2
import mcp_types
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from hotloop import __version__
from hotloop.mcp.base import CLOSE_S, Background, Page, shown_url
from hotloop.mcp.codes import CONNECTION_CLOSED, INTERNAL_ERROR, REQUEST_TIMEOUT
from hotloop.mcp.convert import listed, tool_result
from hotloop.mcp.failures import ENDED, Failure, http_status, rpc_failure, timed_out, unreachable
from hotloop.mcp.http import SSE_READ_S, Trace, guarded_client, tracing
from hotloop.mcp.jsonrpc import ToolResult
from hotloop.mcp.types import CallError, Endpoint, NotAllowed

if TYPE_CHECKING:
    from mcp.client._transport import ReadStream, TransportStreams

log = logging.getLogger("hotloop.mcp")
CLIENT_INFO = mcp_types.Implementation(name="hotloop", version=__version__)

T = TypeVar("T")
Message = SessionMessage | Exception


class SdkSession:
    """An MCP session being opened, open, or ended (base.py's `Session`). `client()` waits for it to be open;
    `ended` says it can serve no more requests (it failed, the server closed its stream, it was closed): its owner
    drops it."""

    def __init__(
        self, endpoint: Endpoint, allowed: Callable[[str], bool], *, open_s: float, max_event_bytes: int
    ) -> None:
        self.endpoint = endpoint
        self.streamable = endpoint.transport == "streamable_http"
        self.trace = Trace()  # what the session's own requests met: initialize, the GET stream
        self.in_use = 0  # requests in flight: a session in use is never idle
        self.last_used = 0.0
        self.opened = False
        self.ended = False
        self._allowed = allowed
        self._open_s = open_s
        self._max_event_bytes = max_event_bytes
        loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[ClientSession] = loop.create_future()
        self._ready.add_done_callback(_retrieved)
        self._stop = asyncio.Event()
        self._gave_up = False
        self._abandoned = Background()  # requests whose callers returned: the SDK unwinds them
        # A context of its own: the task outlives its opener, whose context (its trace) it must not inherit.
        self._task = asyncio.create_task(self._run(), name="hotloop-mcp-session", context=contextvars.Context())
        self._watchdog = loop.call_later(open_s, self._give_up)

    async def client(self) -> ClientSession:
        """The initialized SDK session; raises `Failure` when it could not be opened. Shielded: a waiter that is
        cancelled does not stop the opening the other waiters share."""
        return await asyncio.shield(self._ready)

    async def list_page(self, cursor: str | None) -> Page:
        params = None if cursor is None else mcp_types.PaginatedRequestParams(cursor=cursor)
        page = await self._request(lambda client: client.list_tools(params=params))
        return Page([listed(tool) for tool in page.tools], page.next_cursor)

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        # send_request, not ClientSession.call_tool: that one first lists the server's tools on a session that has
        # not (to check structured content against an output schema), a request nobody asked for; the model reads
        # text.
        request = mcp_types.CallToolRequest(params=mcp_types.CallToolRequestParams(name=name, arguments=arguments))
        result = await self._request(lambda client: client.send_request(request, mcp_types.CallToolResult))
        return tool_result(result)

    async def close(self) -> None:
        """End the session: an orderly exit within `CLOSE_S`, else its task is cancelled; then the requests whose
        callers returned, which that ends."""
        self._stop.set()
        if not self.opened:
            self._task.cancel()  # an opening has nothing to end in order
        done, _ = await asyncio.wait({self._task}, timeout=CLOSE_S)
        if not done:
            self._task.cancel()
            await asyncio.wait({self._task})
        await self._abandoned.finish(CLOSE_S)

    async def _request(self, work: Callable[[ClientSession], Awaitable[T]]) -> T:
        """`work` on the open session, in a task of its own so that the caller never waits on the SDK's unwinding:
        cancelled (or out of time), the caller returns at once while the task sends the server its cancellation in
        the background. What its HTTP requests met is read from its trace."""
        trace = Trace()
        context = contextvars.copy_context()
        context.run(tracing, trace)
        task = asyncio.create_task(self._on(work), context=context)
        waits: set[asyncio.Future[Any]] = {task}
        if not self.streamable:  # the legacy SSE transport drops a request whose POST failed: never answered
            waits.add(asyncio.ensure_future(trace.failed.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                if not waiting.done():
                    waiting.cancel()
                    self._abandoned.keep(waiting)
        if task.done() and not task.cancelled():
            failed = task.exception()
            if failed is None:
                return task.result()
            raise failure_of(failed, trace, streamable=self.streamable) from None
        raise failure_of(None, trace, streamable=self.streamable)  # the trace saw a POST fail

    async def _on(self, work: Callable[[ClientSession], Awaitable[T]]) -> T:
        return await work(await self.client())

    async def _run(self) -> None:
        tracing(self.trace)
        failure: Failure | None = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await self._open(stack)
                self.opened = True
                self._watchdog.cancel()
                self._ready.set_result(client)
                await self._stop.wait()
        except asyncio.CancelledError:
            if not self._gave_up:
                raise
            failure = timed_out(self._open_s, "the MCP session did not open")
        except Exception as exc:  # the ExceptionGroup of a transport whose task failed, too
            failure = failure_of(exc, self.trace, streamable=self.streamable)
        finally:
            self.ended = True
            self._watchdog.cancel()
            if not self._ready.done():
                self._ready.set_exception(failure or Failure(ENDED, broken=True))
        if failure is not None:
            state = "ended" if self.opened else "could not be opened"
            log.info("MCP session to %s %s: %s", shown_url(self.endpoint.url), state, failure.error.message)

    async def _open(self, stack: contextlib.AsyncExitStack) -> ClientSession:
        read, write = await self._streams(stack)
        client = ClientSession(_EndWatch(read, self._end), write, client_info=CLIENT_INFO)
        await stack.enter_async_context(client)
        await client.initialize()
        return client

    async def _streams(self, stack: contextlib.AsyncExitStack) -> TransportStreams:
        url, headers = self.endpoint.url, list(self.endpoint.headers)
        if self.streamable:
            http = await stack.enter_async_context(guarded_client(self._allowed, headers, self._open_s))
            streams = streamable_http_client(url, http_client=http, max_sse_event_size=self._max_event_bytes)
            return await stack.enter_async_context(streams)

        def factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            # sse_client enters and closes the client; the endpoint's headers are set on it here (none are passed).
            return guarded_client(self._allowed, list(self.endpoint.headers), self._open_s)

        sse = sse_client(url, timeout=self._open_s, sse_read_timeout=SSE_READ_S, httpx_client_factory=factory)
        return await stack.enter_async_context(sse)

    def _end(self) -> None:
        self.ended = True

    def _give_up(self) -> None:
        # Opening took longer than `open_s`: the task is cancelled from its top, where anyio's scopes unwind in order.
        if not self.opened:
            self._gave_up = True
            self._task.cancel()


class _EndWatch:
    """The transport's read stream, noticing its end (the server closed the event stream, the transport failed):
    the SDK's dispatcher then fails every later request at once, so the session is marked ended and dropped."""

    def __init__(self, inner: ReadStream[Message], on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> contextvars.Context | None:
        # The sender's context, which the dispatcher restores for what it runs (mcp.shared._context_streams).
        context: contextvars.Context | None = getattr(self._inner, "last_context", None)
        return context

    async def receive(self) -> Message:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _EndWatch:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _EndWatch:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _retrieved(future: asyncio.Future[ClientSession]) -> None:
    # A session nobody waited on may fail to open: its exception is then read here, not reported as unretrieved.
    if not future.cancelled():
        future.exception()


def failure_of(exc: BaseException | None, trace: Trace, *, streamable: bool) -> Failure:
    """The failure behind `exc` (raised by the SDK or its transport, perhaps in an ExceptionGroup; None when the
    SDK never answered), read with what the HTTP requests met: an HTTP status or an unanswered request says more
    than the JSON-RPC error the SDK made of it. `streamable`: a 404 then means the server dropped the session
    (MCP's streamable HTTP transport: the client must open a new one)."""
    leaf = None if exc is None else _leaf(exc)
    if isinstance(leaf, Failure):
        return leaf
    if trace.refused or isinstance(leaf, NotAllowed):
        message = trace.problem or str(leaf)
        return Failure(CallError("http_error", code=trace.status or 403, message=message), broken=True, refused=True)
    status = trace.status
    if status is None and isinstance(leaf, httpx2.HTTPStatusError):  # the SSE transport's GET: raise_for_status
        status = leaf.response.status_code
    if status is not None:
        return http_status(status, leaf.message if isinstance(leaf, MCPError) else None, streamable=streamable)
    if trace.problem is not None or isinstance(leaf, httpx2.TransportError):
        return unreachable(trace.problem or f"{type(leaf).__name__}: {leaf}")
    if isinstance(leaf, MCPError):
        return rpc_failure(leaf.code, leaf.message)
    if isinstance(leaf, TimeoutError):
        return Failure(CallError("mcp_protocol_error", code=REQUEST_TIMEOUT, message="Request timed out"))
    if leaf is None:
        return Failure(CallError("mcp_protocol_error", code=CONNECTION_CLOSED, message="No answer"), broken=True)
    # A result that is not valid MCP (a pydantic ValidationError), an unsupported protocol version, …: the session
    # itself may be fine (one that died is dropped anyway).
    message = f"{type(leaf).__name__}: {leaf}"
    return Failure(CallError("mcp_protocol_error", code=INTERNAL_ERROR, message=message))


def _leaf(exc: BaseException) -> BaseException:
    """The first exception in `exc` that is neither a group nor a cancellation: the SDK's task groups wrap what
    their tasks raised, beside the cancellations of the tasks that were stopped because of it."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    leaves = [_leaf(inner) for inner in exc.exceptions]
    return next((leaf for leaf in leaves if not isinstance(leaf, asyncio.CancelledError)), leaves[0] if leaves else exc)
