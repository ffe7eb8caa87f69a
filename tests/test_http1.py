"""hotloop's HTTP/1.1 client (net/http1.py: engines' streams, MCP servers' requests), against scripted asyncio
servers on loopback: chunked, sized and until-close bodies, TLS, keep-alive reuse and its limits, a released
response whose end comes later (or never), flow control, each way a connection can fail (refused, stale, cut
mid-body, not HTTP, the caller gone), any method, and the response headers a pool captures."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import trustme

from hotloop.net import http1

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Engine:
    """A loopback server running `handler` per connection; counts connections and keeps the requests' heads."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.heads: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.closed = asyncio.Event()  # a connection's client side went away

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def request(self, reader: asyncio.StreamReader) -> bytes | None:
        """One request's body (its head kept in `heads`); None at the connection's end."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            self.closed.set()
            return None
        self.heads.append(head)
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        return await reader.readexactly(length)

    def url(self, scheme: str = "http") -> str:
        assert self.server is not None
        return f"{scheme}://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/completions"


@contextlib.asynccontextmanager
async def engine(handler: Callable[[Engine], Handler], tls: ssl.SSLContext | None = None) -> AsyncIterator[Engine]:
    running = Engine(lambda r, w: handler(running)(r, w))
    running.server = await asyncio.start_server(running._serve, "127.0.0.1", 0, ssl=tls)
    async with running.server:
        yield running


def chunked(*parts: bytes, end: bool = True) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts)
    return head + body + (b"0\r\n\r\n" if end else b"")


async def body_of(response: http1.Response) -> bytes:
    data = b""
    while part := await response.read():
        data += part
    return data


def pool(limit: int = 8) -> http1.Pool:
    return http1.Pool(limit, 2.0, {"Content-Type": "application/json", "User-Agent": "hotloop"})


def answering(*parts: bytes) -> Callable[[Engine], Handler]:
    """Every request on a connection gets the chunked stream of `parts`, a part a write."""

    def handler(engine: Engine) -> Handler:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while await engine.request(reader) is not None:
                writer.write(chunked(*parts, end=False))
                await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()

        return serve

    return handler


async def test_a_chunked_stream_then_the_same_connection_for_the_next_request() -> None:
    async with engine(answering(b"data: 1\n\n", b"data: 2\n\n", b"data: [DONE]\n\n")) as running:
        client = pool()
        for _ in range(3):
            response = await client.post(running.url(), b'{"x": 1}', {"traceparent": "00-abc-def-01"})
            assert response.status == 200
            assert await body_of(response) == b"data: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
            response.release()
            assert client.in_use == 0 and client.idle == 1
        client.close()
        port = running.url().split(":")[2].split("/")[0]
    assert running.connections == 1 and client.connections_made == 1
    head = running.heads[0].decode()
    assert head.startswith("POST /v1/completions HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{port}\r\n" in head
    assert "Content-Length: 8\r\n" in head and "traceparent: 00-abc-def-01\r\n" in head
    assert "User-Agent: hotloop\r\n" in head and "accept-encoding" not in head.lower()


async def test_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An https engine: the certificate is checked against the default trust store (here SSL_CERT_FILE's CA)."""
    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server_context)
    authority.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    async with engine(answering(b"data: secure\n\n"), tls=server_context) as running:
        untrusted = pool()
        with pytest.raises(http1.ConnectFailed, match="cannot connect"):
            await untrusted.post(running.url("https"), b"{}")
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
        client = pool()
        response = await client.post(running.url("https"), b"{}")
        assert await body_of(response) == b"data: secure\n\n"
        response.release()
        client.close()


async def test_sized_and_until_close_bodies() -> None:
    def handler(engine: Engine) -> Handler:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await engine.request(reader)
            if engine.connections == 1:
                writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 5\r\n\r\nnope!")
                await writer.drain()
                await engine.request(reader)
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil")
            await writer.drain()
            writer.write(b" closed")
            await writer.drain()

        return serve

    async with engine(handler) as running:
        client = pool()
        sized = await client.post(running.url(), b"{}")
        assert sized.status == 400 and await body_of(sized) == b"nope!"
        sized.release()
        until = await client.post(running.url(), b"{}")  # the same connection
        assert until.status == 200 and await body_of(until) == b"until closed"
        until.release()
        assert client.idle == 0 and client.in_use == 0  # a body that ended with its connection: nothing to reuse
    assert running.connections == 1


async def test_a_pooled_connection_closed_by_the_engine_is_stale() -> None:
    """The engine closes the kept-alive connection as the next request arrives: `StaleConnection`, which the
    backend resends for free; the same on a new connection is an ordinary `ConnectionClosed`."""

    def handler(engine: Engine) -> Handler:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if engine.connections == 1:
                await engine.request(reader)
                writer.write(chunked(b"data: 1\n\n"))
                await writer.drain()
            await engine.request(reader)  # then closed unanswered

        return serve

    async with engine(handler) as running:
        client = pool()
        first = await client.post(running.url(), b"{}")
        await body_of(first)
        first.release()
        with pytest.raises(http1.StaleConnection):
            await client.post(running.url(), b"{}")
        with pytest.raises(http1.ConnectionClosed):
            await client.post(running.url(), b"{}")
        assert client.in_use == 0
        assert client._slots is not None and client._slots._value == 8  # each failure gave its slot back once


async def test_a_cut_stream_fails_after_its_bytes_and_a_refused_connect_fails_at_once() -> None:
    def handler(engine: Engine) -> Handler:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await engine.request(reader)
            writer.write(chunked(b"data: 1\n\n", end=False))
            await writer.drain()
            writer.transport.abort()

        return serve

    async with engine(handler) as running:
        client = pool()
        response = await client.post(running.url(), b"{}")
        assert await response.read() == b"data: 1\n\n"
        with pytest.raises(http1.ConnectionClosed, match="mid-response"):
            await response.read()
        response.close()
        url = running.url()
    with pytest.raises(http1.ConnectFailed, match=r"cannot connect to 127\.0\.0\.1"):
        await client.post(url, b"{}")
    assert client.in_use == 0
    assert client._slots is not None and client._slots._value == 8


async def test_what_is_not_http_is_a_bad_response() -> None:
    def handler(engine: Engine) -> Handler:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await engine.request(reader)
            writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
            await writer.drain()
            await reader.read()

        return serve

    async with engine(handler) as running:
        with pytest.raises(http1.BadResponse):
            await pool().post(running.url(), b"{}")


async def test_a_released_response_is_reused_once_its_end_arrives_and_closed_if_it_does_not() -> None:
    ends = asyncio.Queue[bool]()  # per request: send the terminating chunk (late) or never

    def handler(engine: Engine) -> Handler:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while await engine.request(reader) is not None:
                writer.write(chunked(b"data: [DONE]\n\n", end=False))
                await writer.drain()
                if await ends.get():
                    await asyncio.sleep(0.05)
                    writer.write(b"0\r\n\r\n")
                    await writer.drain()

        return serve

    async with engine(handler) as running:
        client = pool()
        ends.put_nowait(True)
        response = await client.post(running.url(), b"{}")
        assert await response.read() == b"data: [DONE]\n\n"
        response.release()  # the end is on its way
        assert client.in_use == 1
        async with asyncio.timeout(5):
            while client.in_use:
                await asyncio.sleep(0.005)
        assert client.idle == 1
        ends.put_nowait(False)
        response = await client.post(running.url(), b"{}")  # the same connection
        assert await response.read() == b"data: [DONE]\n\n"
        response.release()  # the end never comes: closed after DRAIN_S
        async with asyncio.timeout(5):
            await running.closed.wait()
        assert client.in_use == 0 and client.idle == 0
    assert running.connections == 1


async def test_a_reader_that_falls_behind_pauses_the_socket_and_loses_nothing() -> None:
    parts = [bytes([65 + n % 26]) * 65536 for n in range(160)]  # 10 MiB, more than READ_LIMIT

    async with engine(answering(*parts)) as running:
        client = pool()
        response = await client.post(running.url(), b"{}")
        await asyncio.sleep(0.3)  # the engine writes while nobody reads
        assert await body_of(response) == b"".join(parts)
        response.release()
        client.close()


async def test_the_limit_holds_requests_until_a_connection_is_free() -> None:
    async with engine(answering(b"data: 1\n\n")) as running:
        client = pool(limit=1)
        first = await client.post(running.url(), b"{}")
        second = asyncio.ensure_future(client.post(running.url(), b"{}"))
        await asyncio.sleep(0.05)
        assert not second.done()
        await body_of(first)
        first.release()
        response = await asyncio.wait_for(second, 5)
        assert await body_of(response) == b"data: 1\n\n"
        response.release()
        client.close()
    assert running.connections == 1


async def test_a_caller_gone_while_waiting_closes_the_connection() -> None:
    """The response's head has not come (the engine is prefilling); the turn is cancelled: the engine sees its
    client go, and the slot is free again."""

    def handler(engine: Engine) -> Handler:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await engine.request(reader)
            await engine.request(reader)  # waits for a second request or the connection's end

        return serve

    async with engine(handler) as running:
        client = pool(limit=1)
        waiting = asyncio.ensure_future(client.post(running.url(), b"{}"))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        async with asyncio.timeout(5):
            await running.closed.wait()
        assert client.in_use == 0 and client.idle == 0


def test_targets() -> None:
    assert http1.target("http://engine:8000/v1/completions") == http1.Target(
        http1.Origin("http", "engine", 8000), b"/v1/completions", b"engine:8000"
    )
    assert http1.target("https://api.example.com/v1/chat/completions?x=1").host == b"api.example.com"
    assert http1.target("https://api.example.com/v1/chat/completions?x=1").path == b"/v1/chat/completions?x=1"
    assert http1.target("http://[::1]:9000/v1").host == b"[::1]:9000"
    with pytest.raises(ValueError):
        http1.target("ftp://engine/v1")


async def test_any_method_and_the_headers_asked_for() -> None:
    """`request` sends any method (a DELETE with no body); a pool built to capture headers keeps those, and only
    those, on its responses; one built without keeps none."""

    def handler(engine: Engine) -> Handler:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while await engine.request(reader) is not None:
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: abc\r\n"
                    b"Set-Cookie: no\r\nContent-Length: 2\r\n\r\n{}"
                )
                await writer.drain()

        return serve

    async with engine(handler) as running:
        capturing = http1.Pool(4, 2.0, {}, capture=(b"content-type", b"mcp-session-id"))
        response = await capturing.request(b"DELETE", running.url(), b"", {"Mcp-Session-Id": "abc"})
        assert (response.status, await body_of(response)) == (200, b"{}")
        assert response.header(b"content-type") == "application/json" and response.header(b"mcp-session-id") == "abc"
        assert response.header(b"set-cookie") is None and response.headers == [
            (b"content-type", b"application/json"),
            (b"mcp-session-id", b"abc"),
        ]
        response.release()
        plain = pool()
        response = await plain.post(running.url(), b"{}")
        assert await body_of(response) == b"{}" and response.headers == [] and response.header(b"content-type") is None
        response.release()
        capturing.close()
        plain.close()
    assert running.heads[0].startswith(b"DELETE /v1/completions HTTP/1.1\r\n")
    assert b"Content-Length: 0\r\n" in running.heads[0] and b"Mcp-Session-Id: abc\r\n" in running.heads[0]
    assert running.heads[1].startswith(b"POST /v1/completions HTTP/1.1\r\n")
