"""What a turn with MCP servers carries from its preparation (pipeline/prepare.py) to its steps (steps.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hotloop.mcp import Endpoint
from hotloop.wire.items import ContextItem, McpCall, McpListTools


@dataclass(frozen=True, slots=True)
class McpTurn:
    """What a turn with MCP servers carries from its preparation (pipeline/prepare.py)."""

    endpoints: dict[str, Endpoint]  # by server label
    listed: list[McpListTools]  # the lists this turn made: its first output items
    approved: list[McpCall]  # calls approved by this create's input, run before it generates
    context: Sequence[ContextItem] = ()  # the items before the output, for a token model (a chat API: its prompt)
