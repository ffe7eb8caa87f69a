"""The upstream HTTP client's connections: one keep-alive connection serves turn after turn (the end of each stream is
read, so it goes back to the pool), and a request lost to a pooled connection that the engine closed as it went out
(llama.cpp's server does so now and then right after a streamed response) is sent again at once on a new connection,
without spending a retry and without counting against the replica."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from hotloop.backends.base import Finished, GenerationRequest, TextDelta
from hotloop.backends.local.gguf import smollm2_chat_format
from hotloop.backends.upstream.tokens import TokensBackend
from hotloop.config import Upstream

CHUNKS = [
    {"content": "Hello", "stop": False},
    {"content": "", "stop": True, "stop_type": "eos", "tokens_evaluated": 3, "tokens_predicted": 1},
]


class StaleEngine:
    """A llama.cpp-like /completion server; with `stale`, on its first connection it answers one request, then closes
    the connection when the next request arrives on it, without a response."""

    def __init__(self, stale: bool = True) -> None:
        self.stale = stale
        self.connections = 0
        self.answered = 0
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        first = self.stale and self.connections == 1
        served = 0
        try:
            while await _read_request(reader):
                if first and served == 1:
                    return  # the stale keep-alive connection: closed, nothing answered
                writer.write(_stream_response())
                await writer.drain()
                served += 1
                self.answered += 1
        except (asyncio.CancelledError, asyncio.IncompleteReadError, ConnectionError):
            return  # the server closing, or the client hanging up: nothing to answer
        finally:
            writer.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"


async def _read_request(reader: asyncio.StreamReader) -> bool:
    head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
    if not head:
        return False
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        0,
    )
    await reader.readexactly(length)
    return True


def _stream_response() -> bytes:
    out = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    for chunk in CHUNKS:
        data = f"data: {json.dumps(chunk)}\n\n".encode()
        out += f"{len(data):x}\r\n".encode() + data + b"\r\n"
    return out + b"0\r\n\r\n"


async def _started(stale: bool) -> StaleEngine:
    engine = StaleEngine(stale)
    engine.server = await asyncio.start_server(engine.handle, "127.0.0.1", 0)
    return engine


@pytest.fixture
async def engine() -> AsyncIterator[StaleEngine]:
    stale = await _started(stale=True)
    assert stale.server is not None
    async with stale.server:
        yield stale


async def _turns(engine: StaleEngine, count: int) -> TokensBackend:
    # retries=0: a failure would surface as a BackendError here.
    upstream = Upstream(backend="tokens", dialect="llamacpp", url=engine.url, retries=0)
    backend = TokensBackend("m", upstream, smollm2_chat_format())
    try:
        for _ in range(count):
            deltas = [delta async for delta in backend.generate(GenerationRequest(prompt_tokens=[1, 2, 3]))]
            assert deltas[0] == TextDelta("Hello") and isinstance(deltas[-1], Finished)
            # A released response's end may still be on its way (http1.py `release`); once read, the connection is
            # pooled again for the next turn.
            pool = backend._http()
            async with asyncio.timeout(5):
                while pool.in_use:
                    await asyncio.sleep(0.001)
            assert pool.idle == 1
    finally:
        await backend.close()
    return backend


async def test_one_connection_serves_turn_after_turn() -> None:
    engine = await _started(stale=False)
    assert engine.server is not None
    async with engine.server:
        await _turns(engine, 3)
    assert (engine.connections, engine.answered) == (1, 3)


async def test_a_request_lost_to_a_stale_connection_is_sent_again_for_free(engine: StaleEngine) -> None:
    backend = await _turns(engine, 2)  # the second request goes out on the pooled connection, which is then closed
    assert (engine.connections, engine.answered) == (2, 2)  # the resend took a new connection
    [reading] = backend.router.readings()
    assert reading.up and backend.router.replicas[0].failures == 0
