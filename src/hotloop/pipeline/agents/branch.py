"""A subagent's own loop inside a multi-agent response (protocol.md §1.12): its context (the task, then its own
items), its rendered chain (each step extends it: a prefix-cache hit on the engine), its item writer, and the same
steps as the root's (pipeline/steps/loop.py: generation, the server's calls and actions, the next generation).

Its writer builds items, not events: each item that ends goes to the roster's outbox, and the root's stream adds it
whole, stamped with the subagent's path (hub.py). The subagent runs as a task of its own, within the response's
concurrency bound; its answer (its last message), or why it failed, goes to its parent as an `agent_message`. A
subagent never hangs its response: the response's end cancels it, its generations have the backend timeout, and
its calls and actions draw on the response's `max_tool_calls`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import msgspec

from hotloop.backends.base import GenerationRequest
from hotloop.chat.specs import ToolSpec
from hotloop.errors import HotloopError
from hotloop.ids import new_id
from hotloop.observability.timings import StageTimings
from hotloop.pipeline.agents.actions import AgentActions
from hotloop.pipeline.agents.roster import Agent, Roster
from hotloop.pipeline.generate import Generation, Outcome
from hotloop.pipeline.mcp.calls import Calls
from hotloop.pipeline.prepared import Prepared
from hotloop.pipeline.prompt import render_prompt
from hotloop.pipeline.service import Service
from hotloop.pipeline.steering import required_input
from hotloop.pipeline.steps.loop import Drive, Steps
from hotloop.pipeline.steps.searches import Searches
from hotloop.tools import multi_agent
from hotloop.tools.code_interpreter import KIND as CODE_INTERPRETER
from hotloop.tools.file_search import KIND as FILE_SEARCH
from hotloop.tools.hosted_shell import KIND as HOSTED_SHELL
from hotloop.tools.registry import build_call
from hotloop.tools.tool_search import SERVER_KIND
from hotloop.wire import events as ev
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import Event
from hotloop.wire.items import InputText, Message, ResponseItem
from hotloop.wire.output import Output
from hotloop.wire.response import Response

log = logging.getLogger("hotloop.turn")
_NOTHING = Event("", b"", False)  # what a branch's writer returns for an event: nobody sends it
SERVER_KINDS = frozenset({"mcp", SERVER_KIND, multi_agent.KIND})  # the tools a subagent runs without a client


class BranchOutput(Output):
    """A subagent's own output (wire/output.py): its items, in order; each one that ends is posted to the roster
    for the response's stream, and no event is numbered or sent."""

    def __init__(self, roster: Roster, path: str, template: Response) -> None:
        super().__init__(msgspec.structs.replace(template, output=[], id=f"{template.id}{path}"))
        self.roster, self.path = roster, path

    def emit(self, cls: type[ev._Event], terminal: bool = False, **fields: object) -> Event:
        if cls is ev.OutputItemDone:
            self.roster.post(self.path, fields["item"])  # type: ignore[arg-type]
        return _NOTHING


def branch_writer(roster: Roster, path: str, template: Response) -> ResponseBuilder:
    """A subagent's item writer: the root's kind of writer, through its branch's output."""
    output = BranchOutput(roster, path, template)
    return ResponseBuilder(output.response, reasoning_events="none", typed=build_call, output=output)


@dataclass(slots=True)
class Branch:
    """One subagent's state across its runs (a follow-up task runs it again on the same context)."""

    agent: Agent
    builder: ResponseBuilder
    actions: AgentActions
    steps: Steps | None = None
    request: GenerationRequest | None = None  # its last generation's


class Subagents:
    """Starts and runs a multi-agent response's subagents (`AgentActions`' starter)."""

    def __init__(self, service: Service, prepared: Prepared, roster: Roster, calls: Calls, websocket: bool) -> None:
        self.service, self.prepared, self.roster, self.calls = service, prepared, roster, calls
        self.websocket = websocket  # over HTTP no client can answer a subagent's call: it gets the server's tools
        self._branches: dict[str, Branch] = {}

    def start(self, agent: Agent, task: str) -> None:
        branch = self._branches.get(agent.path)
        if branch is None:
            builder = branch_writer(self.roster, agent.path, self.prepared.response)
            branch = Branch(agent, builder, AgentActions(self.roster, agent, self.calls, self.start))
            self._branches[agent.path] = branch
        agent.status = "pending"
        previous = agent.task  # an interrupted run may still be unwinding: the new one starts after it
        agent.task = asyncio.create_task(self._run(branch, task, previous), name=f"subagent {agent.path}")

    def specs(self, agent: Agent) -> list[ToolSpec]:
        """The tools a subagent may call: the root's (the server's only, over HTTP) and the actions its depth allows;
        not `file_search`, `code_interpreter` or a hosted shell, whose calls only the root's steps run
        (pipeline/steps/)."""
        root_only = (multi_agent.KIND, FILE_SEARCH, CODE_INTERPRETER, HOSTED_SHELL)
        tools = [spec for spec in self.prepared.generation.tools if spec.kind not in root_only]
        if not self.websocket:
            tools = [spec for spec in tools if spec.kind in SERVER_KINDS]
        return [*tools, *multi_agent.offered(agent.depth < self.roster.limits.depth)]

    async def _run(self, branch: Branch, task: str, previous: asyncio.Task[None] | None = None) -> None:
        agent = branch.agent
        if previous is not None and not previous.done():
            await asyncio.wait([previous])  # its writer and context are this run's: one run at a time
            agent.status = "pending"
        try:
            async with self.roster.slots:
                agent.status = "running"
                outcome = await self._steps(branch, task)
            self.roster.used(outcome.usage)
            agent.status = "failed" if outcome.status == "failed" else "completed"
            self._count(agent.status)
            self._report(branch, outcome)
        except asyncio.CancelledError:
            agent.status = "interrupted"
            self._count(agent.status)
            if branch.steps is not None:
                self.roster.used(branch.steps.usage)  # its finished generations' tokens are still the response's
            with contextlib.suppress(Exception):
                branch.builder.close_open("incomplete")  # what it was writing, cut: its item still goes out
            raise
        except Exception as exc:  # never a hung response: the parent reads why
            log.exception("subagent %s failed", agent.path)
            agent.status = "failed"
            self._count(agent.status)
            self._report(branch, Outcome.failed("server_error", f"The subagent failed: {type(exc).__name__}."))

    def _count(self, outcome: str) -> None:
        self.service.metrics.subagents.labels(outcome).inc()

    async def _steps(self, branch: Branch, task: str) -> Outcome:
        request = await self._first(branch, task) if branch.steps is None else await self._again(branch, task)
        if isinstance(request, Outcome):
            return request
        steps = branch.steps
        assert steps is not None
        steered = asyncio.Event()  # never set: an interrupt cancels the subagent's task
        waits = _Waits(branch.agent) if self.websocket else None
        generation = self._generation(branch, request)
        later = functools.partial(self._generation, branch)
        async for _event in steps.run(branch.builder, generation, Drive(later, steered, None, waits, branch.actions)):
            pass
        branch.builder.close_open(
            "incomplete" if steps.outcome and steps.outcome.status == "incomplete" else "completed"
        )
        return steps.outcome or Outcome.failed("server_error", "The subagent's steps ended without an outcome.")

    async def _first(self, branch: Branch, task: str) -> GenerationRequest | Outcome:
        """The subagent's first prompt: the response's instructions and its tools, then its task."""
        prepared, service = self.prepared, self.service
        specs = self.specs(branch.agent)
        context: list[Any] = [_task(task)]
        try:
            prompt = await render_prompt(service.renderer, prepared.model, prepared.request, specs, None, context)
        except HotloopError as exc:
            return Outcome.failed(exc.code, exc.message)
        timings = StageTimings(trace=None)
        calls = self.calls
        branch.steps = Steps(
            service.renderer,
            prepared.model,
            prepared.request,
            specs,
            calls,
            context,
            prompt.state,
            0,
            timings,
            [],
            Searches((), service.tokenize_pool),
        )
        return msgspec.structs.replace(
            prepared.generation,
            prompt_tokens=prompt.tokens,
            items=prompt.items,
            tools=specs,
            deferred=[],
            tool_choice="auto",
            forced_tool=None,
            calls_so_far=0,
            max_output_tokens=prepared.request.max_output_tokens,
            previous_response_id=None,
            agent=branch.agent.path,
        )

    async def _again(self, branch: Branch, task: str) -> GenerationRequest | Outcome:
        """A follow-up task: the subagent's context goes on from where its last run ended."""
        steps, request = branch.steps, branch.request
        assert steps is not None and request is not None
        branch.builder.response.output.append(_task(task))
        return await steps.next_generation(branch.builder, request, 0)

    def _generation(self, branch: Branch, request: GenerationRequest) -> Generation:
        branch.request = request
        service = self.service
        timings = StageTimings(trace=None)
        timings.mark("inference")
        return Generation(
            self.prepared.model,
            request,
            branch.builder,
            timings,
            service.metrics,
            service.settings.backend_timeout_s,
            "subagent",
        )

    def _report(self, branch: Branch, outcome: Outcome) -> None:
        """The subagent's answer (its last message) to its parent, or why it has none."""
        agent = branch.agent
        parent = self.roster.get(agent.parent or "")
        if parent is None:
            return
        output = branch.builder.response.output
        last = output[-1] if output else None
        if outcome.status == "failed":
            error = outcome.error
            text = f"The subagent failed: {error.message if error is not None else 'unknown error'}"
        elif isinstance(last, Message) and last.role == "assistant":
            text = "".join(getattr(part, "text", "") for part in last.content)
        else:
            text = "The subagent ended without an answer."
        message = multi_agent.message(agent.path, parent.path, text)
        parent.deliver(message)
        self.roster.post(agent.path, message)


class _Waits:
    """How a subagent waits for its client's outputs: the hub hands it those that answer its calls."""

    __slots__ = ("agent", "blocked", "took")

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.took = False
        self.blocked = False  # the hub's safety read covers every injected output

    def needed(self, builder: ResponseBuilder) -> bool:
        return bool(required_input(builder.response.output))

    async def outputs(self, builder: ResponseBuilder, calls: Calls, steered: asyncio.Event) -> AsyncGenerator[Event]:
        agent, self.took = self.agent, False
        while True:
            outputs, agent.outputs = agent.outputs, []
            builder.response.output.extend(outputs)  # in its context; the hub has put them in the response's
            self.took = self.took or bool(outputs)
            if not self.needed(builder):
                return
            agent.bell.clear()
            await agent.bell.wait()
        yield _NOTHING  # pragma: no cover  (an async generator that yields nothing)


def _task(text: str) -> ResponseItem:
    return Message(role="user", content=[InputText(text=text)], id=new_id("msg"))
