"""`Clients`: how hotloop reaches remote MCP servers (protocol.md §1.10). One session per (owner, endpoint), reused
by its listings and calls and closed once idle; every listing and call bounded in time, cancellable at once, and
checked against the operator's allowlist before anything is sent. A session is streamable.py's lean one on
streamable HTTP (unless `client="sdk"`), session.py's on the `mcp` SDK on legacy SSE: both are base.py's
`Session`."""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Literal, TypeVar

from hotloop.mcp.base import CLOSE_S, Background, Session, shown_url
from hotloop.mcp.codes import INTERNAL_ERROR
from hotloop.mcp.convert import outcome
from hotloop.mcp.failures import Failure, timed_out
from hotloop.mcp.jsonrpc import ToolResult
from hotloop.mcp.streamable import LeanSession
from hotloop.mcp.types import CallError, CallResult, Endpoint, ListedTool, ListFailed, NotAllowed, Stats

T = TypeVar("T")
Key = tuple[str, Endpoint]  # (owner, endpoint): an endpoint's url, headers and transport
Work = Callable[[Session], Awaitable[T]]
ClientKind = Literal["lean", "sdk"]
MAX_SESSIONS = 512  # beyond it the least recently used idle session is closed for a new one
MAX_PAGES = 100  # of one tools/list: a server whose cursor never ends cannot hold a listing
SWEEP_MAX_S = 30.0
EVENT_BYTES = 1 << 20  # the SDK's own bound on one SSE event, raised below to fit a capped output's full message


class Clients:
    """MCP sessions by (owner, endpoint), and the two things done with them.

    A URL outside `allowed` raises `NotAllowed` from both methods before any connection (the caller checks its
    tools first: protocol.md §1.10's 400); a redirect outside it is never followed. Opening a session is bounded by
    `list_timeout_s`, and counts against the listing's or call's own timeout. A session that failed is dropped and
    the next use opens a new one; one the server forgot (HTTP 404 on streamable HTTP) is reopened at once and the
    request sent again. Use it from one event loop. `clock` (monotonic seconds) times idleness; tests move it.
    `client`: which client speaks streamable HTTP, the lean one or the SDK's (legacy SSE is always the SDK's)."""

    def __init__(
        self,
        *,
        allowed: Callable[[str], bool],
        call_timeout_s: float = 60.0,
        list_timeout_s: float = 20.0,
        max_output_bytes: int = 1 << 20,
        idle_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        client: ClientKind = "lean",
    ) -> None:
        self.allowed = allowed
        self.client = client
        self.call_timeout_s = call_timeout_s
        self.list_timeout_s = list_timeout_s
        self.max_output_bytes = max_output_bytes
        self.idle_s = idle_s
        self.stats = Stats()
        self._clock = clock
        self._sessions: dict[Key, Session] = {}
        self._closing = Background()  # sessions closing (each ends the requests its callers abandoned)
        self._sweeper: asyncio.Task[None] | None = None

    async def list_tools(self, owner: str, endpoint: Endpoint) -> list[ListedTool]:
        """Every tool the server lists, page after page; raises `ListFailed` saying why it could not."""
        self._check(endpoint.url)
        self.stats.lists += 1
        try:
            return await self._request(owner, endpoint, _all_tools, self.list_timeout_s, idempotent=True)
        except Failure as failure:
            self.stats.list_failures += 1
            if failure.refused:
                raise NotAllowed(failure.error.message) from None
            raise ListFailed(failure.error.message) from None

    async def call_tool(self, owner: str, endpoint: Endpoint, name: str, arguments: dict[str, Any]) -> CallResult:
        """The call's output, or its error: whatever the server or the network does (an error status, a JSON-RPC
        error, isError, no answer, a redirect outside the allowlist, `call_timeout_s` passing) is a `CallResult`
        with `error`. Only `NotAllowed` (the endpoint's own URL) and `CancelledError` are raised; a cancelled
        call returns at once and its request is cancelled on the server in the background."""
        self._check(endpoint.url)
        started = time.perf_counter()
        try:
            work = partial(_call, name, arguments)
            result = await self._request(owner, endpoint, work, self.call_timeout_s, idempotent=False)
            done = outcome(result, self.max_output_bytes, time.perf_counter() - started)
        except Failure as failure:
            done = CallResult(error=failure.error, seconds=time.perf_counter() - started)
        self._count(done)
        return done

    def warm(self, owner: str, endpoint: Endpoint) -> None:
        """Open the key's session now, in the background, if it is not open: a turn that may call the server
        starts it while it renders and generates, so its first call does not wait for the handshake."""
        if self.allowed(endpoint.url):
            self._session((owner, endpoint))

    def sweep(self) -> None:
        """Close the sessions unused for `idle_s`, and those that ended; runs every `idle_s / 2` (at most 30 s)."""
        now = self._clock()
        for key, session in list(self._sessions.items()):
            if session.ended or (session.in_use == 0 and now - session.last_used >= self.idle_s):
                self._drop(key, session)

    async def close(self) -> None:
        """Close every session (server shutdown); what is still running is cancelled."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for key, session in list(self._sessions.items()):
            self._drop(key, session)
        await self._closing.finish(2 * CLOSE_S)  # each bounded by CLOSE_S, and CLOSE_S more for its requests

    def _check(self, url: str) -> None:
        if not self.allowed(url):
            raise NotAllowed(f"{shown_url(url)} is not an allowed MCP server URL")

    async def _request(self, owner: str, endpoint: Endpoint, work: Work[T], timeout: float, *, idempotent: bool) -> T:
        """`work` on the key's session within `timeout` (opening included). A session the server forgot is
        replaced and the request sent once more; so is a broken reused one, for a request safe to repeat."""
        key = (owner, endpoint)
        deadline = asyncio.get_running_loop().time() + timeout
        for attempt in (1, 2):
            session = self._session(key)
            reused = session.opened
            session.in_use += 1
            try:
                return await self._attempt(session, work, deadline, timeout)
            except Failure as failure:
                if failure.broken or session.ended:
                    self._drop(key, session)
                # Only a session that had worked can have gone stale: a new one failing would fail again.
                again = reused and (failure.stale or (idempotent and failure.broken and not failure.refused))
                if attempt == 2 or not again:
                    raise
            finally:
                session.in_use -= 1
                session.last_used = self._clock()
        raise AssertionError("unreachable")

    @staticmethod
    async def _attempt(session: Session, work: Work[T], deadline: float, timeout: float) -> T:
        """One try within what is left of `timeout`; out of time, the session returns at once (and cancels the
        request on the server in the background), as it does when the caller is cancelled."""
        try:
            async with asyncio.timeout_at(deadline):
                return await work(session)
        except TimeoutError:  # this try's time, or one inside the session's: a timed-out request either way
            raise timed_out(timeout) from None

    def _session(self, key: Key) -> Session:
        session = self._sessions.get(key)
        if session is not None and not session.ended:
            return session
        if session is not None:
            self._drop(key, session)
        self._make_room()
        max_event_bytes = max(EVENT_BYTES, 4 * self.max_output_bytes + (64 << 10))
        lean = key[1].transport == "streamable_http" and self.client == "lean"
        made: Session = (LeanSession if lean else _sdk_session)(
            key[1], self.allowed, open_s=self.list_timeout_s, max_event_bytes=max_event_bytes
        )
        made.last_used = self._clock()
        self._sessions[key] = made
        self.stats.sessions += 1
        if self._sweeper is None:
            sweep_s = min(max(self.idle_s / 2, 0.01), SWEEP_MAX_S)
            self._sweeper = asyncio.create_task(self._sweep_every(sweep_s), context=contextvars.Context())
        return made

    def _make_room(self) -> None:
        if len(self._sessions) < MAX_SESSIONS:
            return
        idle = [(session.last_used, key) for key, session in self._sessions.items() if session.in_use == 0]
        if idle:
            _, key = min(idle)
            self._drop(key, self._sessions[key])

    def _drop(self, key: Key, session: Session) -> None:
        if self._sessions.get(key) is session:
            del self._sessions[key]
        self._closing.keep(asyncio.create_task(session.close()))

    async def _sweep_every(self, seconds: float) -> None:
        while self._sessions:
            await asyncio.sleep(seconds)
            self.sweep()
        self._sweeper = None

    def _count(self, outcome: CallResult) -> None:
        stats = self.stats
        stats.calls += 1
        stats.call_seconds += outcome.seconds
        if outcome.error is not None:
            stats.failures[outcome.error.type] = stats.failures.get(outcome.error.type, 0) + 1


async def _all_tools(session: Session) -> list[ListedTool]:
    tools: list[ListedTool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await session.list_page(cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
    message = f"tools/list did not end within {MAX_PAGES} pages"
    raise Failure(CallError("mcp_protocol_error", code=INTERNAL_ERROR, message=message))


async def _call(name: str, arguments: dict[str, Any], session: Session) -> ToolResult:
    return await session.call(name, arguments)


def _sdk_session(endpoint: Endpoint, allowed: Callable[[str], bool], *, open_s: float, max_event_bytes: int) -> Session:
    """A session on the SDK's client (legacy SSE, or `mcp_client = "sdk"`), imported the first time one opens: the
    SDK and its pydantic models cost most of a second of start-up, which a server on the lean client never pays."""
    from hotloop.mcp.session import SdkSession

    return SdkSession(endpoint, allowed, open_s=open_s, max_event_bytes=max_event_bytes)
