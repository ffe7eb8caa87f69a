"""Streaming events (protocol.md §2): one Struct per event type, encoded once to the bytes every transport sends."""

from __future__ import annotations

from typing import Any

import msgspec

from hotloop.wire.items import OutputText, ReasoningText, Refusal, ResponseItem
from hotloop.wire.response import Response
from hotloop.wire.tool_items import ShellOutput


class _Event(msgspec.Struct, tag_field="type", omit_defaults=True, kw_only=True):
    # Only `stream_id` has a default, so it alone is omitted (default lane, protocol.md §3.5).
    sequence_number: int
    stream_id: str | None = None


class _Lifecycle(_Event):
    response: Response


class ResponseCreated(_Lifecycle, tag="response.created"):
    pass


class ResponseQueued(_Lifecycle, tag="response.queued"):
    pass


class ResponseInProgress(_Lifecycle, tag="response.in_progress"):
    pass


class ResponseCompleted(_Lifecycle, tag="response.completed"):
    pass


class ResponseIncomplete(_Lifecycle, tag="response.incomplete"):
    pass


class ResponseFailed(_Lifecycle, tag="response.failed"):
    pass


class OutputItemAdded(_Event, tag="response.output_item.added"):
    output_index: int
    item: ResponseItem


class OutputItemDone(_Event, tag="response.output_item.done"):
    output_index: int
    item: ResponseItem


class ContentPartAdded(_Event, tag="response.content_part.added"):
    item_id: str
    output_index: int
    content_index: int
    part: OutputText | Refusal | ReasoningText


class ContentPartDone(_Event, tag="response.content_part.done"):
    item_id: str
    output_index: int
    content_index: int
    part: OutputText | Refusal | ReasoningText


class _ReasoningDelta(_Event):
    item_id: str
    output_index: int
    content_index: int
    delta: str


class _ReasoningDone(_Event):
    item_id: str
    output_index: int
    content_index: int
    text: str


# The raw reasoning text's events (protocol.md §2.6): OpenAI's names (what openai-python types and Codex shows
# live), or Open Responses' names, by the `reasoning_events` setting.
class ReasoningTextDelta(_ReasoningDelta, tag="response.reasoning_text.delta"):
    pass


class ReasoningTextDone(_ReasoningDone, tag="response.reasoning_text.done"):
    pass


class OpenReasoningDelta(_ReasoningDelta, tag="response.reasoning.delta"):
    pass


class OpenReasoningDone(_ReasoningDone, tag="response.reasoning.done"):
    pass


class OutputTextDelta(_Event, tag="response.output_text.delta"):
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[Any]


class OutputTextDone(_Event, tag="response.output_text.done"):
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[Any]


class FunctionCallArgumentsDelta(_Event, tag="response.function_call_arguments.delta"):
    item_id: str
    output_index: int
    delta: str


class FunctionCallArgumentsDone(_Event, tag="response.function_call_arguments.done"):
    item_id: str
    output_index: int
    arguments: str
    name: str


class CustomToolCallInputDelta(_Event, tag="response.custom_tool_call_input.delta"):
    item_id: str
    output_index: int
    delta: str


class CustomToolCallInputDone(_Event, tag="response.custom_tool_call_input.done"):
    item_id: str
    output_index: int
    input: str


# MCP tools run by the server (protocol.md §1.10): OpenAI's events, field for field as openai-python 3.57 types
# them (`response_mcp_*_event.py`); not in the Open Responses schema.
class _McpEvent(_Event):
    item_id: str
    output_index: int


class McpListToolsInProgress(_McpEvent, tag="response.mcp_list_tools.in_progress"):
    pass


class McpListToolsCompleted(_McpEvent, tag="response.mcp_list_tools.completed"):
    pass


class McpListToolsFailed(_McpEvent, tag="response.mcp_list_tools.failed"):
    pass


class McpCallArgumentsDelta(_McpEvent, tag="response.mcp_call_arguments.delta"):
    delta: str


class McpCallArgumentsDone(_McpEvent, tag="response.mcp_call_arguments.done"):
    arguments: str


class McpCallInProgress(_McpEvent, tag="response.mcp_call.in_progress"):
    pass


class McpCallCompleted(_McpEvent, tag="response.mcp_call.completed"):
    pass


class McpCallFailed(_McpEvent, tag="response.mcp_call.failed"):
    pass


class _ServerCallEvent(_Event):
    """An event of a call the server runs inside the response (a file search, a code run)."""

    item_id: str
    output_index: int


# A `file_search_call` the server runs (tools/file_search.py): OpenAI's events, as openai-python types them
# (`response_file_search_call_*_event.py`); not in the Open Responses schema.


class FileSearchCallInProgress(_ServerCallEvent, tag="response.file_search_call.in_progress"):
    pass


class FileSearchCallSearching(_ServerCallEvent, tag="response.file_search_call.searching"):
    pass


class FileSearchCallCompleted(_ServerCallEvent, tag="response.file_search_call.completed"):
    pass


# A `code_interpreter_call` the server runs (tools/code_interpreter.py): OpenAI's events, as openai-python types them
# (`response_code_interpreter_call_*_event.py`); not in the Open Responses schema.
class CodeInterpreterCallInProgress(_ServerCallEvent, tag="response.code_interpreter_call.in_progress"):
    pass


class CodeInterpreterCallCodeDelta(_ServerCallEvent, tag="response.code_interpreter_call_code.delta"):
    delta: str


class CodeInterpreterCallCodeDone(_ServerCallEvent, tag="response.code_interpreter_call_code.done"):
    code: str


class CodeInterpreterCallInterpreting(_ServerCallEvent, tag="response.code_interpreter_call.interpreting"):
    pass


class CodeInterpreterCallCompleted(_ServerCallEvent, tag="response.code_interpreter_call.completed"):
    pass


class OutputTextAnnotationAdded(_Event, tag="response.output_text.annotation.added"):
    """An annotation of a message's text (a `file_citation`), after the text's deltas and before its `.done`."""

    item_id: str
    output_index: int
    content_index: int
    annotation_index: int
    annotation: Any


class ErrorBody(msgspec.Struct):
    type: str
    code: str | None
    message: str
    param: str | None


# A `shell_call`'s commands (protocol.md §1.11; openai-python's ResponseShellCallCommand*Event): per command, added
# (empty), its text as one delta, done; after `output_item.added` and before `output_item.done`.
class ShellCallCommandAdded(_Event, tag="response.shell_call_command.added"):
    output_index: int
    command_index: int
    command: str


class ShellCallCommandDelta(_Event, tag="response.shell_call_command.delta"):
    output_index: int
    command_index: int
    delta: str


class ShellCallCommandDone(_Event, tag="response.shell_call_command.done"):
    output_index: int
    command_index: int
    command: str


# A hosted shell's `shell_call_output` (wire/hosted_shell.py; openai-python's ResponseShellCallOutputContent*Event):
# per command, its stdout and stderr as one delta, then done with the command's output; between the output item's
# `output_item.added` and `.done`.
class ShellCallOutputContentDelta(_Event, tag="response.shell_call_output_content.delta"):
    item_id: str
    output_index: int
    command_index: int
    delta: dict[str, str]  # {stdout?, stderr?}


class ShellCallOutputContentDone(_Event, tag="response.shell_call_output_content.done"):
    item_id: str
    output_index: int
    command_index: int
    output: list[ShellOutput]  # the command's output, one entry


class StreamError(_Event, tag="error"):
    """In-band SSE error before `response.failed` (protocol.md §2.9)."""

    error: ErrorBody


class CompactionCompacting(_Event, tag="response.compaction.compacting"):
    """A `compaction_trigger`'s summary is being sampled (protocol.md §1.12): no summary content."""

    item_id: str
    output_index: int


class SteerAccepted(_Event, tag="response.steer.accepted"):
    steer: dict[str, Any]  # {id, previous_response_id}


class SteerPending(_Event, tag="response.steer.pending"):
    steer: dict[str, Any]  # {id, previous_response_id}
    reason: str
    required_input: list[dict[str, Any]]  # stubs of the tool outputs the response waits for


class SteerFailed(_Event, tag="response.steer.failed"):
    steer: dict[str, Any]
    error: dict[str, Any]


class InjectCreated(_Event, tag="response.inject.created"):
    """An inject's outputs were committed to the waiting response (protocol.md §1.12), in its own sequence."""

    response_id: str


class InjectFailed(_Event, tag="response.inject.failed"):
    """An inject was not committed: `error.code` response_not_found or response_already_completed; `input` is the
    uncommitted input, as sent."""

    response_id: str
    input: list[msgspec.Raw]
    error: dict[str, str]


class TimingMetrics(_Event, tag="hotloop:timing_metrics"):
    """Opt-in stage timings in milliseconds, just before the terminal event (header
    `x-responsesapi-include-timing-metrics: true`). An extension event: the `hotloop:` prefix marks it as ours."""

    response_id: str
    timings: dict[str, float]


class WebSocketError(msgspec.Struct, tag_field="type", tag="error", omit_defaults=True):
    """The WebSocket `error` envelope (protocol.md §3.10): no `sequence_number`, `status` always present."""

    status: int
    error: dict[str, Any]
    stream_id: str | None = None


class Event:
    """One encoded event: its `type`, the JSON bytes sent as they are on WebSocket and framed on SSE; `delta`: a
    `*.delta` event, which a transport may hold for a few milliseconds to share a write with the next ones
    (transports/pacing.py)."""

    __slots__ = ("data", "delta", "terminal", "type")

    def __init__(self, type: str, data: bytes, terminal: bool = False) -> None:
        self.type = type
        self.data = data
        self.terminal = terminal
        self.delta = type.endswith(".delta")

    def sse(self) -> bytes:
        return b"event: " + self.type.encode() + b"\ndata: " + self.data + b"\n\n"


_encoder = msgspec.json.Encoder()
TERMINAL_EVENTS = {
    "completed": ResponseCompleted,
    "incomplete": ResponseIncomplete,
    "failed": ResponseFailed,
    "cancelled": ResponseFailed,
}


def encode_event(event: _Event, terminal: bool = False) -> Event:
    return Event(event.__struct_config__.tag, _encoder.encode(event), terminal)  # type: ignore[arg-type]


def websocket_error(status: int, error: dict[str, Any], stream_id: str | None = None) -> bytes:
    return _encoder.encode(WebSocketError(status=status, error=error, stream_id=stream_id))
