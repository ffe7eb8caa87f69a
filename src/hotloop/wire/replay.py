"""Rebuild the event sequence of a finished response from its stored final object (protocol.md §1.8, §2; no I/O).

A stored response keeps its final `Response`, not its original events, so `GET /v1/responses/{id}?stream=true`
replays it by feeding the stored output items through a `ResponseBuilder`: the same encoder, the same sequence
counter and the same item lifecycle as the live stream, so the replay is what a live stream of that output is.

- `response.created` shows `status: "in_progress"`, `output: []`, `usage: null` (`queued` for a background response,
  followed by `response.queued`, as its live stream had), then `response.in_progress`.
- Each output item: `output_item.added` (status `in_progress`, empty content), for a message its
  `content_part.added`, ONE `output_text.delta` carrying the whole text (the live stream had one delta per
  backend chunk; concatenated they are equal), `output_text.done`, `content_part.done`; for a function or custom
  tool call ONE arguments/input delta and its `.done`; then `output_item.done` with the stored item (its stored
  status, so the last item of an incomplete response ends `incomplete`). Empty text or arguments get no delta.
  An `mcp_call` as its live stream had it, one item after the other: `output_item.added`, ONE arguments delta,
  `response.mcp_call_arguments.done`, `response.mcp_call.in_progress`, `.completed` | `.failed`, `output_item.done`
  (one that never ran: `output_item.done` right after its arguments; one an approval ran: no delta, as live). An
  `mcp_list_tools` as live: added, `response.mcp_list_tools.in_progress`, `.completed` | `.failed`, done. A typed
  client tool's call as live: `output_item.added` with the whole item, a shell call's command events, `.done`.
  A `file_search_call` as live (wire/file_search.py): added, `response.file_search_call.in_progress`, `.searching`,
  `.completed` (not for a failed one), done; its results only when the replay includes them (`shown`). A
  `code_interpreter_call` as live (wire/code_interpreter.py): added, `.in_progress`, its code's delta and `.done`,
  `.interpreting`, `.completed` (not for a failed one), done; its outputs only when included. A hosted
  `shell_call` as live (wire/hosted_shell.py): added, its command events, and its done when its `shell_call_output`
  comes (then that item's added, its content's delta and `.done` per command, its done). A
  message keeps its stored annotations, each with its `response.output_text.annotation.added` before the text's
  `.done`.
  An item of another shape (never produced by hotloop's builder) is replayed as `output_item.added` and `.done`.
- A failed response with an error gets the in-band `error` event the live SSE stream sent before
  `response.failed` (§2.9). The opt-in `hotloop:timing_metrics` event is not stored and not replayed.
- The terminal event is `TERMINAL_EVENTS[status]` (a cancelled response ends `response.failed`, as live) and its
  `response` is the stored object itself, so it equals GET. Item ids and call ids are the stored ones.
"""

from __future__ import annotations

import msgspec

from hotloop.wire import events as ev
from hotloop.wire.builder import ResponseBuilder, error_body
from hotloop.wire.events import Event
from hotloop.wire.included import NOTHING, Shown
from hotloop.wire.items import (
    CustomToolCall,
    FunctionCall,
    McpCall,
    McpListTools,
    Message,
    OutputItem,
    OutputText,
    Reasoning,
    ResponseItem,
)
from hotloop.wire.response import TERMINAL_STATUSES, Response
from hotloop.wire.tool_items import (
    ApplyPatchCall,
    CodeInterpreterCall,
    ComputerCall,
    FileSearchCall,
    LocalShellCall,
    ShellCall,
    ShellCallOutput,
)


def _replay_item(builder: ResponseBuilder, item: ResponseItem) -> list[Event]:
    """The events of one stored item, opened with its stored ids; one delta for all of its text."""
    status = getattr(item, "status", None) or "completed"
    if isinstance(item, Message) and len(item.content) == 1 and isinstance(item.content[0], OutputText):
        out = builder.open_item(msgspec.structs.replace(item, content=[], status="in_progress"))
        text = item.content[0].text
        if text:
            out += builder.text_delta(text)
        builder.annotate(list(item.content[0].annotations))
        return out + builder.close_open(status)
    if isinstance(item, FunctionCall | CustomToolCall) and item.id is not None:
        opened: OutputItem
        if isinstance(item, FunctionCall):
            text, opened = item.arguments, msgspec.structs.replace(item, arguments="", status="in_progress")
        else:
            text, opened = item.input, msgspec.structs.replace(item, input="", status="in_progress")
        out = builder.open_item(opened)
        if text:
            out += builder.tool_call_delta(text)
        return out + builder.close_open(status)
    if isinstance(item, Reasoning) and item.id is not None and not item.summary:
        out = builder.open_item(msgspec.structs.replace(item, content=[], status="in_progress"))
        text = "".join(part.text for part in item.content or ())
        if text:
            out += builder.reasoning_delta(text)
        return out + builder.close_open(status)
    if isinstance(item, McpCall):
        return _replay_mcp_call(builder, item)
    if isinstance(item, McpListTools):
        return builder.mcp_list_tools(item)
    if isinstance(item, FileSearchCall):
        return builder.replay_file_search(item)
    if isinstance(item, CodeInterpreterCall):
        return builder.replay_code(item)
    if isinstance(item, ShellCall) and item.hosted:
        return builder.replay_shell_call(item)
    if isinstance(item, ShellCallOutput):
        answered = builder.replay_shell_output(item)
        if answered is not None:
            return answered
    if isinstance(item, ShellCall | LocalShellCall | ApplyPatchCall | ComputerCall):
        return builder.typed_call(item)  # as live: whole, once the model had written it
    # A compaction, an approval request, or an item of another shape: added and done as stored.
    return builder.add_item(item)


def _replay_mcp_call(builder: ResponseBuilder, item: McpCall) -> list[Event]:
    ran = item.status in ("completed", "failed")
    if item.approval_request_id is not None and ran:
        out = builder.mcp_call_added(item)
    else:
        out = builder.open_item(
            msgspec.structs.replace(item, arguments="", output=None, error=None, status="in_progress")
        )
        if item.arguments:
            out += builder.tool_call_delta(item.arguments)
        out += builder.close_open("completed" if ran else "incomplete")
    if ran:
        index = builder.mcp_pending()[-1]
        out.append(builder.mcp_call_running(index))
        out += builder.mcp_call_finished(index, item.output, item.error)
    return out


def inband_error(response: Response) -> ev.ErrorBody | None:
    """The `error` event a live SSE stream sent before `response.failed`."""
    if response.status != "failed" or response.error is None:
        return None
    return error_body(response.error)


def replay_events(
    response: Response,
    *,
    starting_after: int = -1,
    stream_id: str | None = None,
    reasoning_events: str = "openai",
    shown: Shown = NOTHING,
) -> list[Event]:
    """The events of a finished (terminal) response with `sequence_number > starting_after`, terminal last;
    `shown`: what of the server-run calls the replay includes (wire/included.py).

    Sequence numbers count from 0 without gaps, so an event's number is its position in the full sequence.
    """
    if response.status not in TERMINAL_STATUSES:
        raise ValueError(f"cannot replay a response that is still {response.status}")
    start = msgspec.structs.replace(
        response,
        status="queued" if response.background else "in_progress",
        output=[],
        usage=None,
        error=None,
        incomplete_details=None,
        completed_at=None,
    )
    builder = ResponseBuilder(start, stream_id, reasoning_events, shown=shown)
    out = [builder.created()]
    if response.background:
        out.append(builder.queued())
        start.status = "in_progress"
    out.append(builder.in_progress())
    for item in response.output:
        out.extend(_replay_item(builder, item))
    out.extend(builder.out.end_reserved())  # a hosted shell call stored with no output (never run)
    builder.response = response
    out.extend(builder.terminal(inband_error(response)))
    return out[max(starting_after + 1, 0) :]
