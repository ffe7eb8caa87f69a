"""What the server runs between an agent's generations: executors. Each reads the output the agent's last
generation left and answers what is its own (an MCP call, a server-run tool search, a file search, a multi-agent
action), each answer an item; the step loop (loop.py) runs them in order after every generation, and generates
again when any of them answered something (a code run among them: code_runs.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Protocol

from hotloop.pipeline.mcp.calls import Calls
from hotloop.pipeline.steps.searches import Searches
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import Event


class Executor(Protocol):
    def run(self, builder: ResponseBuilder, steered: asyncio.Event) -> AsyncIterator[Event]: ...


class AgentExecutor(Executor, Protocol):
    """A multi-agent response's actions (pipeline/agents/actions.py): an executor that also says what reached the
    agent while it worked (`between`: the root's stream takes injects and subagents' items; a subagent its mail)."""

    def between(self, builder: ResponseBuilder) -> AsyncIterator[Event]: ...


class McpStep:
    """The MCP calls the last generation wrote (pipeline/mcp/calls.py), run at once; `seconds`: their time, from
    dispatch to their items' end (the MCP servers' time included)."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls
        self.seconds = 0.0

    async def run(self, builder: ResponseBuilder, steered: asyncio.Event) -> AsyncGenerator[Event]:
        pending = builder.mcp_pending()
        if not pending:
            return
        started = time.perf_counter()
        async for event in self.calls.run(builder, pending, steered):
            yield event
        self.seconds += time.perf_counter() - started


class SearchStep:
    """The server-run tool searches the last generation wrote (searches.py), within the response's budget of
    built-in calls (`max_tool_calls`, which the MCP calls share)."""

    def __init__(self, searches: Searches, budget: Calls) -> None:
        self.searches = searches
        self.budget = budget

    async def run(self, builder: ResponseBuilder, steered: asyncio.Event) -> AsyncGenerator[Event]:
        found, ran = await self.searches.run(builder, self.budget.room)
        self.budget.spend(ran)
        for event in found:
            yield event


class ServerCalls(Protocol):
    """Calls the server runs itself that the last generation wrote: file searches (file_searches.py), code runs
    (code_runs.py), a hosted shell's commands (shell_runs.py), each within the response's budget of built-in calls."""

    def pending(self, builder: ResponseBuilder) -> list[int]: ...

    def run(self, builder: ResponseBuilder, steered: asyncio.Event) -> AsyncIterator[Event]: ...


class TimedStep:
    """Runs `calls` after a generation that wrote some; `seconds`: their time, from the first one's start to the
    last one's end."""

    def __init__(self, calls: ServerCalls) -> None:
        self.calls = calls
        self.seconds = 0.0

    async def run(self, builder: ResponseBuilder, steered: asyncio.Event) -> AsyncGenerator[Event]:
        if not self.calls.pending(builder):
            return
        started = time.perf_counter()
        async for event in self.calls.run(builder, steered):
            yield event
        self.seconds += time.perf_counter() - started
