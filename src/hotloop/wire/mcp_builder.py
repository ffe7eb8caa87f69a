"""The MCP part of the event builder (protocol.md §1.10): calls the server runs, approval requests, tool listings.

A mixin of `ResponseBuilder` (wire/builder.py), which owns the open item, writing through the response's `Output`
(wire/output.py). An `mcp_call` the model writes streams like a function call, but its `output_item.done` waits
until the server has run it: when its arguments are done the item takes a reserved slot in `response.output`
(status `in_progress`), other items may follow it, and `mcp_call_finished` settles the slot with the finished item
and its `output_item.done` at that index; an item that ends meanwhile has its done held (`Output`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from hotloop.ids import new_id
from hotloop.wire import events as ev
from hotloop.wire.events import Event
from hotloop.wire.items import McpApprovalRequest, McpCall, McpListTools, ResponseItem
from hotloop.wire.output import Output


class McpBuilder:
    """MCP items and events; `needs_approval` names the (server label, tool name) pairs that are asked first."""

    # Provided by ResponseBuilder.
    out: Output
    _open: Any  # OutputItem | None, or the builder's own marker of a call being written
    _close_item: Callable[[str], list[Event]]
    open_item: Callable[[ResponseItem], list[Event]]

    def _init_mcp(self) -> None:
        self.needs_approval: frozenset[tuple[str, str]] = frozenset()

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
        out, index = self.out, self.out.index
        if isinstance(item, McpApprovalRequest):
            if status != "completed":
                return []  # cut-off arguments are never offered for approval (the item has no status to say so)
            request = msgspec.structs.replace(item, arguments=arguments)
            added = out.emit(ev.OutputItemAdded, output_index=index, item=request)
            return [added, *out.end(index, request)]
        done = [out.emit(ev.McpCallArgumentsDone, item_id=item.id, output_index=index, arguments=arguments)]
        if status != "completed":
            cut = msgspec.structs.replace(item, arguments=arguments, status="incomplete")
            return [*done, *out.end(index, cut)]
        out.reserve(msgspec.structs.replace(item, arguments=arguments))
        return done

    def mcp_pending(self) -> list[int]:
        """The output indexes of the calls not finished yet (the server runs them, then `mcp_call_finished`)."""
        output = self.out.response.output
        return [index for index in self.out.reserved() if isinstance(output[index], McpCall)]

    def mcp_call_added(self, item: McpCall) -> list[Event]:
        """A call the server runs without the model having just written it (an approved request):
        `output_item.added` and `response.mcp_call_arguments.done`; it then waits like a written call."""
        out, emit, index = self._close_item("completed"), self.out.emit, self.out.index
        pending = msgspec.structs.replace(item, output=None, error=None, status="in_progress")
        out.append(emit(ev.OutputItemAdded, output_index=index, item=pending))
        out.append(emit(ev.McpCallArgumentsDone, item_id=item.id, output_index=index, arguments=item.arguments))
        self.out.reserve(pending)
        return out

    def _pending_call(self, index: int) -> McpCall:
        item = self.out.reserved_item(index)
        if not isinstance(item, McpCall):
            raise ValueError(f"no pending mcp_call at output index {index}")
        return item

    def mcp_call_running(self, index: int) -> Event:
        """`response.mcp_call.in_progress`: the server started the call at `index`."""
        item = self._pending_call(index)
        return self.out.emit(ev.McpCallInProgress, item_id=item.id, output_index=index)

    def mcp_call_finished(self, index: int, output: str | None, error: dict[str, Any] | None) -> list[Event]:
        """The call at `index` ran: `response.mcp_call.completed` (or `.failed` with an error), then its
        `output_item.done` with the finished item, which replaces it in `response.output`."""
        item = self._pending_call(index)
        failed = error is not None
        done = msgspec.structs.replace(item, output=output, error=error, status="failed" if failed else "completed")
        event = ev.McpCallFailed if failed else ev.McpCallCompleted
        return [self.out.emit(event, item_id=item.id, output_index=index), *self.out.settle(index, done)]

    def mcp_list_tools(self, item: McpListTools) -> list[Event]:
        """A server's tool list, whole: `output_item.added` (no tools yet), `response.mcp_list_tools.in_progress`,
        `.completed` (`.failed` when `item.error`), `output_item.done` with the item as given."""
        out, emit, index = self._close_item("completed"), self.out.emit, self.out.index
        listing = msgspec.structs.replace(item, tools=[], error=None)
        out.append(emit(ev.OutputItemAdded, output_index=index, item=listing))
        out.append(emit(ev.McpListToolsInProgress, item_id=item.id, output_index=index))
        end = ev.McpListToolsFailed if item.error is not None else ev.McpListToolsCompleted
        out.append(emit(end, item_id=item.id, output_index=index))
        out.extend(self.out.end(index, item))
        return out
