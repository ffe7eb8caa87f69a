"""The MCP part of the event builder (protocol.md §1.10): calls the server runs, approval requests, tool listings.

A mixin of `ResponseBuilder` (wire/builder.py), which owns the sequence counter, the response and the open item.
An `mcp_call` the model writes streams like a function call, but its `output_item.done` waits until the server
has run it: when its arguments are done the item takes its place in `response.output` (its index reserved, status
`in_progress`), other items may follow it, and `mcp_call_finished` later replaces it there and sends its
`output_item.done` at that index. So every `output_item.done` carries the item at its `output_index` in the
terminal `response.output`. An item that ends while a call before it has not run (a message the model wrote after
a call) has its `output_item.done` held until that call's is out: the done items come in output order, and in that
order they are the terminal output (protocol.md §2.3).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from hotloop.ids import new_id
from hotloop.wire import events as ev
from hotloop.wire.events import Event
from hotloop.wire.items import McpApprovalRequest, McpCall, McpListTools, ResponseItem
from hotloop.wire.response import Response


class McpBuilder:
    """MCP items and events; `needs_approval` names the (server label, tool name) pairs that are asked first."""

    # Provided by ResponseBuilder.
    response: Response
    _open: Any  # OutputItem | None, or the builder's own marker of a call being written
    _emit: Callable[..., Event]
    _close_item: Callable[[str], list[Event]]
    open_item: Callable[[ResponseItem], list[Event]]

    def _init_mcp(self) -> None:
        self.needs_approval: frozenset[tuple[str, str]] = frozenset()
        self._pending: list[int] = []  # indexes in `response.output` of calls not run yet, in order
        self._held: list[int] = []  # indexes of items ended after such a call: their `output_item.done` waits

    def _open_mcp(self, name: str, label: str) -> list[Event]:
        """A call the model starts writing (the open item was closed by the caller)."""
        if (label, name) in self.needs_approval:
            # Nothing is sent until the arguments are complete: the request is one whole item (`_close_mcp`).
            self._open = McpApprovalRequest(id=new_id("mcpr"), server_label=label, name=name, arguments="")
            return []
        item = McpCall(id=new_id("mcp"), server_label=label, name=name, arguments="", status="in_progress")
        return self.open_item(item)

    def _close_mcp(self, item: McpCall | McpApprovalRequest, arguments: str, status: str) -> list[Event]:
        """The model finished writing a call (`status` completed) or was cut off (incomplete)."""
        index = len(self.response.output)
        if isinstance(item, McpApprovalRequest):
            if status != "completed":
                return []  # cut-off arguments are never offered for approval (the item has no status to say so)
            request = msgspec.structs.replace(item, arguments=arguments)
            added = self._emit(ev.OutputItemAdded, output_index=index, item=request)
            return [added, *_present(self._done(index, request))]
        out = [self._emit(ev.McpCallArgumentsDone, item_id=item.id, output_index=index, arguments=arguments)]
        if status != "completed":
            cut = msgspec.structs.replace(item, arguments=arguments, status="incomplete")
            return [*out, *_present(self._done(index, cut))]
        self.response.output.append(msgspec.structs.replace(item, arguments=arguments))
        self._pending.append(index)
        return out

    def _done(self, index: int, item: ResponseItem) -> Event | None:
        """The item ended at `index`: its `output_item.done`, or None while a call before it has not run (held
        for `_release`)."""
        if index == len(self.response.output):
            self.response.output.append(item)
        else:
            self.response.output[index] = item
        if self._pending and self._pending[0] < index:
            self._held.append(index)
            return None
        return self._emit(ev.OutputItemDone, output_index=index, item=item)

    def _release(self) -> list[Event]:
        """The held `output_item.done` events no unrun call precedes any more, in output order."""
        first = self._pending[0] if self._pending else len(self.response.output)
        ready = sorted(index for index in self._held if index < first)
        self._held = [index for index in self._held if index >= first]
        output = self.response.output
        return [self._emit(ev.OutputItemDone, output_index=index, item=output[index]) for index in ready]

    def mcp_pending(self) -> list[int]:
        """The output indexes of the calls not finished yet (the server runs them, then `mcp_call_finished`)."""
        return list(self._pending)

    def mcp_call_added(self, item: McpCall) -> list[Event]:
        """A call the server runs without the model having just written it (an approved request):
        `output_item.added` and `response.mcp_call_arguments.done`; it then waits like a written call."""
        out = self._close_item("completed")
        index = len(self.response.output)
        pending = msgspec.structs.replace(item, output=None, error=None, status="in_progress")
        out.append(self._emit(ev.OutputItemAdded, output_index=index, item=pending))
        out.append(self._emit(ev.McpCallArgumentsDone, item_id=item.id, output_index=index, arguments=item.arguments))
        self.response.output.append(pending)
        self._pending.append(index)
        return out

    def _pending_call(self, index: int) -> McpCall:
        item = self.response.output[index] if index in self._pending else None
        if not isinstance(item, McpCall):
            raise ValueError(f"no pending mcp_call at output index {index}")
        return item

    def mcp_call_running(self, index: int) -> Event:
        """`response.mcp_call.in_progress`: the server started the call at `index`."""
        item = self._pending_call(index)
        return self._emit(ev.McpCallInProgress, item_id=item.id, output_index=index)

    def mcp_call_finished(self, index: int, output: str | None, error: dict[str, Any] | None) -> list[Event]:
        """The call at `index` ran: `response.mcp_call.completed` (or `.failed` with an error), then its
        `output_item.done` with the finished item, which replaces it in `response.output`."""
        item = self._pending_call(index)
        self._pending.remove(index)
        failed = error is not None
        done = msgspec.structs.replace(item, output=output, error=error, status="failed" if failed else "completed")
        event = ev.McpCallFailed if failed else ev.McpCallCompleted
        out = [self._emit(event, item_id=item.id, output_index=index), *_present(self._done(index, done))]
        return out + self._release()

    def mcp_list_tools(self, item: McpListTools) -> list[Event]:
        """A server's tool list, whole: `output_item.added` (no tools yet), `response.mcp_list_tools.in_progress`,
        `.completed` (`.failed` when `item.error`), `output_item.done` with the item as given."""
        out = self._close_item("completed")
        index = len(self.response.output)
        out.append(
            self._emit(ev.OutputItemAdded, output_index=index, item=msgspec.structs.replace(item, tools=[], error=None))
        )
        out.append(self._emit(ev.McpListToolsInProgress, item_id=item.id, output_index=index))
        end = ev.McpListToolsFailed if item.error is not None else ev.McpListToolsCompleted
        out.append(self._emit(end, item_id=item.id, output_index=index))
        out.extend(_present(self._done(index, item)))
        return out

    def _end_pending(self) -> list[Event]:
        """At the response's end, calls never run are `incomplete` (each with its `output_item.done`), so no
        `mcp_call` is left `in_progress` in the final output."""
        pending, self._pending = self._pending, []
        self._held = sorted([*self._held, *pending])
        for index in pending:
            self.response.output[index] = msgspec.structs.replace(self.response.output[index], status="incomplete")
        return self._release()


def _present(event: Event | None) -> list[Event]:
    return [] if event is None else [event]
