"""The step loop (`Steps.run`, from pipeline/turn.py and, for each subagent, pipeline/agents/branch.py): approved
calls first, then after each generation the executors (executor.py: the server-run searches, the file searches,
the MCP calls, a multi-agent response's actions), a multi-agent response's wait for its client's outputs
(waits.py), and the next generation, whose prompt extends the rendered state with the items made since it was
rendered (the calls and their outputs), as a continuation's does; until the model answers, calls a client's tool
(outside a multi-agent response) or asks for an approval, or the response ends otherwise.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass

import msgspec

from hotloop.backends.base import GenerationRequest
from hotloop.chat.compacted import count_calls
from hotloop.chat.incremental import PromptRenderer, Rendered
from hotloop.chat.render import PromptBase
from hotloop.chat.specs import ToolSpec
from hotloop.errors import HotloopError
from hotloop.models import Model
from hotloop.observability.timings import StageTimings
from hotloop.pipeline.generate import BLOCKED, Generation, Outcome
from hotloop.pipeline.mcp.calls import Calls
from hotloop.pipeline.prepared import Prepared
from hotloop.pipeline.prompt import render_prompt
from hotloop.pipeline.service import Service
from hotloop.pipeline.steps.code_runs import CodeRuns
from hotloop.pipeline.steps.executor import AgentExecutor, Executor, McpStep, SearchStep, TimedStep
from hotloop.pipeline.steps.file_searches import FileSearches
from hotloop.pipeline.steps.searches import Searches
from hotloop.pipeline.steps.shell_runs import ShellRuns
from hotloop.pipeline.steps.waits import StepWaits
from hotloop.tools import code_interpreter, file_search, hosted_shell, multi_agent
from hotloop.tools.multi_agent import foreign
from hotloop.tools.tool_search import SERVER_KIND
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import Event
from hotloop.wire.items import ContextItem, McpApprovalRequest, McpCall
from hotloop.wire.request import CreateRequest
from hotloop.wire.response import Usage


@dataclass(slots=True)
class Drive:
    """What an agent's steps are run with besides their first generation: how each next generation is made, the
    transport's congestion (its deltas merged while true), the steer that stops them, and, in a multi-agent
    response, how the agent waits for its client's outputs (`waits`: where another would end at the client's
    calls) and the executor of its multi-agent calls (`actions`)."""

    next_of: Callable[[GenerationRequest], Generation]
    steered: asyncio.Event
    congested: Callable[[], bool] | None = None
    waits: StepWaits | None = None
    actions: AgentExecutor | None = None


@dataclass(slots=True)
class Steps:
    """One response's in-server steps: its calls so far and where its prompt's rendering stands."""

    renderer: PromptRenderer
    model: Model
    request: CreateRequest
    specs: Sequence[ToolSpec]
    calls: Calls
    context: list[ContextItem]
    rendered: Rendered | None
    rendered_output: int  # how many of the output items `rendered` holds
    timings: StageTimings
    approved: list[McpCall]  # run first: this create answered their requests
    searches: Searches  # the server-run tool searches (searches.py)
    usage: Usage | None = None  # the generations' so far
    overhead_s: float = 0.0  # hotloop's own time between the calls and the next generation: the prompt's extension
    outcome: Outcome | None = None  # how the steps ended, once `run` is done
    mcp: McpStep | None = None
    executors: tuple[Executor, ...] = ()  # what the server runs after each generation, in order (executor.py)
    file_searches: FileSearches | None = None  # a `file_search` tool's searches (file_searches.py)
    code_runs: CodeRuns | None = None  # a `code_interpreter` tool's code (code_runs.py)
    shell_runs: ShellRuns | None = None  # a hosted `shell` tool's commands (shell_runs.py)
    files: TimedStep | None = None
    code: TimedStep | None = None
    shell: TimedStep | None = None

    def __post_init__(self) -> None:
        self.mcp = McpStep(self.calls)
        self.files = TimedStep(self.file_searches) if self.file_searches is not None else None
        self.code = TimedStep(self.code_runs) if self.code_runs is not None else None
        self.shell = TimedStep(self.shell_runs) if self.shell_runs is not None else None
        found = tuple(step for step in (self.files, self.code, self.shell) if step is not None)
        self.executors = (SearchStep(self.searches, self.calls), *found, self.mcp)

    @classmethod
    def of(cls, service: Service, prepared: Prepared, owner: str) -> Steps:
        plan = prepared.steps
        assert plan is not None
        limit = prepared.request.max_tool_calls
        bound = service.settings.mcp_max_calls if limit is None else limit
        calls = Calls(
            service.mcp,
            owner,
            plan.endpoints,
            bound,
            service.metrics,
            service.mcp_calls,
            service.safety,
            # The servers' tools `allowed_tools` lets through, deferred ones too: a search may load them (§1.11).
            frozenset(
                (spec.namespace or "", spec.name)
                for spec in (*prepared.tools.specs, *prepared.tools.deferred)
                if spec.kind == "mcp"
            ),
            service.tokenize_pool,
        )
        # A chat API's engine reads items: the prompt's own (compacted, expanded); a token model's harmony reads
        # the context for the names of calls answered later.
        context = list(prepared.generation.items or plan.context)
        declared, code, shell = prepared.tools.file_search, prepared.tools.code, prepared.tools.shell
        return cls(
            service.renderer,
            prepared.model,
            prepared.request,
            prepared.tools.specs,
            calls,
            context,
            prepared.rendered,
            prepared.rendered_output,
            prepared.timings,
            plan.approved,
            Searches(prepared.generation.deferred, service.tokenize_pool),
            file_searches=FileSearches(service, owner, declared, calls) if declared is not None else None,
            code_runs=CodeRuns(service.code, owner, code, calls, context) if code is not None else None,
            shell_runs=ShellRuns(service.code, owner, shell, calls, context) if shell is not None else None,
        )

    async def run(self, builder: ResponseBuilder, generation: Generation, drive: Drive) -> AsyncGenerator[Event, None]:
        """Every event of the steps, `generation` first (after the approved calls); `outcome` once done."""
        self.usage, self.outcome = None, None
        if self.approved:
            async for event in self._approved(builder, drive.steered):
                yield event
            step = await self._next(builder, generation.request, drive.steered)
            if isinstance(step, Outcome):
                self.outcome = step
            else:
                generation = drive.next_of(step)
        if self.outcome is None:
            async for event in self._loop(builder, generation, drive):
                yield event
        self.timings.add("mcp_step", self.overhead_s)
        self.timings.add("mcp_call", self.mcp.seconds if self.mcp is not None else 0.0)
        if self.files is not None:
            self.timings.add("file_search", self.files.seconds)
        if self.code is not None:
            self.timings.add("code_interpreter", self.code.seconds)
        if self.shell is not None:
            self.timings.add("shell", self.shell.seconds)

    async def _loop(
        self, builder: ResponseBuilder, generation: Generation, drive: Drive
    ) -> AsyncGenerator[Event, None]:
        """Generate, run what the server runs, wait for the client's outputs (multi-agent), generate again; until
        `outcome` is set."""
        steered, waits, actions = drive.steered, drive.waits, drive.actions
        while True:
            async for event in generation.events(drive.congested):
                yield event
            result = generation.result()
            self.usage = result.usage.plus(self.usage) if result.usage is not None else self.usage
            self._count_model_time(generation)
            if result.status != "completed":
                self.outcome = msgspec.structs.replace(result, usage=self.usage)
                return
            worked = False  # the server answered something (each answer is an item): the model generates again
            async for event in self._server_work(builder, steered, actions):
                worked = True
                yield event
            if self.outcome is not None:  # steered, or waiting for an approval
                return
            if waits is not None and waits.blocked:  # an output injected while the actions ran (a subagent's)
                self.outcome = msgspec.structs.replace(BLOCKED, usage=self.usage)
                return
            if waits is not None and waits.needed(builder):
                async for event in waits.outputs(builder, self.calls, steered):
                    yield event
                if waits.blocked:  # an injected output the safety policy blocks: as a create's input would be
                    self.outcome = msgspec.structs.replace(BLOCKED, usage=self.usage)
                    return
                if steered.is_set():  # steered while it waited: it ends here, the outputs so far kept
                    self.outcome = Outcome(status="incomplete", usage=self.usage, reason="steered")
                    return
                worked = worked or waits.took
            if not worked:
                self.outcome = msgspec.structs.replace(result, usage=self.usage)
                return
            if actions is not None:  # what reached the agent while it worked: in before its next generation
                async for event in actions.between(builder):
                    yield event
            step = await self._next(builder, generation.request, steered)
            if isinstance(step, Outcome):
                self.outcome = step
                return
            generation = drive.next_of(step)

    async def _approved(self, builder: ResponseBuilder, steered: asyncio.Event) -> AsyncGenerator[Event]:
        """The calls this create's approvals answered, run before its first generation."""
        assert self.mcp is not None
        for call in self.approved:
            for event in builder.mcp_call_added(call):
                yield event
        async for event in self.mcp.run(builder, steered):
            yield event

    async def _server_work(
        self, builder: ResponseBuilder, steered: asyncio.Event, actions: AgentExecutor | None
    ) -> AsyncGenerator[Event]:
        """What the executors answer after a generation, in order; sets `outcome` when the response ends here
        (steered: what runs stops; an approval asked for: the client answers it)."""
        for executor in (*self.executors, actions) if actions is not None else self.executors:
            if steered.is_set():
                break
            async for event in executor.run(builder, steered):
                yield event
        if steered.is_set() or self.asked(builder):
            reason = "steered" if steered.is_set() else None
            self.outcome = Outcome(status="incomplete" if reason else "completed", usage=self.usage, reason=reason)

    async def _next(
        self, builder: ResponseBuilder, template: GenerationRequest, steered: asyncio.Event
    ) -> GenerationRequest | Outcome:
        """The next generation's request (steered: none, the response ends)."""
        if steered.is_set():
            return Outcome(status="incomplete", usage=self.usage, reason="steered")
        used = self.usage.output_tokens if self.usage is not None else 0
        request = await self.next_generation(builder, template, used)
        return msgspec.structs.replace(request, usage=self.usage) if isinstance(request, Outcome) else request

    def _count_model_time(self, generation: Generation) -> None:
        """A later step's generation runs on a clock of its own: its model time joins the turn's."""
        if generation.timings is not self.timings:
            for stage in ("generate", "engine"):
                seconds = generation.timings.seconds.get(stage)
                if seconds is not None:  # an engine that reports no time of its own has no `engine` stage
                    self.timings.add(stage, seconds)

    @staticmethod
    def asked(builder: ResponseBuilder) -> bool:
        """The response holds a call waiting for approval: it ends here."""
        return any(isinstance(item, McpApprovalRequest) for item in builder.response.output)

    async def next_generation(
        self, builder: ResponseBuilder, generation: GenerationRequest, used: int
    ) -> GenerationRequest | Outcome:
        """The next generation's request: its prompt extended with the output made since the last render; past
        the window, the response fails as a too-long input does. Past the call limit, MCP tools are not offered.
        Its `calls_so_far` counts the new calls as the context does: a call an approval ran is its request's, which
        is counted already. `max_output_tokens` bounds the response: the generations so far `used` that many of
        it; none left, the response ends `incomplete` as a generation cut short does."""
        limit = self.request.max_output_tokens
        if limit is not None and used >= limit:
            return Outcome(status="incomplete", reason="max_output_tokens")
        start = time.perf_counter()
        output = builder.response.output
        # A multi-agent response's output holds its subagents' items too: its root's context does not.
        new = [item for item in output[self.rendered_output :] if not foreign(item)]
        self.context.extend(new)
        base = PromptBase(self.context, self.rendered, self.model.chat, new)
        try:
            prompt = await render_prompt(self.renderer, self.model, self.request, self.specs, base, ())
        except HotloopError as exc:
            return Outcome.failed(exc.code, exc.message)
        self.rendered, self.rendered_output = prompt.state, len(output)
        tools = [*generation.tools, *self.searches.fresh()]
        if self.calls.exhausted:  # no built-in call left: neither MCP tools nor the server's searches
            server_run = (
                "mcp",
                SERVER_KIND,
                file_search.KIND,
                code_interpreter.KIND,
                hosted_shell.KIND,
                multi_agent.KIND,
            )
            tools = [spec for spec in tools if spec.kind not in server_run]
        self.overhead_s += time.perf_counter() - start
        return msgspec.structs.replace(
            generation,
            prompt_tokens=prompt.tokens,
            items=prompt.items,
            calls_so_far=count_calls(new, generation.calls_so_far),
            max_output_tokens=None if limit is None else limit - used,
            tools=tools,
            deferred=self.searches.deferred,
            # `required` and a forced tool ask for the first step's call: then the model may answer.
            tool_choice=("auto" if generation.tool_choice == "required" else generation.tool_choice)
            if tools
            else "none",
            forced_tool=None,
        )
