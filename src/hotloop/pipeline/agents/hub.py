"""What reaches a multi-agent response's own stream between its root's steps (protocol.md §1.12): the client's
injected tool outputs (WebSocket, pipeline/inject.py) and the subagents' finished items (roster.py's outbox).

Items go out one at a time (§2.2), so the hub adds them only while the root's builder has no item open: at the
root's step boundaries and while it waits (for its client's outputs, or in `wait_agent`). A subagent's item goes out
whole once it has ended, stamped with its agent; an injected output that answers a subagent's call is added to the
response's output and handed to that subagent (`Agent.outputs`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass

import msgspec

from hotloop.pipeline.agents.roster import Roster
from hotloop.pipeline.inject import Inbox
from hotloop.pipeline.mcp.calls import Calls
from hotloop.pipeline.steering import required_input
from hotloop.tools.multi_agent import foreign
from hotloop.tools.registry import pair
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import Event
from hotloop.wire.items import ResponseItem


class Hub:
    """The root's side of a multi-agent response: its inbox (None over HTTP), its roster, and what came in."""

    def __init__(self, inbox: Inbox | None, roster: Roster) -> None:
        self.inbox = inbox
        self.roster = roster
        self.bell = roster.root.bell
        self.blocked = False  # the safety stage blocked an injected output
        self.took = False  # outputs for the root's own calls were added since `took` was reset

    async def pump(self, builder: ResponseBuilder, calls: Calls) -> AsyncGenerator[Event]:
        """Everything waiting, in order: each committed inject (`response.inject.created`, its outputs) and the
        subagents' finished items; nothing while the root has an item open."""
        if not builder.idle:
            return
        if self.inbox is not None:
            for batch in self.inbox.take():
                yield builder.inject_created()
                read = await calls.safety.scan_async(None, batch, calls.pool)  # as a create's tool outputs are
                start = len(builder.response.output)
                calls.findings += [(start, finding) for finding in read.findings]
                blocked = read.verdict == "block"
                self.blocked = self.blocked or blocked
                for item in batch:
                    for event in self._injected(builder, item, route=not blocked):
                        yield event
        for path, item in self.roster.take_outbox():
            found = pair(item)
            if found is not None and found[0] == "call":
                self.roster.owners[found[1]] = path  # its output, injected later, goes to that subagent
            for event in builder.add_item(item):
                yield event

    def _injected(self, builder: ResponseBuilder, item: ResponseItem, route: bool) -> list[Event]:
        """An injected output in the response's output; one that answers a subagent's call reaches that subagent
        too, unless the safety stage blocked its batch (the response then ends, as for the root's own)."""
        found = pair(item)
        owner = self.roster.get(self.roster.owners.get(found[1], "")) if found is not None else None
        if owner is None:
            self.took = True
            return builder.add_item(item)
        if route:
            owner.outputs.append(item)
            owner.bell.set()
        return builder.add_item(msgspec.structs.replace(item, agent={"agent_name": owner.path}))

    async def rest(self, builder: ResponseBuilder, calls: Calls, status: str) -> AsyncGenerator[Event]:
        """The response is ending: its inbox closes (a later inject is failed once it has ended), and what was
        committed but not yet taken (the last generation failed, or was steered) is still acknowledged, read by the
        safety stage and routed as any inject is, after the item that generation left open, ended as the response
        ends it. `blocked` says whether the safety stage blocked it."""
        inbox = self.inbox
        if inbox is None:
            return
        inbox.close()
        if not inbox.pending():
            return
        for event in builder.close_open("incomplete" if status == "incomplete" else "completed"):
            yield event
        async for event in self.pump(builder, calls):
            yield event

    async def wait(self, seconds: float | None) -> None:
        """Until something comes for the root (an inject, a subagent's item or message, a steer) or `seconds`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.bell.wait(), seconds)
        self.bell.clear()  # whatever rang is taken by the next `pump` (or read by its waiter), after this


@dataclass(slots=True)
class Waits:
    """The root's wait, through the response's hub (pipeline/agents/hub.py), which adds the injected outputs and
    the subagents' items as they come; the bound of one wait (`ws_inject_wait_s`; 0: none), and what it brought."""

    hub: Hub
    seconds: float
    took: bool = False  # outputs were added: the model generates again

    @property
    def blocked(self) -> bool:
        return self.hub.blocked

    def needed(self, builder: ResponseBuilder) -> bool:
        """The root's own calls wait for outputs (a subagent's wait in its branch)."""
        return bool(required_input([item for item in builder.response.output if not foreign(item)]))

    async def outputs(self, builder: ResponseBuilder, calls: Calls, steered: asyncio.Event) -> AsyncGenerator[Event]:
        """Acknowledge and add the injected outputs until no call of the root waits for one. A wait that ends
        with nothing (its bound, or a steer) closes the inbox: the response ends with its calls unanswered, as over
        HTTP, and a later inject is failed once it has ended."""
        hub, inbox = self.hub, self.hub.inbox
        assert inbox is not None
        hub.took = False
        deadline = time.monotonic() + self.seconds if self.seconds > 0 else None
        while True:
            async for event in hub.pump(builder, calls):
                yield event
            self.took = hub.took
            if not self.needed(builder) or steered.is_set() or hub.blocked:
                return
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0 and not inbox.pending():
                inbox.close()  # no await between the check and the close: an inject is taken or late
                return
            await hub.wait(left)
