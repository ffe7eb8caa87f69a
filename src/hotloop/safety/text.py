"""The free text of an item, as the classifiers read it: message text, call arguments, tool outputs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from hotloop.tools import code_interpreter, file_search, mcp
from hotloop.tools.mcp import McpItem, leaf_strings
from hotloop.tools.registry import BY_ITEM
from hotloop.wire.agent_items import AgentMessage, MultiAgentCall, MultiAgentCallOutput
from hotloop.wire.items import (
    ContextItem,
    CustomToolCall,
    CustomToolCallOutput,
    FunctionCall,
    FunctionCallOutput,
    InputText,
    McpCall,
    McpListTools,
    Message,
    OtherItem,
    OutputText,
    Reasoning,
    Refusal,
)
from hotloop.wire.tool_items import CodeInterpreterCall, FileSearchCall, TypedOutputItem


def _parts_text(parts: Sequence[Any]) -> Iterator[str]:
    for part in parts:
        if isinstance(part, InputText | OutputText):
            yield part.text
        elif isinstance(part, Refusal):
            yield part.refusal


def item_texts(item: ContextItem) -> Iterator[str]:
    """Every piece of free text an item carries: message text, call arguments and inputs, tool outputs.

    Images, files (base64 or URLs), sealed blobs and ids are not text and are skipped.
    """
    typed = BY_ITEM.get(type(item))
    if typed is not None:  # a typed client tool's call or output reads as its function's (hotloop/tools/)
        yield from item_texts(typed.lower(item))  # type: ignore[arg-type]
    elif isinstance(item, Message):
        yield from _parts_text(item.content)
    elif isinstance(item, FunctionCall):
        yield item.arguments
    elif isinstance(item, CustomToolCall):
        yield item.input
    elif isinstance(item, McpItem):
        yield from mcp.texts(item)
    elif isinstance(item, FileSearchCall):
        yield from file_search.texts(item)
    elif isinstance(item, CodeInterpreterCall):
        yield from code_interpreter.texts(item)
    elif isinstance(item, FunctionCallOutput | CustomToolCallOutput):
        yield from tool_output_texts(item)
    elif isinstance(item, MultiAgentCall):
        yield item.arguments
    elif isinstance(item, MultiAgentCallOutput | AgentMessage):
        yield from tool_output_texts(item)
    elif isinstance(item, Reasoning):
        for summary in item.summary or ():
            yield summary.text
        for text in item.content or ():
            yield text.text
    elif isinstance(item, OtherItem):
        yield from leaf_strings(item.raw)


def is_tool_output(item: ContextItem) -> bool:
    """Text that came back from a tool (what a third party may control), not from the user or the model."""
    if isinstance(item, FunctionCallOutput | CustomToolCallOutput | TypedOutputItem):
        return True
    # What other agents of a multi-agent response said: their text may carry what their tools returned.
    if isinstance(item, MultiAgentCallOutput | AgentMessage):
        return True
    # An MCP server's answer, and the descriptions it gave its tools (the model reads them in its system message).
    if isinstance(item, McpCall | McpListTools):
        return True
    if isinstance(item, FileSearchCall):  # the files' text a search found
        return True
    if isinstance(item, OtherItem):
        kind = item.raw.get("type")
        # `mcp_call`: one stored before MCP items had a type of their own, kept raw (stores/codec.py).
        return isinstance(kind, str) and (kind.endswith("_output") or kind == "mcp_call")
    return False


def tool_output_texts(item: ContextItem) -> Iterator[str]:
    """The text of a tool output item (empty for any other item)."""
    if isinstance(item, TypedOutputItem):
        yield from tool_output_texts(BY_ITEM[type(item)].lower(item))
    elif isinstance(item, FunctionCallOutput | CustomToolCallOutput):
        if isinstance(item.output, str):
            yield item.output
        else:
            yield from _parts_text(item.output)
    elif isinstance(item, McpItem):
        yield from mcp.output_texts(item)
    elif isinstance(item, FileSearchCall):
        yield from file_search.result_texts(item)
    elif isinstance(item, CodeInterpreterCall):
        yield from code_interpreter.output_texts(item)
    elif isinstance(item, MultiAgentCallOutput):
        for part in item.output:
            yield part.text
    elif isinstance(item, AgentMessage):
        yield from leaf_strings(item.content)
    elif isinstance(item, OtherItem) and is_tool_output(item):
        yield from leaf_strings({k: v for k, v in item.raw.items() if k in ("output", "error", "result")})
