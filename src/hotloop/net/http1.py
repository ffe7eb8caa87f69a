"""hotloop's own HTTP/1.1 client: asyncio protocols whose responses httptools parses (llhttp, the C parser uvicorn
reads requests with), pooled per origin with keep-alive. Engines' streams (backends/upstream/) and MCP servers'
requests (mcp/streamable.py) go through it.

Per chunk of a streamed body this costs one `data_received`, llhttp's callbacks (`on_body` appends the bytes) and
the reader woken if it waits: no stream-reader object, timer or buffer bookkeeping per chunk, and per request one
write of the head and body. aiohttp spent ~0.5 ms of a 4 ms turn on those (docs/benchmarks-history.md, issue 22).

What a caller gets: `Pool.request(method, url, body, headers)` (`Pool.post` for a POST) sends the request and
returns the `Response` once its head has arrived; `Response.header(name)` gives a header the pool was built to
`capture` (no other header is kept); `Response.read()` gives the body bytes that arrived since the last read (`b""`
at its end); `Response.release()` hands the connection back once the body has ended (at once when it has, else
when its end arrives within `DRAIN_S`, else it is closed); `Response.close()` closes it at once, which is how a
server learns to stop. Failures are `HTTPError`s: `ConnectFailed` (no connection), `StaleConnection` (a pooled
connection the server had closed: the request never reached it), `ConnectionClosed` and `BadResponse`.

What it does not do, because engines and MCP servers do not need it: proxies, redirects (a caller sees the 3xx and
its `Location`), cookies, compression (no Accept-Encoding is sent, so bodies come as they are), HTTP/2,
`Expect: 100-continue`.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import urllib.parse
from collections.abc import Coroutine, Iterable
from typing import Any, NamedTuple, cast

import httptools

READ_LIMIT = 4 << 20  # body bytes buffered before the socket is no longer read (the reader has fallen behind)
DRAIN_S = 0.25  # the longest wait for a released response's end (it normally follows its last event at once)
IDLE_S = 15.0  # a pooled connection idle longer is closed rather than reused (servers close theirs after 5-60 s)


class HTTPError(Exception):
    """The connection to the server failed."""


class ConnectFailed(HTTPError):
    """No connection could be made (refused, unresolvable, timed out, TLS)."""


class StaleConnection(HTTPError):
    """A pooled keep-alive connection closed before any answer: the server had closed it as the request went out."""


class ConnectionClosed(HTTPError):
    """The server closed or reset the connection before the response ended."""


class BadResponse(HTTPError):
    """What came back is not HTTP/1.1."""


class Origin(NamedTuple):
    scheme: str
    host: str
    port: int


class Target(NamedTuple):
    origin: Origin
    path: bytes  # the request target: path and query
    host: bytes  # the Host header's value


def target(url: str) -> Target:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    default = port == (443 if parts.scheme == "https" else 80)
    header = shown if default else f"{shown}:{port}"
    return Target(Origin(parts.scheme, host, port), path.encode(), header.encode())


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection and the response being read on it; llhttp calls the `on_*` methods."""

    def __init__(self, pool: Pool, origin: Origin) -> None:
        self.pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.parser: httptools.HttpResponseParser | None = None
        self.head: asyncio.Future[None] | None = None  # set when the response's head has arrived
        self.waiter: asyncio.Future[None] | None = None  # a reader waiting for body bytes
        self.body: list[bytes] = []
        self.buffered = 0
        self.paused = False
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []  # the response's headers the pool captures, names lowercased
        self.framed = False  # Content-Length or chunked: the body has an end of its own (else: until closed)
        self.answered = False  # some byte of a response arrived
        self.complete = False  # the response's body has ended
        self.error: HTTPError | None = None
        self.reusable = True
        self.releasing: asyncio.TimerHandle | None = None  # released before its end: closed if it does not come
        self.idle_since = 0.0

    # -- asyncio ----------------------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses

    def data_received(self, data: bytes) -> None:
        self.answered = True
        if self.parser is None:  # nothing asked: a server speaking out of turn
            self._fail(BadResponse("The server sent bytes no request asked for."))
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(BadResponse(f"The server's response is not HTTP/1.1: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self.pool.forget(self)
        if self.parser is not None and not self.complete:
            if self.head is not None and self.head.done() and not self.framed:
                self._ended()  # a body that ends when the connection does
            elif not self.answered:
                self._fail(StaleConnection("The server closed the connection before answering."))
            else:
                self._fail(ConnectionClosed(f"The server closed the connection mid-response ({exc or 'EOF'})."))
        self.transport = None

    # -- llhttp -----------------------------------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered == b"content-length" or (lowered == b"transfer-encoding" and b"chunked" in value.lower()):
            self.framed = True
        if lowered in self.pool.capture:  # an empty set for engines: nothing kept
            self.headers.append((lowered, value))

    def on_headers_complete(self) -> None:
        assert self.parser is not None
        self.status = self.parser.get_status_code()
        self.reusable = self.parser.should_keep_alive()
        if self.head is not None and not self.head.done():
            self.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.buffered += len(body)
        if self.buffered > READ_LIMIT and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self._ended()

    # -- the response's side ----------------------------------------------------------------------------------------

    def send(self, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self.parser = httptools.HttpResponseParser(self)
        self.head, self.waiter = loop.create_future(), None
        self.body, self.buffered, self.status, self.error, self.headers = [], 0, 0, None, []
        self.framed = self.answered = self.complete = False
        self.transport.writelines((head, body))

    async def read(self) -> bytes:
        while not self.body:
            if self.complete:
                return b""
            if self.error is not None:
                raise self.error
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        data = self.body[0] if len(self.body) == 1 else b"".join(self.body)
        self.body.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    def release(self) -> None:
        if self.complete:
            self.pool.give_back(self)
        elif self.transport is not None:
            self.releasing = asyncio.get_running_loop().call_later(DRAIN_S, self.close)
        else:
            self.pool.forget(self)

    def close(self) -> None:
        self.reusable = False
        if self.releasing is not None:
            self.releasing.cancel()
            self.releasing = None
        if self.transport is not None:
            self.transport.close()  # connection_lost follows: the pool forgets it
        else:
            self.pool.forget(self)

    def _ended(self) -> None:
        self.complete = True
        self._wake()
        if self.releasing is not None:  # released before its end: now it may be reused
            self.releasing.cancel()
            self.releasing = None
            self.pool.give_back(self)

    def _fail(self, error: HTTPError) -> None:
        self.reusable = False
        if self.error is None:
            self.error = error
        if self.head is not None and not self.head.done():
            self.head.set_exception(error)
            self.head.exception()  # retrieved: a request cancelled meanwhile leaves no "never retrieved" warning
        self._wake()
        if self.transport is not None:
            self.transport.close()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class Response:
    """One response: its status, the headers its pool captures, its body as it arrives, then released or closed."""

    __slots__ = ("_conn", "_done", "headers", "status")

    def __init__(self, conn: _Connection) -> None:
        self._conn = conn
        self._done = False
        self.status = conn.status
        self.headers = conn.headers

    def header(self, name: bytes) -> str | None:
        """The first value of header `name` (lowercase; one of the pool's `capture`), None when it was not sent."""
        for captured, value in self.headers:
            if captured == name:
                return value.decode("latin-1")
        return None

    async def read(self) -> bytes:
        """The body bytes that arrived since the last read, waiting for some; `b""` once the body has ended."""
        return await self._conn.read()

    def release(self) -> None:
        """Done with it: the connection goes back to the pool once the body has ended (within `DRAIN_S`)."""
        if not self._done:
            self._done = True
            self._conn.release()

    def close(self) -> None:
        """Cut it short: the connection is closed now (the server sees the client go)."""
        if not self._done:
            self._done = True
            self._conn.close()


class Pool:
    """Keep-alive connections per origin, at most `limit` in use at once (0: no limit); `headers` go on every
    request; `capture`: the response headers kept for `Response.header` (lowercase names), none by default."""

    def __init__(
        self, limit: int, connect_timeout_s: float, headers: dict[str, str], *, capture: Iterable[bytes] = ()
    ) -> None:
        self.limit = limit
        self.connect_timeout_s = connect_timeout_s
        self.capture = frozenset(capture)
        self._headers = "".join(f"{name}: {value}\r\n" for name, value in headers.items()).encode()
        self._idle: dict[Origin, list[_Connection]] = {}
        self._busy: set[_Connection] = set()
        self._slots: asyncio.Semaphore | None = None
        self._targets: dict[str, Target] = {}
        self._tls: ssl.SSLContext | None = None
        self.connections_made = 0  # tests and the bench read it

    @property
    def in_use(self) -> int:
        """Connections a response holds now (a released one until its end has been read)."""
        return len(self._busy)

    @property
    def idle(self) -> int:
        """Connections waiting in the pool for the next request."""
        return sum(len(idle) for idle in self._idle.values())

    def post(self, url: str, body: bytes, headers: dict[str, str] | None = None) -> Coroutine[Any, Any, Response]:
        """`request(b"POST", …)`: its coroutine, with no frame of its own."""
        return self.request(b"POST", url, body, headers)

    async def request(
        self, method: bytes, url: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> Response:
        """Send `body` to `url` and wait for the response's head; a cancellation closes the connection."""
        where = self._targets.get(url)
        if where is None:
            where = self._targets[url] = target(url)
        head = b"%s %s HTTP/1.1\r\nHost: %s\r\n%sContent-Length: %d\r\n" % (
            method,
            where.path,
            where.host,
            self._headers,
            len(body),
        )
        if headers:
            head += "".join(f"{name}: {value}\r\n" for name, value in headers.items()).encode()
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit) if self.limit > 0 else None
        if self._slots is not None:
            await self._slots.acquire()
        conn = self._pooled(where.origin)
        reused = conn is not None
        try:
            if conn is None:
                conn = await self._connect(where.origin)
            self._busy.add(conn)
            conn.send(head + b"\r\n", body)
            assert conn.head is not None
            try:
                await conn.head
            except StaleConnection:
                if reused:
                    raise
                raise ConnectionClosed("The server closed a new connection before answering.") from None
            return Response(conn)
        except BaseException:
            if conn is None:
                self._free()  # no connection held the slot
            else:  # a no-op when the connection closed while the request waited (`forget` freed it then)
                self._leave(conn)
                conn.close()
            raise

    def _pooled(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.transport is not None and not conn.transport.is_closing() and now - conn.idle_since < IDLE_S:
                return conn
            conn.close()
        return None

    async def _connect(self, origin: Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        tls = self._context() if origin.scheme == "https" else None
        conn = _Connection(self, origin)
        try:
            async with asyncio.timeout(self.connect_timeout_s or None):
                await loop.create_connection(
                    lambda: conn, origin.host, origin.port, ssl=tls, server_hostname=origin.host if tls else None
                )
        except TimeoutError:
            limit = self.connect_timeout_s
            raise ConnectFailed(f"cannot connect to {origin.host}:{origin.port} within {limit:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
            raise ConnectFailed(f"cannot connect to {origin.host}:{origin.port}: {reason}") from None
        self.connections_made += 1
        return conn

    def _context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    def give_back(self, conn: _Connection) -> None:
        """A response read to its end: its connection waits for the next request (or closes, if it cannot)."""
        self._leave(conn)
        if conn.reusable and conn.transport is not None and not conn.transport.is_closing():
            conn.parser = None
            conn.idle_since = time.monotonic()
            self._idle.setdefault(conn.origin, []).append(conn)
        else:
            conn.close()

    def forget(self, conn: _Connection) -> None:
        """A connection that closed: no longer idle, its slot free."""
        self._leave(conn)
        idle = self._idle.get(conn.origin)
        if idle and conn in idle:
            idle.remove(conn)

    def _leave(self, conn: _Connection) -> None:
        """`conn` no longer holds a slot (once: a later call is a no-op)."""
        if conn in self._busy:
            self._busy.discard(conn)
            self._free()

    def _free(self) -> None:
        if self._slots is not None:
            self._slots.release()

    def close(self) -> None:
        for conn in [*self._busy, *(conn for idle in self._idle.values() for conn in idle)]:
            conn.close()
        self._idle.clear()
