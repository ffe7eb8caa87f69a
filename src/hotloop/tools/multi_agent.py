"""The multi-agent actions (protocol.md §1.12), as one tool kind: offered to the model as six functions when a
response has `multi_agent.enabled`, written back as `multi_agent_call` items, run by the server
(pipeline/agents/), answered by `multi_agent_call_output` items in the same response.

The actions' arguments are untyped upstream; they follow Codex's multi-agent tools (as agentic-api does):
- `spawn_agent {task_name, message}`: a subagent `<caller>/<task_name>` starts on `message` → `{"task_name": path}`
- `send_message {target, message}`: a message into the target's mailbox → `{}`
- `followup_task {target, message}`: a new task for an agent (restarting it when it has finished) → `{}`
- `wait_agent {timeout_ms?}`: until a message reaches the caller → `{"message", "timed_out"}`
- `interrupt_agent {target}`: stops the target's run → `{"previous_status"}`
- `list_agents {}` → `{"agents": [{"agent_name", "agent_status"}]}`
A call the server cannot run answers `{"error": "…"}`: the model reads why, the response goes on.

An item carries `agent: {agent_name}`, the agent that produced it: `/root` for the response's own, a path below it
for a subagent's. The root's context never holds a subagent's items (`foreign`): those stay in the subagent's own.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, get_args

from hotloop.ids import new_id
from hotloop.tools.client import parse_arguments
from hotloop.tools.spec import ToolSpec
from hotloop.wire.agent_items import Action, AgentMessage, AgentText, MultiAgentCall, MultiAgentCallOutput
from hotloop.wire.items import FunctionCall, FunctionCallOutput, InputText, Message

KIND = "multi_agent"
ROOT_NAME = "/root"
ROOT = {"agent_name": ROOT_NAME}
ACTIONS: tuple[Action, ...] = get_args(Action)
TASK_NAME = re.compile(r"^[a-z0-9_]{1,64}$")
WAIT_DEFAULT_MS = 30_000
WAIT_MIN_MS, WAIT_MAX_MS = 1, 3_600_000
MESSAGE_MAX = 64_000  # characters of one message or task


_TARGET = {"type": "string", "description": "The agent: its path (/root/name) or a name below you."}
_MESSAGE = {"type": "string", "description": "What to say or do, in full: the agent sees nothing else of yours."}
_PARAMETERS: dict[str, dict[str, Any]] = {
    "spawn_agent": {
        "properties": {
            "task_name": {"type": "string", "description": "A short name: lowercase letters, digits, _."},
            "message": _MESSAGE,
        },
        "required": ["task_name", "message"],
    },
    "send_message": {"properties": {"target": _TARGET, "message": _MESSAGE}, "required": ["target", "message"]},
    "followup_task": {"properties": {"target": _TARGET, "message": _MESSAGE}, "required": ["target", "message"]},
    "wait_agent": {
        "properties": {"timeout_ms": {"type": "integer", "description": "How long to wait at most (default 30000)."}},
        "required": [],
    },
    "interrupt_agent": {"properties": {"target": _TARGET}, "required": ["target"]},
    "list_agents": {"properties": {}, "required": []},
}
_DESCRIPTIONS = {
    "spawn_agent": "Start a subagent on a task; it works alongside you and messages you its answer.",
    "send_message": "Send a message to another agent (your parent, a subagent, a sibling).",
    "followup_task": "Give an agent a further task; a finished agent starts again on it.",
    "wait_agent": "Wait until a message reaches you (a subagent's answer), or the timeout.",
    "interrupt_agent": "Stop an agent's current work.",
    "list_agents": "The agents of this response and their status.",
}
SPECS: dict[str, ToolSpec] = {
    action: ToolSpec(
        action,
        KIND,
        _DESCRIPTIONS[action],
        {"type": "object", **_PARAMETERS[action], "additionalProperties": False},
    )
    for action in ACTIONS
}


def offered(may_spawn: bool) -> list[ToolSpec]:
    """The actions an agent is offered: `spawn_agent` only above the depth bound."""
    return [spec for action, spec in SPECS.items() if may_spawn or action != "spawn_agent"]


def build(action: str, call_id: str, arguments: str) -> MultiAgentCall:
    """The call item of an action the model wrote (its arguments as written; `read` checks them when it runs)."""
    known: Action = action if action in ACTIONS else "list_agents"
    return MultiAgentCall(id=new_id("mac"), call_id=call_id, action=known, arguments=arguments)


def answer(call: MultiAgentCall, result: dict[str, Any]) -> MultiAgentCallOutput:
    return MultiAgentCallOutput(
        id=new_id("maco"),
        call_id=call.call_id,
        action=call.action,
        output=[AgentText(json.dumps(result, ensure_ascii=False))],
    )


def message(author: str, recipient: str, text: str) -> AgentMessage:
    return AgentMessage(
        id=new_id("amsg"), author=author, recipient=recipient, content=[{"type": "input_text", "text": text}]
    )


def message_text(item: AgentMessage) -> str:
    return "".join(part.get("text", "") for part in item.content if isinstance(part.get("text"), str))


class BadCall(Exception):
    """Arguments an action cannot run with: the call's output says why."""


def read(call: MultiAgentCall) -> dict[str, Any]:
    """The call's arguments, checked for its action; raises `BadCall`."""
    arguments = parse_arguments(call.arguments)
    if arguments is None:
        raise BadCall("arguments must be a JSON object")
    for name in _PARAMETERS[call.action]["required"]:
        value = arguments.get(name)
        if not isinstance(value, str) or not value:
            raise BadCall(f"'{name}' must be a non-empty string")
    if call.action == "spawn_agent" and not TASK_NAME.match(arguments["task_name"]):
        raise BadCall("'task_name' must be 1-64 of a-z, 0-9 and _")
    text = arguments.get("message")
    if isinstance(text, str) and len(text) > MESSAGE_MAX:
        raise BadCall(f"'message' is longer than {MESSAGE_MAX} characters")
    return arguments


def wait_ms(arguments: dict[str, Any]) -> int:
    value = arguments.get("timeout_ms")
    if not isinstance(value, int) or isinstance(value, bool):
        return WAIT_DEFAULT_MS
    return min(WAIT_MAX_MS, max(WAIT_MIN_MS, value))


def resolve(caller: str, target: str) -> str:
    """A target's path: absolute (`/root/…`), or a name below the caller."""
    if target.startswith("/"):
        return target.rstrip("/") or "/"
    return f"{caller}/{target}"


def foreign(item: Any) -> bool:
    """An item a subagent produced: never in the root's context."""
    agent = getattr(item, "agent", None)
    return agent is not None and agent.get("agent_name", ROOT_NAME) != ROOT_NAME


def lower(
    item: MultiAgentCall | MultiAgentCallOutput | AgentMessage,
) -> list[FunctionCall | FunctionCallOutput | Message]:
    """The item as every chat format renders it: a call and its output as a function's; a message delivered into
    an agent's own context (no `agent`: chat/hosted.py) as a user message naming its author."""
    if isinstance(item, MultiAgentCall):
        return [FunctionCall(call_id=item.call_id, name=item.action, arguments=item.arguments, id=item.id)]
    if isinstance(item, MultiAgentCallOutput):
        text = "".join(part.text for part in item.output)
        return [FunctionCallOutput(call_id=item.call_id, output=text, id=item.id)]
    if item.agent is not None:
        return []  # in the output for the client to see; its recipient reads it through its mailbox
    text = f"Message from {item.author}:\n{message_text(item)}"
    return [Message(role="user", content=[InputText(text=text)], id=item.id)]


def sample(action: Literal["spawn_agent", "wait_agent", "list_agents"], number: int) -> dict[str, Any]:
    """hotloop-sim's arguments for an action."""
    if action == "spawn_agent":
        return {"task_name": f"worker_{number}", "message": f"Work on part {number} of the task and report back."}
    if action == "wait_agent":
        return {"timeout_ms": WAIT_DEFAULT_MS}
    return {}
