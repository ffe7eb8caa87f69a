"""What `Clients` asks of a session, whichever client speaks it: the `Session` protocol (streamable.py's lean one,
session.py's on the SDK), and what both share: the bound on closing, URLs shown without credentials."""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple, Protocol
from urllib.parse import urlsplit

from hotloop.mcp.jsonrpc import ToolResult
from hotloop.mcp.types import ListedTool

CLOSE_S = 2.0  # the longest wait for an orderly close (the DELETE that ends a streamable session on the server)


class Page(NamedTuple):
    """One page of `tools/list`: its tools, and the cursor of the next page (None on the last)."""

    tools: list[ListedTool]
    next_cursor: str | None


class Session(Protocol):
    """One MCP session of one (owner, endpoint). `opened`: it completed MCP's handshake once (a failure then may
    mean the server forgot it); `ended`: it can serve no more requests, its owner drops it. `in_use` and
    `last_used` are the owner's (requests in flight, the clock's time of the last one).

    `list_page` and `call` wait for the session to open, raise `Failure` for whatever went wrong, and return at
    once when cancelled (a request cancelled after it was sent is cancelled on the server in the background)."""

    in_use: int
    last_used: float

    @property
    def opened(self) -> bool: ...

    @property
    def ended(self) -> bool: ...

    async def list_page(self, cursor: str | None) -> Page: ...

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult: ...

    async def close(self) -> None:
        """End the session within about `CLOSE_S` (streamable HTTP: the DELETE that tells the server)."""
        ...


def shown_url(url: str) -> str:
    """A URL for a log line or a message: no userinfo, query or fragment, which may carry credentials."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def refusal(target: str) -> str:
    """What a refused redirect's error says; `target` as `shown_url` shows it."""
    return f"a redirect to {target} was refused: the allowed MCP server URLs do not include it"


class Background:
    """Tasks left to run on their own (closings, requests their callers gave up, cancellations sent to a server):
    held until they end, their failures read (not reported as "never retrieved"); `finish` waits for them, then
    cancels what is left."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Future[Any]] = set()

    def keep(self, task: asyncio.Future[Any]) -> None:
        self.tasks.add(task)
        task.add_done_callback(self._settled)

    async def finish(self, timeout: float | None) -> None:
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=timeout)
        self.cancel()

    def cancel(self) -> None:
        for task in self.tasks:
            task.cancel()

    def _settled(self, task: asyncio.Future[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled():
            task.exception()
