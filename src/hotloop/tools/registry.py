"""Every tool kind by the names the stages ask with: a `tools[i].type`, a ToolSpec's kind, an item's type.

The stages ask here instead of branching on kinds: which types are client-run typed tools, which are refused,
which items are calls and which are their outputs (paired by call id), and how a typed item reads to the model.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from hotloop.tools import code_interpreter, file_search, hosted_shell, multi_agent
from hotloop.tools.apply_patch import APPLY_PATCH
from hotloop.tools.client import ClientTool
from hotloop.tools.computer import COMPUTER
from hotloop.tools.local_shell import LOCAL_SHELL
from hotloop.tools.shell import SHELL
from hotloop.tools.tool_search import CLIENT_KIND, SERVER_KIND, TOOL_SEARCH
from hotloop.wire.agent_items import MultiAgentCall
from hotloop.wire.items import (
    CustomToolCall,
    CustomToolCallOutput,
    FunctionCall,
    FunctionCallOutput,
)
from hotloop.wire.tool_items import CodeInterpreterCall, FileSearchCall, TypedCallItem

CLIENT_TOOLS: tuple[ClientTool, ...] = (SHELL, LOCAL_SHELL, APPLY_PATCH, COMPUTER, TOOL_SEARCH)
BY_TYPE: dict[str, ClientTool] = {name: tool for tool in CLIENT_TOOLS for name in tool.types}
# By ToolSpec.kind: a search the client runs is a kind of its own, so that its call says so (`execution`).
BY_KIND: dict[str, ClientTool] = {tool.kind: tool for tool in CLIENT_TOOLS} | {CLIENT_KIND: TOOL_SEARCH}
SEARCH_KINDS = frozenset({SERVER_KIND, CLIENT_KIND})
BY_ITEM: dict[type[Any], ClientTool] = {cls: tool for tool in CLIENT_TOOLS for cls in (tool.call, tool.output)}
TYPED_ITEM_TYPES = frozenset(BY_ITEM)

# Tool types a client may send that this server does not run (protocol.md §1.4): refused by name. `web_search` is
# among them, unless the `drop_tool_types` setting (default: web_search and image_generation, which unmodified Codex
# and Cline always send: config.DEFAULT_DROPPED_TOOL_TYPES) drops it, logged and counted.
HOSTED_TYPES = frozenset(
    {
        "image_generation",
        "programmatic_tool_calling",
        "web_search",
        "web_search_preview",
        "web_search_2025_08_26",
        "web_search_preview_2025_03_11",
    }
)

# Calls and their outputs: every item the next input may answer, and every answer (paired by call id).
CALL_TYPES: tuple[type[Any], ...] = (FunctionCall, CustomToolCall, *(tool.call for tool in CLIENT_TOOLS))
OUTPUT_TYPES: tuple[type[Any], ...] = (
    FunctionCallOutput,
    CustomToolCallOutput,
    *(tool.output for tool in CLIENT_TOOLS),
)
_CALLS = frozenset(CALL_TYPES)
# The output item type that answers each call type (the stubs of a steered response's `required_input`).
OUTPUT_OF: dict[type[Any], str] = {
    call: str(output.__struct_config__.tag) for call, output in zip(CALL_TYPES, OUTPUT_TYPES, strict=True)
}
_OUTPUTS = frozenset(OUTPUT_TYPES)


def pair(item: Any) -> tuple[Literal["call", "output"], str] | None:
    """("call", its call id) for a call the client answers, ("output", the call id it answers) for an answer;
    None for any other item (an MCP call the server ran pairs with nothing the client sends)."""
    kind = type(item)
    typed = BY_ITEM.get(kind)
    if kind in _CALLS:
        return "call", typed.call_key(item) if typed is not None else item.call_id
    if kind in _OUTPUTS:
        return "output", typed.answers(item) if typed is not None else item.call_id
    return None


def call_ids(items: Iterable[Any]) -> set[str]:
    """The call ids of the calls among `items`."""
    return {found[1] for item in items if (found := pair(item)) is not None and found[0] == "call"}


def answered(items: Iterable[Any]) -> set[str]:
    """The call ids the outputs among `items` answer."""
    return {found[1] for item in items if (found := pair(item)) is not None and found[0] == "output"}


def build_call(
    kind: str, call_id: str, arguments: str, complete: bool, name: str = ""
) -> TypedCallItem | MultiAgentCall | FileSearchCall | CodeInterpreterCall:
    """wire/builder.py's `CallBuilder`: the typed call item of a kind's call the model wrote (`name`: the tool's)."""
    if kind == multi_agent.KIND:
        return multi_agent.build(name, call_id, arguments)
    if kind == file_search.KIND:  # run by the server (pipeline/steps/file_searches.py)
        return file_search.build(arguments, complete)
    if kind == code_interpreter.KIND:  # run by the server (pipeline/steps/code_runs.py)
        return code_interpreter.build(arguments, complete)
    if kind == hosted_shell.KIND:  # the client's shell_call, run by the server (pipeline/steps/shell_runs.py)
        return hosted_shell.build(call_id, arguments, complete)
    if kind == CLIENT_KIND:
        return TOOL_SEARCH.build(call_id, arguments, complete, "client")
    return BY_KIND[kind].build(call_id, arguments, complete)
