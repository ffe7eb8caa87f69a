"""The listing stage of a turn with MCP servers (protocol.md §1.10): each declared server's tools are offered to
the model from an `mcp_list_tools` item already in the context, or listed now (the turn's first output items).

Listing is what a WebSocket connection's cache saves: a chain continued with the same tools reuses the offered
set it cached (pipeline/tools.py `ToolSet.listed`) and lists nothing; a stateless client that resends the items is
served from them. A server that cannot be listed fails the create (424) before anything is generated or stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

import msgspec

from hotloop.chat.specs import ToolSpec
from hotloop.config import Settings
from hotloop.errors import McpListFailed
from hotloop.ids import new_id
from hotloop.mcp import Clients, Endpoint, ListedTool, ListFailed, NotAllowed
from hotloop.observability.metrics import Metrics
from hotloop.pipeline.mcp.declare import Declared, endpoint
from hotloop.pipeline.tools import ToolSet, check_unique
from hotloop.wire.items import ContextItem, McpListedTool, McpListTools


def endpoints(tools: ToolSet, settings: Settings) -> dict[str, Endpoint]:
    """Where each declared server is, by label; raises `McpServerNotAllowed` (400) for a URL outside the allowlist,
    before any connection. Checked on every request: the cached tools of a chain too."""
    return {declared.label: endpoint(declared, settings) for declared in tools.mcp}


async def offer(
    clients: Clients,
    metrics: Metrics,
    owner: str,
    tools: ToolSet,
    where: dict[str, Endpoint],
    context: Iterable[ContextItem],
) -> tuple[ToolSet, list[McpListTools]]:
    """The request's tools with its MCP servers' tools offered, and the lists this turn made (its first output
    items); raises `McpListFailed` (424) for a server that cannot be listed."""
    if not tools.mcp or tools.listed:  # none, or the chain's cached offer (the same tools as its parent's)
        metrics.mcp_lists.labels("reused").inc(len(tools.mcp))
        return tools, []
    found = _in_context(context, {declared.label for declared in tools.mcp})
    missing = [declared for declared in tools.mcp if declared.label not in found]
    metrics.mcp_lists.labels("reused").inc(len(found))
    try:
        made = await asyncio.gather(*(_list(clients, owner, d, where[d.label]) for d in missing))
    except McpListFailed:
        metrics.mcp_lists.labels("failed").inc()
        raise
    metrics.mcp_lists.labels("listed").inc(len(made))
    lists = {**found, **{item.server_label: item for item in made}}
    return _offered(tools, [lists[declared.label] for declared in tools.mcp]), list(made)


def _in_context(context: Iterable[ContextItem], labels: set[str]) -> dict[str, McpListTools]:
    """The latest successful list of each label in the context."""
    found: dict[str, McpListTools] = {}
    for item in context:
        if isinstance(item, McpListTools) and item.server_label in labels and item.error is None:
            found[item.server_label] = item
    return found


async def _list(clients: Clients, owner: str, declared: Declared, where: Endpoint) -> McpListTools:
    try:
        tools = await clients.list_tools(owner, where)
    except (ListFailed, NotAllowed) as exc:
        raise McpListFailed(declared.label, str(exc)) from None
    # The item lists the whole catalogue: a later request may allow other tools and still read its list from here
    # (`allowed_tools` filters what is offered: `_offered`).
    return McpListTools(id=new_id("mcpl"), server_label=declared.label, tools=[_item_tool(tool) for tool in tools])


def _item_tool(tool: ListedTool) -> McpListedTool:
    return McpListedTool(
        name=tool.name, input_schema=tool.input_schema, description=tool.description, annotations=tool.annotations
    )


def _offered(tools: ToolSet, lists: Sequence[McpListTools]) -> ToolSet:
    """The set with each server's allowed tools as specs (namespaced by label: `label.tool` to the model)."""
    specs: list[ToolSpec] = list(tools.specs)
    deferred: list[ToolSpec] = list(tools.deferred)
    approvals: set[tuple[str, str]] = set()
    for declared, listed in zip(tools.mcp, lists, strict=True):
        for tool in listed.tools:
            if not declared.offered(tool):
                continue
            (deferred if declared.deferred else specs).append(
                ToolSpec(
                    name=tool.name,
                    kind="mcp",
                    description=tool.description,
                    parameters=tool.input_schema,
                    namespace=declared.label,
                )
            )
            if declared.needs_approval(tool):
                approvals.add((declared.label, tool.name))
    check_unique([*specs, *deferred])
    return msgspec.structs.replace(
        tools, specs=tuple(specs), deferred=tuple(deferred), listed=tuple(lists), approvals=frozenset(approvals)
    )
