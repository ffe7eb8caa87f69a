"""The multi-agent actions as a tool kind (tools/multi_agent.py): their arguments checked, targets resolved, and
how their items read to a model; a subagent's items never in the root's rendered context (chat/hosted.py)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from hotloop.chat.hosted import as_calls
from hotloop.pipeline.agents.branch import Subagents
from hotloop.pipeline.agents.roster import Limits, Roster
from hotloop.pipeline.generate import Outcome
from hotloop.pipeline.service import Service
from hotloop.tools import multi_agent
from hotloop.wire.agent_items import MultiAgentCall
from hotloop.wire.items import FunctionCall, FunctionCallOutput, InputText, Message
from hotloop.wire.response import Response

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


async def test_a_followup_to_an_interrupted_agent_runs_once_the_interrupted_run_unwound(sim_service: Service) -> None:
    """`interrupt_agent` cancels a subagent's run, which unwinds at its next await; a `followup_task` right after
    starts it again on the same writer and context only once that run is over: its runs never overlap."""
    roster = Roster(Limits(2, 4, 1), asyncio.Event())
    prepared = SimpleNamespace(response=Response(id="resp_x", created_at=1, model="hotloop-sim"))
    subagents = Subagents(sim_service, prepared, roster, None, websocket=True)  # type: ignore[arg-type]
    running: list[str] = []
    overlaps: list[list[str]] = []

    async def steps(branch: object, task: str) -> Outcome:
        running.append(task)
        overlaps.append(list(running))
        try:
            await asyncio.sleep(0.05)
        finally:
            await asyncio.sleep(0.02)  # unwinding takes a while (a cut item's close, its usage)
            running.remove(task)
        return Outcome(status="completed")

    subagents._steps = steps  # type: ignore[method-assign]
    agent = roster.add("/root/worker", roster.root)
    subagents.start(agent, "first")
    await asyncio.sleep(0.01)
    assert agent.task is not None
    agent.task.cancel()  # as interrupt_agent does
    agent.status = "interrupted"
    subagents.start(agent, "second")  # as followup_task does for an agent not running
    await asyncio.wait_for(agent.task, 5)
    assert overlaps == [["first"], ["second"]] and agent.status == "completed"
