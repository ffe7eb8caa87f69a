"""What the upstream backends share (docs/backends.md): the pooled HTTP client, replica routing, retries before the
first token, the streamed payloads (sse.py), and an engine's failures as `BackendError`s.

`chat.py` (chat messages) and `tokens.py` (token ids) subclass `UpstreamBackend` with their request body and
their stream reader. One pooled `aiohttp.ClientSession` per upstream: its C parser reads an engine's stream at a
fraction of the CPU a pure-Python HTTP stack spends per chunk (httpx took a third of a gateway's CPU in front of
sim-engine; docs/benchmarks.md). A failure before the first token (unreachable,
5xx, a stall, an error chunk) is retried `retries` times, on another replica when there is one; after it, never
(the client has seen output). Closing the generator (the client went away, the response was cancelled, hotloop's
own stall timer) closes the upstream connection, which is how an engine learns to stop generating.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncGenerator, Coroutine, Sequence
from typing import Any, Protocol

import aiohttp
import msgspec

from hotloop.backends.base import BackendError, Delta, Finished, GenerationRequest
from hotloop.backends.upstream.routing import Router
from hotloop.backends.upstream.sse import ErrorLine, SSEPayloads
from hotloop.config import Upstream
from hotloop.stall import StallTimer

log = logging.getLogger("hotloop.upstream")
RETRYABLE_STATUS = frozenset({408, 500, 502, 503, 504})
ERROR_BODY_BYTES = 4096
# A request that fails this way before any response went out on a connection the engine had closed (a fresh
# connection that cannot be made fails with ClientConnectorError instead).
_STALE = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)
# How much of a stream aiohttp buffers before it stops reading the socket (a line may be longer: sse.py).
READ_BUFFER = 4 << 20
DRAIN_S = 0.25  # the longest wait for a stream's end after its last event (it normally follows at once)
_CONTEXT_HINTS = ("context length", "context window", "context size", "too many tokens", "maximum context")


class Retryable(Exception):
    """A failure that may be retried when nothing has been yielded yet."""

    def __init__(self, error: BackendError) -> None:
        super().__init__(str(error))
        self.error = error


class StaleConnection(Retryable):
    """The engine closed a pooled keep-alive connection as the request went out on it, before any response.

    HTTP lets a server close an idle keep-alive connection at any time, and llama.cpp's server sometimes closes one
    just after a streamed response: a request sent on it at once gets no answer. Such a request never reached the
    engine's handler, so it is sent again at once on a new connection, and it is not the replica's failure."""


class StreamReader(Protocol):
    """One attempt's stream: each `data:` payload in, hotloop deltas out."""

    started: bool  # a delta has been yielded: no retry from here on
    done: bool  # the last chunk has been read (llama.cpp's `stop: true`): stop reading

    def feed(self, data: bytes) -> Sequence[Delta]:
        """One `data:` payload (JSON, undecoded)."""
        ...

    def end(self) -> Sequence[Delta]:
        """The deltas after the stream's last chunk, `Finished` last; `Retryable` when the stream was cut short."""
        ...


class _Drains:
    """Finished streams whose end is still being read (`_drain`), off the turns' clock; stopped on close."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, drain: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(drain)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class UpstreamBackend:
    """A `Backend` whose engine is at the other end of HTTP; a subclass gives the body and the stream reader."""

    path = ""  # appended to a replica's URL

    def __init__(self, name: str, upstream: Upstream) -> None:
        self.model = upstream.upstream_model or name
        self.upstream = upstream
        # Several URLs are replicas (routing.py): a chain sticks to the one that served its last turn.
        self.router = Router(
            name,
            [url.rstrip("/") for url in upstream.base_urls()],
            max_in_flight=upstream.replica_max_in_flight,
            failures=upstream.replica_failures,
            cooldown_s=upstream.down_cooldown_s,
        )
        self._client: aiohttp.ClientSession | None = None
        self._drains = _Drains()

    def body(self, request: GenerationRequest) -> dict[str, Any]:
        raise NotImplementedError

    def reader(self, request: GenerationRequest) -> StreamReader:
        """A fresh reader for one attempt."""
        raise NotImplementedError

    def _http(self) -> aiohttp.ClientSession:
        # Created on first use, inside the serving event loop its pooled connections belong to.
        if self._client is None:
            up = self.upstream
            headers = {"content-type": "application/json"}
            if up.api_key:
                headers["authorization"] = f"Bearer {up.api_key}"
            # No total limit (a long answer is fine), and no `sock_read`: aiohttp re-arms that timer on every chunk
            # the socket delivers (~10 µs each); `_attempt` bounds each of its reads by `read_timeout_s` instead.
            timeout = aiohttp.ClientTimeout(total=None, connect=up.connect_timeout_s, sock_connect=up.connect_timeout_s)
            connector = aiohttp.TCPConnector(limit=up.max_connections, limit_per_host=up.max_connections)
            self._client = aiohttp.ClientSession(
                connector=connector,
                timeout=timeout,
                headers=headers,
                auto_decompress=False,
                trust_env=False,
                read_bufsize=READ_BUFFER,
            )
        return self._client

    async def close(self) -> None:
        await self._drains.stop()
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        payload = msgspec.json.encode(self.body(request))
        tried: set[int] = set()
        attempt = 0
        resent = False  # a request lost to a stale pooled connection is sent again once, for free
        while True:
            replica, _ = self.router.choose(request.previous_response_id, frozenset(tried))
            url = replica.url + self.path
            reader = self.reader(request)
            self.router.start(replica)
            try:
                # aclosing: a consumer that stops early closes the attempt, and with it the upstream connection, now.
                headers = {"traceparent": request.traceparent} if request.traceparent else None
                async with contextlib.aclosing(self._attempt(url, payload, reader, headers)) as deltas:
                    async for delta in deltas:
                        if isinstance(delta, Finished):  # before it is yielded: a consumer stops at `Finished`
                            self.router.succeeded(replica, request.response_id)
                        yield delta
                return
            except Retryable as failure:
                if isinstance(failure, StaleConnection) and not resent:
                    resent = True  # at once, not counted against the replica or `retries`
                    log.debug("upstream %s closed a pooled connection unanswered; sent again", url)
                    continue
                self.router.failed(replica)
                if reader.started or attempt >= self.upstream.retries:
                    raise failure.error from None
                attempt += 1
                tried.add(replica.index)
                if len(tried) >= len(self.router.replicas):
                    tried.clear()  # every replica failed once: back off, then try them again
                    await asyncio.sleep(min(1.0, 0.05 * 2**attempt))
                log.warning("upstream %s failed before the first token (%s); retry %d", url, failure, attempt)
            finally:
                self.router.end(replica)

    async def _attempt(
        self, url: str, payload: bytes, reader: StreamReader, headers: dict[str, str] | None = None
    ) -> AsyncGenerator[Delta, None]:
        client = self._http()
        response: aiohttp.ClientResponse | None = None
        silence = StallTimer(self.upstream.read_timeout_s, functools.partial(_silent, url))
        try:
            response = await silence.wait(client.post(url, data=payload, headers=headers))
            if response.status >= 400:
                raise await silence.wait(status_error(url, response))
            content, stream, ended = response.content, SSEPayloads(), False
            while not ended:
                chunk = await silence.wait(content.readany())
                ended = not chunk
                for data in stream.feed(chunk):
                    if isinstance(data, ErrorLine):
                        raise mid_stream_error(data.raw)
                    if data == b"[DONE]":
                        ended = True
                        break
                    for delta in reader.feed(data):
                        yield delta
                    if reader.done:
                        ended = True
                        break
            self._drains.spawn(_drain(response))  # off the turn's clock: the connection goes back to the pool
            response = None
        except TimeoutError:  # aiohttp's connect timeout (the read timeout is `silence`'s)
            raise Retryable(BackendError(f"The upstream engine did not connect ({url}).")) from None
        except aiohttp.ClientError as exc:
            error = BackendError(f"The upstream engine failed: {type(exc).__name__} {exc} ({url}).")
            if isinstance(exc, _STALE) and response is None:  # no answer yet: the request died on a closed connection
                raise StaleConnection(error) from None
            raise Retryable(error) from None
        finally:
            silence.close()
            if response is not None:  # cut short (an error, the client gone): closing it tells the engine to stop
                response.close()
        for delta in reader.end():
            yield delta


def _silent(url: str, limit: float) -> Retryable:
    return Retryable(BackendError(f"The upstream engine sent nothing for {limit:g} s ({url})."))


async def _drain(response: aiohttp.ClientResponse) -> None:
    """Read a finished stream's end (llama.cpp's server sends it ~0.4 ms after its last event), so the connection
    goes back to the pool: a response closed unread closes its connection, and each turn would open a new one (a
    TLS handshake to a remote engine). An engine that keeps the stream open past `DRAIN_S` loses the connection."""
    try:
        async with asyncio.timeout(DRAIN_S):
            while await response.content.read(1 << 16):
                pass
        response.release()  # read to its end: the connection goes back to the pool
    except (TimeoutError, aiohttp.ClientError):
        response.close()
    except BaseException:
        response.close()
        raise


async def status_error(url: str, response: aiohttp.ClientResponse) -> Exception:
    """An HTTP error from the engine as a `BackendError` with the closest `response.failed` code."""
    try:
        raw = await response.content.read(ERROR_BODY_BYTES)
    except aiohttp.ClientError:
        raw = b""
    detail = error_message(raw[:ERROR_BODY_BYTES])
    status = response.status
    message = f"The upstream engine answered {status}: {detail}"
    if status == 429:
        return BackendError(message, code="rate_limit_exceeded")
    if "context_length_exceeded" in detail or any(hint in detail.lower() for hint in _CONTEXT_HINTS):
        return BackendError(message, code="context_length_exceeded")
    error = BackendError(f"{message} ({url})")
    return Retryable(error) if status in RETRYABLE_STATUS else error


def engine_ms(timings: Any) -> float | None:
    """The engine's own milliseconds from llama.cpp's `timings` (in /completion and in chat completions)."""
    if not isinstance(timings, dict):
        return None
    total = 0.0
    for key in ("prompt_ms", "predicted_ms"):
        part = timings.get(key)
        if not isinstance(part, int | float) or isinstance(part, bool):
            return None
        total += part
    return total


def preview(data: bytes | str, chars: int = 200) -> str:
    """The start of a payload, for an error message."""
    text = data if isinstance(data, str) else data[: chars * 4].decode(errors="replace")
    return text[:chars]


def mid_stream_error(raw: bytes) -> Retryable:
    """An error the engine sent in its stream (an error chunk, llama.cpp's `error:` line)."""
    return Retryable(BackendError(f"The upstream engine failed mid-stream: {error_message(raw)}"))


def error_message(raw: bytes) -> str:
    """The message of OpenAI's `{"error": {"message", "code"}}`, Ollama's `{"error": "…"}`, or the raw text."""
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return raw.decode("utf-8", "replace").strip()[:500] or "(no body)"
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        # A string code says something ("context_length_exceeded"); llama.cpp's numeric one repeats the status.
        code = error.get("code") if isinstance(error.get("code"), str) else None
        parts = [str(part) for part in (error.get("message"), code) if part]
        return " ".join(parts) or str(error)[:500]
    return str(error)[:500]
