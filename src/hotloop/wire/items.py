"""Conversation items and content parts as they travel on the wire (protocol.md §1.3, §1.5).

These Structs are the single definition of an item's shape: input items are converted into them once, stored
and cached as them, and encoded straight from them into events, response bodies and the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from hotloop.wire.agent_items import AGENT_ITEMS, AgentItem
from hotloop.wire.tool_items import (
    TYPED_ITEMS,
    AdditionalTools,
    CodeInterpreterCall,
    FileSearchCall,
    ToolSearchOutput,
    TypedCallItem,
    TypedOutputItem,
)

ItemStatus = Literal["in_progress", "completed", "incomplete"]


class _Part(msgspec.Struct, tag_field="type", omit_defaults=True, forbid_unknown_fields=False):
    pass


class InputText(_Part, tag="input_text"):
    text: str


class InputImage(_Part, tag="input_image"):
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None


class InputFile(_Part, tag="input_file"):
    file_data: str | None = None
    file_url: str | None = None
    file_id: str | None = None
    filename: str | None = None


class OutputText(msgspec.Struct, tag_field="type", tag="output_text", forbid_unknown_fields=False):
    # `annotations` and `logprobs` are always on the wire (openai-python types both as lists).
    text: str
    annotations: list[Any] = msgspec.field(default_factory=list)
    logprobs: list[Any] = msgspec.field(default_factory=list)


class FileCitation(msgspec.Struct, tag_field="type", tag="file_citation"):
    """An `output_text` annotation: the answer cites a file a `file_search_call` found, at the character `index`
    of the text where the citation stands (tools/file_search.py `citations`)."""

    file_id: str
    filename: str
    index: int


class ContainerFileCitation(msgspec.Struct, tag_field="type", tag="container_file_citation"):
    """An `output_text` annotation: the answer names a file the response's code wrote in its container, at the
    characters [start_index, end_index) of the text (wire/code_interpreter.py `file_citations`)."""

    container_id: str
    file_id: str
    filename: str
    start_index: int
    end_index: int


class Refusal(_Part, tag="refusal"):
    refusal: str


class SummaryText(_Part, tag="summary_text"):
    text: str


class ReasoningText(_Part, tag="reasoning_text"):
    text: str


ContentPart = InputText | InputImage | InputFile | OutputText | Refusal
InputPart = InputText | InputImage | InputFile


class _Item(msgspec.Struct, tag_field="type", omit_defaults=True, forbid_unknown_fields=False):
    pass


class Message(_Item, tag="message"):
    role: Literal["user", "assistant", "system", "developer"]
    content: list[ContentPart]
    id: str | None = None
    status: ItemStatus | None = None
    phase: Literal["commentary", "final_answer"] | None = None
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)


class FunctionCall(_Item, tag="function_call"):
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: ItemStatus | None = None
    namespace: str | None = None
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)


class FunctionCallOutput(_Item, tag="function_call_output"):
    call_id: str
    output: str | list[InputPart]
    id: str | None = None
    status: ItemStatus | None = None
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)


class CustomToolCall(_Item, tag="custom_tool_call"):
    call_id: str
    name: str
    input: str
    id: str | None = None
    status: ItemStatus | None = None
    namespace: str | None = None
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)


class CustomToolCallOutput(_Item, tag="custom_tool_call_output"):
    call_id: str
    output: str | list[InputPart]
    id: str | None = None
    status: ItemStatus | None = None
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)


class Reasoning(_Item, tag="reasoning"):
    # None when a client sent none; hotloop's own items set `[]`, which is then on the wire (the schema requires
    # the key, and an empty default would be omitted).
    summary: list[SummaryText] | None = None
    id: str | None = None
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: ItemStatus | None = None
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)


class Compaction(_Item, tag="compaction"):
    encrypted_content: str
    id: str | None = None


class ItemReference(_Item, tag="item_reference"):
    id: str


# MCP tools run by the server (protocol.md §1.10), shaped as openai-python 3.57 types them
# (`response_output_item.py`, `response_input_item.py`). The Open Responses schema has no MCP items.
McpCallStatus = Literal["in_progress", "completed", "incomplete", "calling", "failed"]


class McpListedTool(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=False):
    """One tool an MCP server listed."""

    name: str
    input_schema: dict[str, Any]
    description: str | None = None
    annotations: dict[str, Any] | None = None


class McpListTools(_Item, tag="mcp_list_tools"):
    id: str
    server_label: str
    tools: list[McpListedTool]
    error: str | None = None  # why the server could not be listed
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)


class McpCall(_Item, tag="mcp_call"):
    id: str
    server_label: str
    name: str
    arguments: str
    output: str | None = None
    # openai-python's McpToolCallError: {type: "mcp_protocol_error" | "http_error", code, message} or
    # {type: "mcp_tool_execution_error", content}; kept as the client library reported it.
    error: dict[str, Any] | None = None
    status: McpCallStatus | None = None
    approval_request_id: str | None = None  # set when the call ran because that request was approved
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)


class McpApprovalRequest(_Item, tag="mcp_approval_request"):
    id: str
    server_label: str
    name: str
    arguments: str
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)


class McpApprovalResponse(_Item, tag="mcp_approval_response"):
    """An input item only: the client's answer to an `mcp_approval_request` of an earlier response."""

    approval_request_id: str
    approve: bool
    reason: str | None = None
    id: str | None = None


McpItem = McpListTools | McpCall | McpApprovalRequest | McpApprovalResponse


class OtherItem(msgspec.Struct):
    """An item type hotloop has no slot for (web_search_call, image_generation_call, …): kept verbatim, never fatal."""

    raw: dict[str, Any]

    @property
    def id(self) -> str | None:
        value = self.raw.get("id")
        return value if isinstance(value, str) else None


Item = (
    Message
    | FunctionCall
    | FunctionCallOutput
    | CustomToolCall
    | CustomToolCallOutput
    | Reasoning
    | Compaction
    | ItemReference
    | McpListTools
    | McpCall
    | McpApprovalRequest
    | McpApprovalResponse
    | TypedCallItem
    | TypedOutputItem
    | AdditionalTools
    | FileSearchCall
    | CodeInterpreterCall
    | AgentItem
)
KNOWN_ITEM_TYPES: dict[str, type[Any]] = {
    str(cls.__struct_config__.tag): cls
    for cls in (
        Message,
        FunctionCall,
        FunctionCallOutput,
        CustomToolCall,
        CustomToolCallOutput,
        Reasoning,
        Compaction,
        ItemReference,
        McpListTools,
        McpCall,
        McpApprovalRequest,
        McpApprovalResponse,
        *TYPED_ITEMS,
        *AGENT_ITEMS,
    )
}
# Every item a context holds that has a Struct; a context also holds items of other types, kept raw (OtherItem).
TypedContextItem = (
    Message
    | FunctionCall
    | FunctionCallOutput
    | CustomToolCall
    | CustomToolCallOutput
    | Reasoning
    | Compaction
    | McpItem
    | TypedCallItem
    | TypedOutputItem
    | AdditionalTools
    | FileSearchCall
    | CodeInterpreterCall
    | AgentItem
)
ContextItem = TypedContextItem | OtherItem
# A compaction is an output item when a create compacted its context (`context_management`, issue 14); an MCP
# approval response is only ever input.
OutputItem = (
    Message
    | FunctionCall
    | CustomToolCall
    | Reasoning
    | Compaction
    | McpListTools
    | McpCall
    | McpApprovalRequest
    | TypedCallItem
    | ToolSearchOutput
    | FileSearchCall
    | CodeInterpreterCall
    | AgentItem
)
# What a response's `output` may hold: the model's items and, in a multi-agent response, the client's tool outputs
# injected into it (`response.inject`, protocol.md §1.12), as openai-python's output union has them.
ResponseItem = OutputItem | FunctionCallOutput | CustomToolCallOutput | TypedOutputItem


def item_to_builtins(item: ContextItem) -> Any:
    """The item as JSON-ready builtins (used for storage and the input_items listing)."""
    if isinstance(item, OtherItem):
        return item.raw
    return msgspec.to_builtins(item)


def output_text(items: Sequence[ResponseItem]) -> str:
    """The text of the assistant messages among `items` (the SDK's `output_text`)."""
    return "".join(
        part.text
        for item in items
        if isinstance(item, Message)
        for part in item.content
        if isinstance(part, OutputText)
    )
