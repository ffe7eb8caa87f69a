"""What the upstream backends share (docs/backends.md): the pooled HTTP client, replica routing, retries before the
first token, the streamed lines, and an engine's failures as `BackendError`s.

`openai_chat.py` (chat messages) and `tokens.py` (token ids) subclass `UpstreamBackend` with their request body and
their stream reader. One pooled `httpx.AsyncClient` per upstream. A failure before the first token (unreachable,
5xx, a stall, an error chunk) is retried `retries` times, on another replica when there is one; after it, never
(the client has seen output). Closing the generator (the client went away, the response was cancelled, hotloop's
own stall timer) closes the upstream connection, which is how an engine learns to stop generating.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Sequence
from typing import Any, Protocol

import httpx
import msgspec

from hotloop.backends.base import BackendError, Delta, Finished, GenerationRequest
from hotloop.backends.routing import Router
from hotloop.config import Upstream

log = logging.getLogger("hotloop.upstream")
RETRYABLE_STATUS = frozenset({408, 500, 502, 503, 504})
ERROR_BODY_BYTES = 4096
_CONTEXT_HINTS = ("context length", "context window", "context size", "too many tokens", "maximum context")


class Retryable(Exception):
    """A failure that may be retried when nothing has been yielded yet."""

    def __init__(self, error: BackendError) -> None:
        super().__init__(str(error))
        self.error = error


class StreamReader(Protocol):
    """One attempt's stream: each `data:` payload in, hotloop deltas out."""

    started: bool  # a delta has been yielded: no retry from here on
    done: bool  # the last chunk has been read (llama.cpp's `stop: true`): stop reading

    def feed(self, data: str) -> Sequence[Delta]: ...

    def end(self) -> Sequence[Delta]:
        """The deltas after the stream's last chunk, `Finished` last; `Retryable` when the stream was cut short."""
        ...


class UpstreamBackend:
    """A `Backend` whose engine is at the other end of HTTP; a subclass gives the body and the stream reader."""

    path = ""  # appended to a replica's URL

    def __init__(self, name: str, upstream: Upstream) -> None:
        self.model = upstream.upstream_model or name
        self.upstream = upstream
        # Several URLs are replicas (backends/routing.py): a chain sticks to the one that served its last turn.
        self.router = Router(
            name,
            [url.rstrip("/") for url in upstream.base_urls()],
            max_in_flight=upstream.replica_max_in_flight,
            failures=upstream.replica_failures,
            cooldown_s=upstream.down_cooldown_s,
        )
        self._client: httpx.AsyncClient | None = None

    def body(self, request: GenerationRequest) -> dict[str, Any]:
        raise NotImplementedError

    def reader(self, request: GenerationRequest) -> StreamReader:
        """A fresh reader for one attempt."""
        raise NotImplementedError

    def _http(self) -> httpx.AsyncClient:
        # Created on first use, inside the serving event loop its pooled connections belong to.
        if self._client is None:
            up = self.upstream
            headers = {"content-type": "application/json"}
            if up.api_key:
                headers["authorization"] = f"Bearer {up.api_key}"
            timeout = httpx.Timeout(up.read_timeout_s, connect=up.connect_timeout_s, pool=up.connect_timeout_s)
            limits = httpx.Limits(max_connections=up.max_connections, max_keepalive_connections=up.max_connections)
            self._client = httpx.AsyncClient(timeout=timeout, limits=limits, headers=headers)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        payload = msgspec.json.encode(self.body(request))
        tried: set[int] = set()
        attempt = 0
        while True:
            replica, _ = self.router.choose(request.previous_response_id, frozenset(tried))
            url = replica.url + self.path
            reader = self.reader(request)
            self.router.start(replica)
            try:
                # aclosing: a consumer that stops early closes the attempt, and with it the upstream connection, now.
                async with contextlib.aclosing(self._attempt(url, payload, reader)) as deltas:
                    async for delta in deltas:
                        if isinstance(delta, Finished):  # before it is yielded: a consumer stops at `Finished`
                            self.router.succeeded(replica, request.response_id)
                        yield delta
                return
            except Retryable as failure:
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

    async def _attempt(self, url: str, payload: bytes, reader: StreamReader) -> AsyncGenerator[Delta, None]:
        try:
            async with self._http().stream("POST", url, content=payload) as response:
                if response.status_code >= 400:
                    raise await status_error(url, response)
                async for line in response.aiter_lines():
                    if line.startswith("error:"):  # llama.cpp's server sends a failure as an `error:` line
                        raise mid_stream_error(line[6:].strip().encode())
                    if not line.startswith("data:"):
                        continue  # SSE comments, `event:` lines, blank separators
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    for delta in reader.feed(data):
                        yield delta
                    if reader.done:
                        break
        except httpx.TimeoutException as exc:
            limit = self.upstream.read_timeout_s
            what = "did not connect" if isinstance(exc, httpx.ConnectTimeout) else f"sent nothing for {limit:g} s"
            raise Retryable(BackendError(f"The upstream engine {what} ({url}).")) from None
        except httpx.TransportError as exc:
            raise Retryable(BackendError(f"The upstream engine failed: {type(exc).__name__} {exc} ({url}).")) from None
        for delta in reader.end():
            yield delta


async def status_error(url: str, response: httpx.Response) -> Exception:
    """An HTTP error from the engine as a `BackendError` with the closest `response.failed` code."""
    raw = b""
    async for piece in response.aiter_bytes():
        raw += piece
        if len(raw) >= ERROR_BODY_BYTES:
            break
    detail = error_message(raw[:ERROR_BODY_BYTES])
    status = response.status_code
    message = f"The upstream engine answered {status}: {detail}"
    if status == 429:
        return BackendError(message, code="rate_limit_exceeded")
    if "context_length_exceeded" in detail or any(hint in detail.lower() for hint in _CONTEXT_HINTS):
        return BackendError(message, code="context_length_exceeded")
    error = BackendError(f"{message} ({url})")
    return Retryable(error) if status in RETRYABLE_STATUS else error


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
