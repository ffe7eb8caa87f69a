"""The agents of one multi-agent response (protocol.md §1.12): the root and its subagents by path, their status
and mailboxes, the bounds they run within, and the outbox of the subagents' finished items that the root's stream
takes at its boundaries (hub.py). No I/O: one `asyncio.Event` per agent, the subagents' tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

import msgspec

from hotloop.tools.multi_agent import ROOT_NAME
from hotloop.wire.agent_items import AgentMessage
from hotloop.wire.items import ResponseItem
from hotloop.wire.response import Usage

RUNNING = frozenset({"pending", "running"})


@dataclass(frozen=True, slots=True)
class Limits:
    """How far a response's subagents go: at once (`max_concurrent_subagents`), in all, and how deep."""

    concurrent: int = 6
    total: int = 32
    depth: int = 1


@dataclass(slots=True, eq=False)
class Agent:
    """One agent: `pending` (waiting for a slot), `running`, then `completed`, `interrupted` or `failed`."""

    path: str
    parent: str | None
    depth: int
    status: str = "pending"
    mailbox: list[AgentMessage] = field(default_factory=list)
    outputs: list[ResponseItem] = field(default_factory=list)  # injected outputs for its calls (hub.py routes them)
    bell: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def deliver(self, message: AgentMessage) -> None:
        self.mailbox.append(message)
        self.bell.set()

    def take_mail(self) -> list[AgentMessage]:
        mail, self.mailbox = self.mailbox, []
        return mail


class Roster:
    """The response's agents, its subagents' finished items on their way to its output, and what they used."""

    def __init__(self, limits: Limits, bell: asyncio.Event) -> None:
        self.limits = limits
        self.root = Agent(ROOT_NAME, None, 0, "running", bell=bell)  # the root's bell is the response's (hub.py)
        self.agents: dict[str, Agent] = {ROOT_NAME: self.root}
        self.slots = asyncio.Semaphore(limits.concurrent)
        self.spawned = 0
        self.usage: Usage | None = None  # the subagents' generations, added to the response's
        self._outbox: list[tuple[str, ResponseItem]] = []
        self.owners: dict[str, str] = {}  # call id → the subagent whose call it is (injected outputs go there)

    def get(self, path: str) -> Agent | None:
        return self.agents.get(path)

    def add(self, path: str, parent: Agent) -> Agent:
        agent = Agent(path, parent.path, parent.depth + 1)
        self.agents[path] = agent
        self.spawned += 1
        return agent

    def busy_below(self, path: str) -> bool:
        """Whether an agent below `path` still runs (or waits for a slot): a message may still come."""
        prefix = path + "/"
        return any(agent.status in RUNNING for name, agent in self.agents.items() if name.startswith(prefix))

    # -- the outbox -------------------------------------------------------------------------------------------------

    def post(self, path: str, item: ResponseItem) -> None:
        """A subagent's finished item, for the response's output (stamped with its agent there)."""
        self._outbox.append((path, _stamped(item, path)))
        self.root.bell.set()

    def take_outbox(self) -> list[tuple[str, ResponseItem]]:
        out, self._outbox = self._outbox, []
        return out

    def used(self, usage: Usage | None) -> None:
        if usage is not None:
            self.usage = usage.plus(self.usage)

    # -- the end ----------------------------------------------------------------------------------------------------

    def cancel(self) -> None:
        """Stop every subagent (the response ends: its root answered, failed, or its client went away)."""
        for agent in self.agents.values():
            if agent.task is not None and not agent.task.done():
                agent.task.cancel()

    async def stop(self) -> None:
        """Stop every subagent and wait until each has ended (its finished items are in the outbox)."""
        self.cancel()
        tasks = [agent.task for agent in self.agents.values() if agent.task is not None]
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _stamped(item: ResponseItem, path: str) -> ResponseItem:
    if getattr(item, "agent", False) is None:
        return msgspec.structs.replace(item, agent={"agent_name": path})
    return item
