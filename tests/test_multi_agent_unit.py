"""The multi-agent actions as a tool kind (tools/multi_agent.py): their arguments checked, targets resolved, and
how their items read to a model; a subagent's items never in the root's rendered context (chat/hosted.py)."""

from __future__ import annotations

import json

import pytest

from hotloop.chat.hosted import as_calls
from hotloop.tools import multi_agent
from hotloop.wire.agent_items import MultiAgentCall
from hotloop.wire.items import FunctionCall, FunctionCallOutput, InputText, Message

pytestmark = pytest.mark.fast


def _call(action: str, arguments: object) -> MultiAgentCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return multi_agent.build(action, "call_1", text)


def test_arguments_are_checked_per_action() -> None:
    assert multi_agent.read(_call("spawn_agent", {"task_name": "a_1", "message": "go"}))["task_name"] == "a_1"
    for action, arguments, said in [
        ("spawn_agent", {"task_name": "Bad Name", "message": "go"}, "task_name"),
        ("spawn_agent", {"task_name": "a"}, "message"),
        ("send_message", {"message": "hi"}, "target"),
        ("interrupt_agent", "not json", "JSON object"),
        ("send_message", {"target": "a", "message": "x" * (multi_agent.MESSAGE_MAX + 1)}, "longer"),
    ]:
        with pytest.raises(multi_agent.BadCall, match=said):
            multi_agent.read(_call(action, arguments))
    assert multi_agent.wait_ms({}) == multi_agent.WAIT_DEFAULT_MS
    assert multi_agent.wait_ms({"timeout_ms": 10**9}) == multi_agent.WAIT_MAX_MS


def test_targets_resolve_below_the_caller_or_absolutely() -> None:
    assert multi_agent.resolve("/root", "worker") == "/root/worker"
    assert multi_agent.resolve("/root/worker", "/root/") == "/root"
    assert multi_agent.resolve("/root/worker", "/root/other") == "/root/other"


def test_items_read_as_a_function_call_its_output_and_a_user_message() -> None:
    call = _call("list_agents", {})
    output = multi_agent.answer(call, {"agents": []})
    message = multi_agent.message("/root", "/root/worker", "do it")
    lowered = [*multi_agent.lower(call), *multi_agent.lower(output), *multi_agent.lower(message)]
    assert isinstance(lowered[0], FunctionCall) and lowered[0].name == "list_agents"
    assert isinstance(lowered[1], FunctionCallOutput) and lowered[1].output == '{"agents": []}'
    assert isinstance(lowered[2], Message) and "Message from /root:\ndo it" in lowered[2].content[0].text  # type: ignore[union-attr]
    stamped = multi_agent.message("/root", "/root/worker", "seen by the client")
    stamped.agent = {"agent_name": "/root"}
    assert multi_agent.lower(stamped) == []  # in the response's output: its recipient reads its mailbox


def test_a_subagents_items_are_not_rendered_for_the_root() -> None:
    spawn = _call("spawn_agent", {"task_name": "w", "message": "go"})
    spawn.agent = multi_agent.ROOT
    theirs = Message(role="assistant", content=[InputText(text="mine")], agent={"agent_name": "/root/w"})
    ours = Message(role="assistant", content=[InputText(text="root's")], agent=multi_agent.ROOT)
    rendered = as_calls([spawn, theirs, ours])
    assert theirs not in rendered and ours in rendered and len(rendered) == 2
    assert multi_agent.foreign(theirs) and not multi_agent.foreign(ours)


def test_the_safety_stage_reads_every_agent_items_text() -> None:
    """An agent's call arguments, an action's output and a message between agents are text the safety stage reads
    (sent back as input by a stateless client, too); what other agents said counts as a tool's output."""
    from hotloop.safety.text import is_tool_output, item_texts

    call = _call("send_message", {"target": "/root", "message": "key sk-secret"})
    output = multi_agent.answer(call, {"message": "From /root/w:\\nfound it"})
    message = multi_agent.message("/root/w", "/root", "the answer")
    message.agent = {"agent_name": "/root/w"}
    assert "sk-secret" in "".join(item_texts(call))
    assert "found it" in "".join(item_texts(output)) and "the answer" in "".join(item_texts(message))
    assert is_tool_output(output) and is_tool_output(message) and not is_tool_output(call)
