"""Conversation items and content parts as they travel on the wire (protocol.md §1.3, §1.5).

These Structs are the single definition of an item's shape: input items are converted into them once, stored
and cached as them, and encoded straight from them into events, response bodies and the store.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

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


class FunctionCall(_Item, tag="function_call"):
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: ItemStatus | None = None
    namespace: str | None = None


class FunctionCallOutput(_Item, tag="function_call_output"):
    call_id: str
    output: str | list[InputPart]
    id: str | None = None
    status: ItemStatus | None = None


class CustomToolCall(_Item, tag="custom_tool_call"):
    call_id: str
    name: str
    input: str
    id: str | None = None
    status: ItemStatus | None = None
    namespace: str | None = None


class CustomToolCallOutput(_Item, tag="custom_tool_call_output"):
    call_id: str
    output: str | list[InputPart]
    id: str | None = None
    status: ItemStatus | None = None


class Reasoning(_Item, tag="reasoning"):
    # None when a client sent none; hotloop's own items set `[]`, which is then on the wire (the schema requires
    # the key, and an empty default would be omitted).
    summary: list[SummaryText] | None = None
    id: str | None = None
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: ItemStatus | None = None


class Compaction(_Item, tag="compaction"):
    encrypted_content: str
    id: str | None = None


class ItemReference(_Item, tag="item_reference"):
    id: str


class OtherItem(msgspec.Struct):
    """An item type hotloop has no slot for (web_search_call, local_shell_call, …): kept verbatim, never fatal."""

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
    )
}
ContextItem = (
    Message
    | FunctionCall
    | FunctionCallOutput
    | CustomToolCall
    | CustomToolCallOutput
    | Reasoning
    | (Compaction | OtherItem)
)
# A compaction is an output item when a create compacted its context (`context_management`, issue 14).
OutputItem = Message | FunctionCall | CustomToolCall | Reasoning | Compaction


def item_to_builtins(item: ContextItem) -> Any:
    """The item as JSON-ready builtins (used for storage and the input_items listing)."""
    if isinstance(item, OtherItem):
        return item.raw
    return msgspec.to_builtins(item)


def output_text(items: list[OutputItem]) -> str:
    """The text of the assistant messages among `items` (the SDK's `output_text`)."""
    return "".join(
        part.text
        for item in items
        if isinstance(item, Message)
        for part in item.content
        if isinstance(part, OutputText)
    )
