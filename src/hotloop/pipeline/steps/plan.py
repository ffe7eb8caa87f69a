"""What a turn whose server runs steps between its generations carries from its preparation (pipeline/prepare.py)
to its step loop (loop.py): the MCP servers, approved calls and listings; empty for a turn that only searches its
deferred tools or runs a multi-agent response."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hotloop.mcp import Endpoint
from hotloop.wire.items import ContextItem, McpCall, McpListTools


@dataclass(frozen=True, slots=True)
class StepPlan:
    """What the step loop of a turn starts from."""

    endpoints: dict[str, Endpoint]  # by server label
    listed: list[McpListTools]  # the lists this turn made: its first output items
    approved: list[McpCall]  # calls approved by this create's input, run before it generates
    context: Sequence[ContextItem] = ()  # the items before the output, for a token model (a chat API: its prompt)
