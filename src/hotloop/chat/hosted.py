"""The items of the kinds a model calls as functions — MCP tools, the typed client tools, the server's file
searches, a multi-agent response's actions — as the function calls and outputs every dialect already renders
(protocol.md §1.10, §1.11, §1.12). Each kind says how its items read (hotloop/tools/: the typed kinds' `lower`,
tools/mcp.py, tools/file_search.py, tools/code_interpreter.py, tools/multi_agent.py); this module only finds
them in a context and asks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from hotloop.tools import code_interpreter, file_search, mcp, multi_agent
from hotloop.tools.registry import BY_ITEM, TYPED_ITEM_TYPES
from hotloop.tools.tool_search import added_message
from hotloop.wire.agent_items import AGENT_ITEMS
from hotloop.wire.items import (
    ContextItem,
)
from hotloop.wire.tool_items import AdditionalTools, CodeInterpreterCall, FileSearchCall

MCP_TYPES = frozenset(mcp.ITEMS)
AGENT_TYPES = frozenset(AGENT_ITEMS)
LOWERED_TYPES = MCP_TYPES | TYPED_ITEM_TYPES | AGENT_TYPES | {AdditionalTools, FileSearchCall, CodeInterpreterCall}
REFUSED = mcp.REFUSED


def has_lowered(items: Sequence[ContextItem]) -> bool:
    # Exact types, not isinstance, looked up in C: this runs over whole contexts (about 4 ms per 100k items).
    return not LOWERED_TYPES.isdisjoint(map(type, items))


def as_calls(items: Sequence[ContextItem]) -> Sequence[ContextItem]:
    """`items` with each MCP, typed tool or multi-agent item replaced by its calls and outputs; `items` itself (not a
    copy) when there is none. A multi-agent response's subagents' items are left out (the root's context never
    holds them, tools/multi_agent.py): its spawn calls are there wherever a subagent's items are."""
    if not has_lowered(items):
        return items
    subagents = not AGENT_TYPES.isdisjoint(map(type, items))
    out: list[ContextItem] = []
    for item in items:
        if subagents and multi_agent.foreign(item):
            continue
        if type(item) in LOWERED_TYPES:
            out.extend(expand(item))
        else:
            out.append(item)
    return out


def expand(item: ContextItem) -> Iterator[ContextItem]:
    """One item's function-call equivalents (nothing for a listing or an approval)."""
    typed = BY_ITEM.get(type(item))
    if typed is not None:
        yield typed.lower(item)  # type: ignore[arg-type]
    elif type(item) in AGENT_TYPES:
        yield from multi_agent.lower(item)  # type: ignore[arg-type]
    elif isinstance(item, AdditionalTools):
        yield added_message(item)
    elif isinstance(item, FileSearchCall):
        yield from file_search.lower(item)
    elif isinstance(item, CodeInterpreterCall):
        yield from code_interpreter.lower(item)
    elif type(item) in MCP_TYPES:
        yield from mcp.lower(item)  # type: ignore[arg-type]
    else:
        yield item
