"""The items of a multi-agent response's subagents (protocol.md §1.12), shaped as openai-python 3.63's beta types
them (`types/beta/beta_response_output_item.py`: `MultiAgentCall`, `MultiAgentCallOutput`, `AgentMessage`).

The server runs these calls itself (pipeline/agents/): a `multi_agent_call` is answered by its
`multi_agent_call_output` in the same response, never by the client. `agent` names the agent that produced the item.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Action = Literal["spawn_agent", "interrupt_agent", "list_agents", "send_message", "followup_task", "wait_agent"]


class _Item(msgspec.Struct, tag_field="type", omit_defaults=True, forbid_unknown_fields=False):
    pass


class AgentText(msgspec.Struct, tag_field="type", tag="output_text", omit_defaults=False):
    """An action's result text, as openai-python's `output_text` part (annotations required, empty)."""

    text: str
    annotations: list[Any] = msgspec.field(default_factory=list)


class MultiAgentCall(_Item, tag="multi_agent_call"):
    id: str
    call_id: str
    action: Action
    arguments: str  # the JSON object the model wrote, as it wrote it
    agent: dict[str, str] | None = None


class MultiAgentCallOutput(_Item, tag="multi_agent_call_output"):
    id: str
    call_id: str
    action: Action
    output: list[AgentText]
    agent: dict[str, str] | None = None


class AgentMessage(_Item, tag="agent_message"):
    """A message between agents: a subagent's final answer to its parent, a `send_message`, a `followup_task`."""

    id: str
    author: str
    recipient: str
    content: list[dict[str, Any]]  # parts as openai-python's `AgentMessageContent` union has them (input_text…)
    agent: dict[str, str] | None = None


AGENT_ITEMS: tuple[Any, ...] = (MultiAgentCall, MultiAgentCallOutput, AgentMessage)
AgentItem = MultiAgentCall | MultiAgentCallOutput | AgentMessage
