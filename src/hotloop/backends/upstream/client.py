"""What the upstream backends share (docs/backends.md): the pooled HTTP client, replica routing, retries before the
first token, the streamed payloads (sse.py), and an engine's failures as `BackendError`s.

`chat.py` (chat messages) and `tokens.py` (token ids) subclass `UpstreamBackend` with their request body and
their stream reader. One pool of keep-alive connections per upstream (http1.py: hotloop's own HTTP/1.1 client on
httptools; aiohttp before it spent ~0.5 ms of a turn's 4 ms on its request and per-chunk layers, and httpx a third
of a gateway's CPU; docs/benchmarks-history.md). A failure before the first token (unreachable, 5xx, a stall, an error
chunk) is retried `retries` times, on another replica when there is one; after it, never (the client has seen
output). Closing the generator (the client went away, the response was cancelled, hotloop's own stall timer)
closes the upstream connection, which is how an engine learns to stop generating.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import msgspec

from hotloop.backends.base import BackendError, Delta, Finished, GenerationRequest
from hotloop.backends.upstream.routing import Router
from hotloop.backends.upstream.sse import ErrorLine, SSEPayloads
from hotloop.config import Upstream
from hotloop.net import http1
from hotloop.stall import StallTimer

log = logging.getLogger("hotloop.upstream")
T = TypeVar("T")
RETRYABLE_STATUS = frozenset({408, 500, 502, 503, 504})
ERROR_BODY_BYTES = 4096
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
    """One attempt's stream: the `data:` payloads of each read in, hotloop deltas out."""

    started: bool  # a delta has been yielded: no retry from here on
    done: bool  # the last chunk has been read (llama.cpp's `stop: true`): stop reading
    # A chunk that failed the stream (an error chunk, one that is not JSON): raised once the output of the
    # chunks before it in the same read has gone out.
    failure: Exception | None

    def feed(self, payloads: Sequence[bytes]) -> Sequence[Delta]:
        """The payloads one read of the stream brought (JSON, undecoded), decoded at once; what they add to one
        item (text, call arguments) comes out as one delta. Payloads after the last chunk (`done`) or a failing
        one (`failure`) are ignored."""
        ...

    def end(self) -> Sequence[Delta]:
        """The deltas after the stream's last chunk, `Finished` last; `Retryable` when the stream was cut short."""
        ...


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
        self._pool: http1.Pool | None = None

    def body(self, request: GenerationRequest) -> dict[str, Any]:
        raise NotImplementedError

    def reader(self, request: GenerationRequest) -> StreamReader:
        """A fresh reader for one attempt."""
        raise NotImplementedError

    def _http(self) -> http1.Pool:
        # Created on first use, inside the serving event loop its connections belong to. No total time limit (a
        # long answer is fine): `_attempt` bounds each wait for the engine by `read_timeout_s`.
        if self._pool is None:
            up = self.upstream
            headers = {"Content-Type": "application/json", "Accept": "*/*", "User-Agent": "hotloop"}
            if up.api_key:
                headers["Authorization"] = f"Bearer {up.api_key}"
            self._pool = http1.Pool(up.max_connections, up.connect_timeout_s, headers)
        return self._pool

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

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
        response: http1.Response | None = None
        silence = StallTimer(self.upstream.read_timeout_s, functools.partial(_silent, url))
        try:
            response = await silence.wait(self._http().post(url, payload, headers))
            if response.status >= 400:
                raise await silence.wait(status_error(url, response))
            stream, ended = SSEPayloads(), False
            while not ended:
                chunk = await silence.wait(response.read())
                batch, done, error_line = _batch(stream.feed(chunk))
                if batch:
                    for delta in reader.feed(batch):
                        yield delta
                failure = reader.failure or error_line
                if failure is not None:  # after the output before it in the same read
                    raise failure
                ended = not chunk or done or reader.done
            response.release()  # its end (the chunked terminator) is read off the turn's clock, then reused
            response = None
        except http1.StaleConnection as exc:  # the request never reached the engine
            raise StaleConnection(BackendError(f"The upstream engine failed: {exc} ({url}).")) from None
        except http1.ConnectFailed as exc:
            raise Retryable(BackendError(f"The upstream engine did not connect ({url}): {exc}")) from None
        except http1.HTTPError as exc:
            raise Retryable(BackendError(f"The upstream engine failed: {exc} ({url}).")) from None
        finally:
            silence.close()
            if response is not None:  # cut short (an error, the client gone): closing it tells the engine to stop
                response.close()
        for delta in reader.end():
            yield delta


def _batch(payloads: list[bytes | ErrorLine]) -> tuple[list[bytes], bool, Retryable | None]:
    """A read's payloads before the stream's end (`[DONE]`: done) or an error line (the failure)."""
    batch: list[bytes] = []
    for data in payloads:
        if isinstance(data, ErrorLine):
            return batch, False, mid_stream_error(data.raw)
        if data == b"[DONE]":
            return batch, True, None
        batch.append(data)
    return batch, False, None


def _silent(url: str, limit: float) -> Retryable:
    return Retryable(BackendError(f"The upstream engine sent nothing for {limit:g} s ({url})."))


async def status_error(url: str, response: http1.Response) -> Exception:
    """An HTTP error from the engine as a `BackendError` with the closest `response.failed` code."""
    raw = b""
    with contextlib.suppress(http1.HTTPError):
        while len(raw) < ERROR_BODY_BYTES and (part := await response.read()):
            raw += part
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


def decoded(payloads: Sequence[bytes], one: Callable[[bytes], T], many: Callable[[bytes], list[T]]) -> Iterator[T]:
    """A read's payloads decoded by one call of `many` (as one JSON array); when that fails, one by one with `one`,
    so that the chunks before the one that is not JSON are read first and the error names it."""
    if len(payloads) > 1:
        try:
            chunks = many(b"[" + b",".join(payloads) + b"]")
        except msgspec.MsgspecError:
            pass
        else:
            yield from chunks
            return
    for data in payloads:
        yield _checked(one, data)


def _checked(decode: Callable[[bytes], T], data: bytes) -> T:
    try:
        return decode(data)
    except msgspec.MsgspecError:
        raise BackendError(f"The upstream engine sent an unreadable chunk: {preview(data)}") from None


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
