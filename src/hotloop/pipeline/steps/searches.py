"""The tool searches the server runs inside a response (`tool_search` with execution `server`, protocol.md §1.11):
after a generation whose model searched the deferred tools, each search's hits become a `tool_search_output` item,
and the next generation may call them (steps.py). The hits' definitions reach the model as that output, after the
prompt's existing tokens: loading tools never re-renders the prompt."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from concurrent.futures import Executor

from hotloop.chat.specs import ToolSpec
from hotloop.ids import new_id
from hotloop.tools.tool_search import search, shown
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import Event
from hotloop.wire.tool_items import ToolSearchCall, ToolSearchOutput


class Searches:
    """One response's server-run searches: what is still deferred, and what its searches loaded."""

    def __init__(self, deferred: Sequence[ToolSpec], pool: Executor | None = None) -> None:
        self.deferred = list(deferred)
        self.pool = pool
        self._answered: set[str] = set()
        self._fresh: list[ToolSpec] = []

    def fresh(self) -> list[ToolSpec]:
        """The tools loaded since the last call: the next generation may call them."""
        out, self._fresh = self._fresh, []
        return out

    async def run(self, builder: ResponseBuilder, room: int) -> tuple[list[Event], int]:
        """The outputs of the searches the last generation wrote (none: no event), and how many ran: at most `room`,
        what the response's `max_tool_calls` leaves (its MCP calls count too, as OpenAI counts every built-in
        call). A search past it is not run: its output is `incomplete` and loads nothing."""
        out: list[Event] = []
        ran = 0
        for item in list(builder.response.output):
            if not isinstance(item, ToolSearchCall) or item.execution != "server" or item.key in self._answered:
                continue
            self._answered.add(item.key)
            runs = ran < room
            if runs:
                ran += 1
            hits = await self._search(_query(item.arguments)) if runs else []
            self.deferred = [spec for spec in self.deferred if spec not in hits]
            self._fresh.extend(hits)
            found = ToolSearchOutput(
                tools=shown(hits),
                execution="server",
                call_id=item.call_id,
                id=new_id("tso"),
                status="completed" if runs else "incomplete",
            )
            out.extend(builder.add_item(found))
        return out, ran

    async def _search(self, query: str) -> list[ToolSpec]:
        if not self.deferred:
            return []
        # BM25 over a few hundred tools is well under a millisecond, but the first search imports numpy and bm25s
        # and builds the set's index: off the event loop.
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, search, tuple(self.deferred), query)


def _query(arguments: object) -> str:
    if isinstance(arguments, dict):
        query = arguments.get("query")
        if isinstance(query, str):
            return query
        return " ".join(str(value) for value in arguments.values())
    return arguments if isinstance(arguments, str) else json.dumps(arguments)
