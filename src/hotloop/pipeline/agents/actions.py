"""One agent's multi-agent calls, run by the server (protocol.md §1.12; the actions: tools/multi_agent.py): after
a generation of that agent, each `multi_agent_call` it wrote gets its `multi_agent_call_output`, and the agent's
steps go on (pipeline/steps/loop.py). Every action but `wait_agent` answers at once; a wait ends when a message
reaches the agent, when nothing below it runs any more, at its timeout, or when the response is steered.

The root's actions run in the response's own stream: while the root waits, the hub (hub.py) adds what comes in.
A subagent's run in its own branch (branch.py); its messages go out through the roster's outbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

from hotloop.pipeline.agents.hub import Hub
from hotloop.pipeline.agents.roster import RUNNING, Agent, Roster
from hotloop.pipeline.mcp.calls import Calls
from hotloop.tools import multi_agent
from hotloop.tools.multi_agent import BadCall
from hotloop.wire.agent_items import AgentMessage, MultiAgentCall
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import Event

# Starts (or restarts, for a follow-up) a subagent's run: branch.py.
Starter = Callable[[Agent, str], None]


class AgentActions:
    """The executor of one agent's multi-agent calls: `run` after each of its generations."""

    def __init__(self, roster: Roster, agent: Agent, calls: Calls, start: Starter, hub: Hub | None = None) -> None:
        self.roster = roster
        self.agent = agent
        self.calls = calls  # the response's budget of built-in calls (`max_tool_calls`), shared by every agent
        self.start = start
        self.hub = hub  # the root's: what comes in while it waits goes out in its stream
        self._answered: set[str] = set()
        self.acted = False  # the last `run` answered a call: the agent generates again

    async def run(self, builder: ResponseBuilder, steered: asyncio.Event) -> AsyncGenerator[Event]:
        """The outputs of the calls the agent's last generation wrote, in order."""
        self.acted = False
        for call in [item for item in builder.response.output if isinstance(item, MultiAgentCall)]:
            if call.call_id in self._answered or multi_agent.foreign(call):  # a subagent's: its branch runs it
                continue
            self._answered.add(call.call_id)
            self.acted = True
            if self.calls.exhausted:
                result: dict[str, Any] = {"error": "Not run: the response reached max_tool_calls."}
            else:
                self.calls.spend(1)
                result = {}
                async for event in self._act(call, builder, steered, result):
                    yield event
            for event in builder.add_item(multi_agent.answer(call, result)):
                yield event

    async def between(self, builder: ResponseBuilder) -> AsyncGenerator[Event]:
        """What reached the agent while it worked, in before its next generation: for the root, what the hub holds
        (its stream); for a subagent, the messages sent to it, as input in its own context."""
        if self.hub is not None:
            async for event in self.hub.pump(builder, self.calls):
                yield event
            return
        # A mailbox holds messages as made (no `agent`: the response's copy is stamped), so they render as input.
        builder.response.output.extend(self.agent.take_mail())

    async def _act(
        self, call: MultiAgentCall, builder: ResponseBuilder, steered: asyncio.Event, result: dict[str, Any]
    ) -> AsyncGenerator[Event]:
        """Run `call`, filling `result` (the output's object); yields what the root's stream takes while it waits."""
        try:
            arguments = multi_agent.read(call)
            if call.action == "wait_agent":
                async for event in self._wait(builder, multi_agent.wait_ms(arguments), steered, result):
                    yield event
                return
            if call.action == "send_message" or call.action == "followup_task":
                sent = self._send(builder, arguments, call.action == "followup_task")
                for event in sent:
                    yield event
            else:
                result.update(self._instant(call.action, arguments))
        except BadCall as exc:
            result.clear()
            result["error"] = str(exc)

    def _instant(self, action: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if action == "spawn_agent":
            return {"task_name": self._spawn(arguments["task_name"], arguments["message"])}
        if action == "interrupt_agent":
            target = self._target(arguments["target"], below=True)
            previous = target.status
            if target.task is not None and not target.task.done():
                target.task.cancel()
                target.status = "interrupted"
            return {"previous_status": previous}
        return {
            "agents": [
                {"agent_name": agent.path, "agent_status": agent.status} for agent in self.roster.agents.values()
            ]
        }

    def _spawn(self, name: str, task: str) -> str:
        roster, limits = self.roster, self.roster.limits
        if self.agent.depth >= limits.depth:
            raise BadCall(f"Subagents may not spawn below depth {limits.depth} (setting multi_agent_max_depth).")
        if roster.spawned >= limits.total:
            raise BadCall(
                f"This response has spawned {limits.total} subagents, its bound (setting multi_agent_max_subagents)."
            )
        path = f"{self.agent.path}/{name}"
        if roster.get(path) is not None:
            raise BadCall(f"An agent {path} exists already: pick another task_name.")
        child = roster.add(path, self.agent)
        self.start(child, task)
        return path

    def _send(self, builder: ResponseBuilder, arguments: dict[str, Any], followup: bool) -> list[Event]:
        target = self._target(arguments["target"], below=followup)
        if target is self.agent:
            raise BadCall("An agent cannot message itself.")
        item = multi_agent.message(self.agent.path, target.path, arguments["message"])
        if followup and target.status not in RUNNING:
            self.start(target, arguments["message"])  # a finished agent starts again on the new task
        else:
            target.deliver(item)
        return self._publish(builder, item)

    def _publish(self, builder: ResponseBuilder, item: AgentMessage) -> list[Event]:
        """A message this agent sent, in the response's output: the root's at once, a subagent's via the outbox."""
        if self.hub is not None:
            return builder.add_item(item)
        self.roster.post(self.agent.path, item)
        return []

    def _target(self, name: str, below: bool) -> Agent:
        path = multi_agent.resolve(self.agent.path, name)
        agent = self.roster.get(path)
        if agent is None:
            raise BadCall(f"No agent {path} in this response (list_agents names them).")
        if below and not path.startswith(self.agent.path + "/"):
            raise BadCall(f"{path} is not one of your subagents.")
        return agent

    async def _wait(
        self, builder: ResponseBuilder, ms: int, steered: asyncio.Event, result: dict[str, Any]
    ) -> AsyncGenerator[Event]:
        agent, hub = self.agent, self.hub
        deadline = time.monotonic() + ms / 1000
        while True:
            if hub is not None:
                async for event in hub.pump(builder, self.calls):
                    yield event
            mail = agent.take_mail()
            if mail:
                result.update(message="\n\n".join(_read(item) for item in mail), timed_out=False)
                return
            if not self.roster.busy_below(agent.path):
                result.update(message="No subagent of yours is running, and no message came.", timed_out=False)
                return
            left = deadline - time.monotonic()
            if left <= 0 or steered.is_set() or (hub is not None and hub.blocked):  # blocked: the response ends
                result.update(message="", timed_out=True)
                return
            if hub is not None:
                await hub.wait(left)
            else:
                agent.bell.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(agent.bell.wait(), left)


def _read(item: AgentMessage) -> str:
    return f"From {item.author}:\n{multi_agent.message_text(item)}"
