"""The file searches the server runs inside a response (`file_search`, docs/file-search.md): after a generation whose
model called `file_search`, each call's queries are searched in the request's vector stores (`FileSearch.search`,
pipeline/filesearch/runtime.py), and its `file_search_call` ends with the results, which the next generation reads
after the prompt's existing tokens (tools/file_search.py `lower`; the step loop extends the rendered prompt).

A search never fails the response. A store the key does not own or that is gone (404), one that expired, a store
that keeps no vector stores (the Redis store's 501), any other error: the call ends `failed`, and the model reads
that it failed. A call past the response's `max_tool_calls` (the budget MCP calls and tool searches share) is not
run: it ends `incomplete`. A steer stops the searches under way: they end `incomplete` too.

The results are the files' text, a third party's: the safety stage reads them before the model does, as it reads
an MCP call's output (pipeline/mcp/calls.py); a finding is recorded with the MCP calls' (`Calls.findings`), and
results its policy blocks are withheld: the call ends `failed`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from typing import Any

import msgspec

from hotloop.errors import HotloopError
from hotloop.filesearch.filters import compile_filter
from hotloop.pipeline.filesearch.search import SearchOptions
from hotloop.pipeline.mcp.calls import Calls
from hotloop.pipeline.service import Service
from hotloop.tools.file_search import Declared
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import Event
from hotloop.wire.tool_items import FileSearchCall, FileSearchResult, FileSearchStatus
from hotloop.wire.vector_stores import SearchResult

log = logging.getLogger("hotloop.file_search")

Ended = tuple[FileSearchStatus, list[FileSearchResult] | None]
NOT_RUN: Ended = ("incomplete", None)


class FileSearches:
    """One response's file searches: where they search (the request's tool), as whom, within what budget."""

    def __init__(self, service: Service, owner: str, declared: Declared, budget: Calls) -> None:
        self.service = service
        self.owner = owner
        self.declared = declared
        self.budget = budget
        self.options = SearchOptions(
            filters=compile_filter(declared.filters) if declared.filters is not None else None,
            max_num_results=declared.max_num_results,
            ranker=declared.ranker,
            score_threshold=declared.score_threshold,
            weights=declared.weights,
        )

    def pending(self, builder: ResponseBuilder) -> list[int]:
        return builder.file_search_pending()

    async def run(self, builder: ResponseBuilder, steered: asyncio.Event) -> AsyncGenerator[Event, None]:
        """Run the searches the last generation wrote, at once; their items end in output order. Past the budget a
        search is not run; a steer (`steered` set) stops those still running."""
        pending = builder.file_search_pending()
        if not pending:
            return
        output = builder.response.output
        running: list[tuple[int, asyncio.Task[Ended] | None]] = []
        for index in pending:
            item = output[index]
            assert isinstance(item, FileSearchCall)
            if self.budget.room <= 0:
                running.append((index, None))
                continue
            self.budget.spend(1)
            for event in builder.file_search_running(index):
                yield event
            running.append((index, asyncio.ensure_future(self._search(index, item))))
        steer = asyncio.ensure_future(steered.wait())
        try:
            for index, task in running:
                status, results = await _ended(task, steer)
                for event in builder.file_search_finished(index, status, results):
                    yield event
        finally:
            steer.cancel()
            for _, task in running:
                if task is not None:
                    task.cancel()

    async def _search(self, index: int, item: FileSearchCall) -> Ended:
        if not item.queries:
            return "failed", None  # the model wrote nothing to search for
        try:
            found = await self.service.file_search.search(
                self.owner, self.declared.store_ids, item.queries, self.options
            )
        except HotloopError as exc:  # a missing or expired store, a store that keeps none: the model reads it failed
            log.info("file search %s failed: %s", item.id, exc.message)
            return "failed", None
        except Exception:
            log.exception("file search %s failed", item.id)
            return "failed", None
        results = [result_of(hit) for hit in found]
        if not results:
            return "completed", results
        budget = self.budget
        shown = msgspec.structs.replace(item, results=results, status="completed")
        read = await budget.safety.scan_async(None, [shown], budget.pool)
        budget.findings += [(index, finding) for finding in read.findings]
        if read.verdict == "block":
            log.info("file search %s: results withheld by the safety policy", item.id)
            return "failed", None
        return "completed", results


def result_of(hit: SearchResult) -> FileSearchResult:
    """A search's hit as the call's result (openai-python's `Result`: its text in one string)."""
    return FileSearchResult(
        file_id=hit.file_id,
        filename=hit.filename,
        score=hit.score,
        text="\n".join(part.text for part in hit.content),
        attributes=hit.attributes,
    )


async def _ended(task: asyncio.Task[Ended] | None, steer: asyncio.Future[Any]) -> Ended:
    """A search's end: `NOT_RUN` for one past the budget or stopped by a steer."""
    if task is None:
        return NOT_RUN
    if not steer.done():
        await asyncio.wait((task, steer), return_when=asyncio.FIRST_COMPLETED)
    if task.done() and not task.cancelled():
        return task.result()
    task.cancel()
    return NOT_RUN
