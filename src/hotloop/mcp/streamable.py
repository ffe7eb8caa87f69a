"""The lean MCP session: MCP's streamable HTTP transport spoken on hotloop's own keep-alive HTTP/1.1 pool
(net/http1.py). Each JSON-RPC request is one POST to the endpoint, answered with a JSON body or an event stream
that is read to its end, so the connection is kept for the next request; each message is decoded once, with
msgspec, into the result its request expects (jsonrpc.py). No task, memory stream or pydantic model per request:
the SDK's client path cost ~3.3 ms a call over the server's own time (issue 31), and a TCP connection a call when
the server answered with an event stream.

What the session does beside the requests (MCP's "Streamable HTTP" and "Lifecycle"): `initialize`, then the
`notifications/initialized` notification; `Mcp-Session-Id` and `MCP-Protocol-Version` on every later request; a
server's ping on an answer's stream answered; a request whose caller gave up cancelled on the server with
`notifications/cancelled` (as the SDK does), in the background; `DELETE` on close. The GET stream of
server-initiated messages is not opened: hotloop offers the server nothing to ask for (no sampling, roots or
elicitation). Redirects: 307 and 308 within the endpoint's origin are followed (what the SDK follows), each target
checked against the allowlist before anything is sent to it."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
import re
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

import msgspec

from hotloop import __version__
from hotloop.mcp import jsonrpc
from hotloop.mcp.base import CLOSE_S, Background, Page, shown_url
from hotloop.mcp.codes import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND
from hotloop.mcp.convert import listed_wire
from hotloop.mcp.events import EventStream, EventTooLarge
from hotloop.mcp.failures import ENDED, Failure, http_status, refused, rpc_failure, timed_out, unreachable
from hotloop.mcp.jsonrpc import Decoders, Incoming, ToolResult
from hotloop.mcp.types import CallError, Endpoint
from hotloop.net import http1

R = TypeVar("R")
log = logging.getLogger("hotloop.mcp")

MAX_CONNECTIONS = 100  # one session's connections at once (httpx's default, which the SDK's client had)
MAX_REDIRECTS = 20  # hops of one request (httpx's default, which the SDK follows within the endpoint's origin)
FOLLOWED = frozenset({307, 308})  # the redirects that keep the method and body (the SDK follows no other)
REDIRECTS = frozenset({301, 302, 303, 307, 308})  # checked against the allowlist, followed or not
END_S = 0.01  # the longest wait, once the answer is in, for its stream's end (which follows at once)
ERROR_BODY_BYTES = 64 << 10  # of an error status's body: its JSON-RPC error, if it is one, says why
CAPTURE = (b"content-type", b"mcp-session-id", b"location")
FIXED = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
# Headers the transport sets itself: an endpoint's own of these names are not sent.
RESERVED = frozenset({"host", "content-length", "transfer-encoding", "connection", *map(str.lower, FIXED)})
RESERVED |= {"mcp-session-id", "mcp-protocol-version"}
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 §5.6.2
CLIENT_INFO = {"name": "hotloop", "version": __version__}


class LeanSession:
    """One MCP session over streamable HTTP (base.py's `Session`). It starts opening when made; `list_page` and
    `call` wait for that, then each sends one request on a pooled connection of the session's own."""

    def __init__(
        self, endpoint: Endpoint, allowed: Callable[[str], bool], *, open_s: float, max_event_bytes: int
    ) -> None:
        self.endpoint = endpoint
        self.in_use = 0
        self.last_used = 0.0
        self._allowed = allowed
        self._open_s = open_s
        self._max_event_bytes = max_event_bytes
        self._headers: dict[str, str] = {}  # Mcp-Session-Id and MCP-Protocol-Version, once the handshake gave them
        self._session_id: str | None = None
        self._ids = itertools.count(1)
        self._background = Background()
        self._opened = self._closed = self._shut = False  # closing, and its connections closed
        self._invalid: Failure | None = None  # an endpoint header HTTP cannot carry: the session never opens
        try:
            fixed = _fixed_headers(endpoint.headers)
        except Failure as failure:
            self._invalid, fixed = failure, dict(FIXED)
        self._pool = http1.Pool(MAX_CONNECTIONS, open_s, fixed, capture=CAPTURE)
        loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[None] = loop.create_future()
        self._ready.add_done_callback(_retrieved)
        # A context of its own: the opening outlives the caller that started it.
        self._opening = asyncio.create_task(self._open(), name="hotloop-mcp-open", context=contextvars.Context())

    @property
    def opened(self) -> bool:
        return self._opened

    @property
    def ended(self) -> bool:
        return self._closed or (self._ready.done() and not self._opened)

    async def list_page(self, cursor: str | None) -> Page:
        await self._until_open()
        page = await self._rpc("tools/list", None if cursor is None else {"cursor": cursor}, Decoders.tools_list)
        return Page([listed_wire(tool) for tool in page.tools], page.next_cursor)

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        await self._until_open()
        return await self._rpc("tools/call", {"name": name, "arguments": arguments}, Decoders.tools_call)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._opening.done():
            self._opening.cancel()
            await asyncio.wait({self._opening})
        if not self._ready.done():  # cancelled before it ran
            self._ready.set_exception(Failure(ENDED, broken=True))
        try:
            async with asyncio.timeout(CLOSE_S):
                if self._background.tasks:  # the cancellations of abandoned requests go out first
                    await asyncio.wait(set(self._background.tasks))
                if self._session_id is not None:  # tell the server (MCP: it may answer 405, which is fine)
                    response = await self._send(b"DELETE", b"")
                    await _drained(response, ERROR_BODY_BYTES)
        except (TimeoutError, Failure):
            pass
        finally:
            self._shut = True
            self._background.cancel()
            self._pool.close()

    # -- opening ----------------------------------------------------------------------------------------------------

    async def _until_open(self) -> None:
        if not self._opened:
            await asyncio.shield(self._ready)  # a waiter cancelled does not stop the opening the others share

    async def _open(self) -> None:
        failure: Failure | None = None
        try:
            async with asyncio.timeout(self._open_s):
                await self._handshake()
        except TimeoutError:
            failure = timed_out(self._open_s, "the MCP session did not open")
        except Failure as failed:
            failure = failed
        except asyncio.CancelledError:  # closed while opening
            failure = Failure(ENDED, broken=True)
        if failure is None:
            self._opened = True
            self._ready.set_result(None)
            return
        self._ready.set_exception(failure)
        if not self._closed:
            log.info("MCP session to %s could not be opened: %s", shown_url(self.endpoint.url), failure.error.message)

    async def _handshake(self) -> None:
        if self._invalid is not None:
            raise self._invalid
        params = {"protocolVersion": jsonrpc.PROTOCOL_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO}
        request_id = next(self._ids)
        response = await self._send(b"POST", jsonrpc.request(request_id, "initialize", params))
        session_id = response.header(b"mcp-session-id")
        result = await self._answer(response, request_id, Decoders.initialize)
        version = result.protocol_version
        if version not in jsonrpc.SUPPORTED:
            raise rpc_failure(INTERNAL_ERROR, f"Unsupported protocol version from the server: {version}")
        if session_id:
            self._session_id = self._headers["Mcp-Session-Id"] = session_id
        self._headers["MCP-Protocol-Version"] = version
        await self._notify(jsonrpc.INITIALIZED)

    # -- requests ---------------------------------------------------------------------------------------------------

    async def _rpc(self, method: str, params: dict[str, Any] | None, decoder: msgspec.json.Decoder[Incoming[R]]) -> R:
        request_id = next(self._ids)
        try:
            response = await self._send(b"POST", jsonrpc.request(request_id, method, params))
            return await self._answer(response, request_id, decoder)
        except asyncio.CancelledError:  # the caller gave up (or its time ran out): the server stops too
            self._spawn(self._cancel(request_id))
            raise

    async def _answer(self, response: http1.Response, request_id: int, decoder: msgspec.json.Decoder[Incoming[R]]) -> R:
        """The request's result, from a JSON body or an event stream; the connection is pooled again once the
        body has ended, closed if it was cut short."""
        try:
            message = await self._message(response, request_id, decoder)
        except BaseException:
            response.close()
            raise
        response.release()
        return _outcome(message)

    async def _message(
        self, response: http1.Response, request_id: int, decoder: msgspec.json.Decoder[Incoming[R]]
    ) -> Incoming[R]:
        if response.status >= 400:
            raise await self._status_failure(response)
        if response.status == 202:
            raise rpc_failure(INVALID_REQUEST, "server answered a request with 202 Accepted")
        kind = (response.header(b"content-type") or "").lower()
        if kind.startswith("application/json"):
            return _decoded(decoder, await _body(response, self._max_event_bytes))
        if kind.startswith("text/event-stream"):
            return await self._from_events(response, request_id, decoder)
        raise rpc_failure(INVALID_REQUEST, f"Unexpected content type: {kind}")

    async def _from_events(
        self, response: http1.Response, request_id: int, decoder: msgspec.json.Decoder[Incoming[R]]
    ) -> Incoming[R]:
        """The answer among the stream's messages: notifications (progress, logging) skipped, a server's request
        answered (ping), until the response with the request's id; then the stream's end, which the server sends
        at once, so that the connection is free for the next request when this one returns."""
        events = EventStream(self._max_event_bytes)
        while True:
            chunk = await _read(response)
            try:
                messages = events.feed(chunk)
            except EventTooLarge as exc:  # the SDK's bound, failing as the SDK's transport fails
                raise rpc_failure(CONNECTION_CLOSED, f"SSE stream failed: {exc}") from None
            for data in messages:
                message = _decoded(decoder, data)
                if message.method is not None:
                    if message.id is not None:
                        self._spawn(self._answer_server(message.id, message.method))
                elif message.id == request_id:
                    await _ended(response)
                    return message
            if not chunk:
                raise rpc_failure(CONNECTION_CLOSED, "SSE stream ended without a response")

    async def _status_failure(self, response: http1.Response) -> Failure:
        """An error status: its JSON-RPC error's message, if the body is one, else what the SDK says instead."""
        raw = await _drained(response, ERROR_BODY_BYTES)
        detail: str | None = None
        if (response.header(b"content-type") or "").lower().startswith("application/json"):
            try:
                error = Decoders.any.decode(raw).error
                detail = None if error is None else error.message
            except msgspec.MsgspecError:
                pass
        if detail is None and response.status == 404:
            detail = "Session terminated" if self._session_id is not None else "Not Found"
        return http_status(response.status, detail or "Server returned an error response")

    async def _send(self, method: bytes, body: bytes) -> http1.Response:
        """The response to `method` on the endpoint, after the redirects that are followed; raises `Failure` for
        a redirect outside the allowlist (nothing sent to it), one not followed, or no connection."""
        url = self.endpoint.url
        for _ in range(MAX_REDIRECTS + 1):
            response = await self._exchange(method, url, body)
            location = response.header(b"location") if response.status in REDIRECTS else None
            if location is None:
                return response
            response.release()
            target = urljoin(url, location)
            if not self._allowed(target):
                raise refused(response.status, shown_url(target))
            if response.status not in FOLLOWED or not _same_origin(url, target):
                break
            url = target
        message = (
            f"Redirect to {shown_url(target)} not followed; use that URL as the endpoint if it is the intended server"
        )
        raise rpc_failure(INVALID_REQUEST, message)

    async def _exchange(self, method: bytes, url: str, body: bytes) -> http1.Response:
        if self._shut:
            raise Failure(ENDED, broken=True)
        try:
            try:
                return await self._pool.request(method, url, body, self._headers)
            except http1.StaleConnection:
                if self._shut:  # closed by close() as it waited: it may have reached the server, never send it again
                    raise
                # A kept-alive connection the server had closed as the request went out: it never reached it.
                return await self._pool.request(method, url, body, self._headers)
        except http1.HTTPError as exc:
            raise unreachable(f"{type(exc).__name__}: {exc}") from None
        except ValueError:  # not an http(s) URL
            raise unreachable(f"not an http(s) URL: {shown_url(url)}") from None

    async def _notify(self, body: bytes) -> None:
        """POST a notification, or a reply to the server's request: answered 202, its status not read (the SDK
        reads none either)."""
        response = await self._send(b"POST", body)
        await _drained(response, ERROR_BODY_BYTES)

    # -- in the background --------------------------------------------------------------------------------------------

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        if self._closed:
            work.close()
            return
        self._background.keep(asyncio.create_task(work, context=contextvars.Context()))

    async def _cancel(self, request_id: int) -> None:
        params = {"requestId": request_id, "reason": "caller cancelled"}
        async with asyncio.timeout(CLOSE_S):
            await self._notify(jsonrpc.notification("notifications/cancelled", params))

    async def _answer_server(self, request_id: jsonrpc.Id, method: str) -> None:
        """A server's request on an answer's stream: ping is answered, anything else is not offered here."""
        if method == "ping":
            body = jsonrpc.reply(request_id, {})
        else:
            body = jsonrpc.reply(request_id, error=jsonrpc.RpcError(METHOD_NOT_FOUND, "Method not found"))
        async with asyncio.timeout(CLOSE_S):
            await self._notify(body)


def _outcome(message: Incoming[R]) -> R:
    if message.error is not None:
        raise rpc_failure(message.error.code, message.error.message)
    if message.result is None:
        raise rpc_failure(INTERNAL_ERROR, "ValidationError: the MCP server's response has no result")
    return message.result


def _decoded(decoder: msgspec.json.Decoder[Incoming[R]], data: bytes) -> Incoming[R]:
    try:
        return decoder.decode(data)
    except msgspec.MsgspecError as exc:
        error = jsonrpc.undecodable(exc)
        raise rpc_failure(error.code, error.message) from None


async def _read(response: http1.Response) -> bytes:
    try:
        return await response.read()
    except http1.HTTPError as exc:
        raise unreachable(f"{type(exc).__name__}: {exc}") from None


async def _ended(response: http1.Response) -> None:
    """Read what is left of the body until its end, which a server sends right after the last event (MCP: it
    SHOULD close the stream), so that the connection is pooled again before the next request looks for one. One
    that keeps its stream open costs `END_S`; `release` then waits for the end off the call's clock."""
    with contextlib.suppress(TimeoutError, Failure):
        async with asyncio.timeout(END_S):
            while await _read(response):
                pass


async def _body(response: http1.Response, limit: int) -> bytes:
    """The whole body, at most `limit` bytes: a larger one fails as an event past the bound does."""
    parts: list[bytes] = []
    size = 0
    while chunk := await _read(response):
        size += len(chunk)
        if size > limit:
            raise rpc_failure(CONNECTION_CLOSED, f"the MCP server's answer passed {limit} bytes")
        parts.append(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def _drained(response: http1.Response, keep: int) -> bytes:
    """The body's first `keep` bytes, the rest read off so the connection is pooled again (closed if it is long)."""
    try:
        return await _body(response, keep)
    except Failure:
        response.close()
        return b""
    finally:
        response.release()


def _same_origin(url: str, target: str) -> bool:
    """Within the endpoint's origin, as the SDK follows: the same scheme, host and port, or http to https on the
    same host with the default ports; and no credentials of the target's own."""
    a, b = urlsplit(url), urlsplit(target)
    if b.username is not None and b.username != a.username:
        return False
    if (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port):
        return True
    return (
        a.hostname == b.hostname
        and a.scheme == "http"
        and a.port in (None, 80)
        and b.scheme == "https"
        and b.port in (None, 443)
    )


def _fixed_headers(headers: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The headers on every request: the transport's, then the endpoint's own (values never shown)."""
    fixed = dict(FIXED)
    for name, value in headers:
        if not _TOKEN.fullmatch(name) or any(char in value for char in "\r\n\0"):
            message = f"The header {name!r} of the MCP server cannot be sent over HTTP"
            raise Failure(CallError("mcp_protocol_error", code=INVALID_REQUEST, message=message))
        if name.lower() not in RESERVED:
            fixed[name] = value
    return fixed


def _retrieved(future: asyncio.Future[None]) -> None:
    # An opening nobody waited on may fail: its exception is read here, not reported as unretrieved.
    if not future.cancelled():
        future.exception()
