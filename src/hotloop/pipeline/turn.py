"""A turn once it is prepared (pipeline/prepare.py `start_turn`): `Turn.events()` streams the response's events
as a sequence of steps: the opening events, compaction when the turn compacts (compaction.py), the generation
(generate.py) — when the server runs steps, the generations and what it runs between them (`_tool_loop`,
steps/loop.py)
— then finishing (finish.py: conversation, persist, cache, meter) before the terminal event leaves, so a stored
response is readable once a client has seen it end.

From outside, a turn is steered (`steer`, pipeline/steering.py) and cut by a shutdown (`cut`, state/drain.py);
nothing else writes into it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, Callable

import msgspec

from hotloop import sealing
from hotloop.backends.base import GenerationRequest
from hotloop.errors import InvalidParam
from hotloop.observability.timings import StageTimings
from hotloop.pipeline import compaction
from hotloop.pipeline.agents.actions import AgentActions
from hotloop.pipeline.agents.branch import Subagents
from hotloop.pipeline.agents.hub import Hub, Waits
from hotloop.pipeline.agents.roster import Limits, Roster
from hotloop.pipeline.finish import finish, finish_cancelled, log_finished
from hotloop.pipeline.generate import BLOCKED, Generation, Outcome
from hotloop.pipeline.grammars import input_checks
from hotloop.pipeline.inject import Inbox, multi_agent
from hotloop.pipeline.mcp.calls import OUTPUT_SAFETY_KEY, Calls
from hotloop.pipeline.prepared import Prepared, TurnOptions
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.session import Lane, Session
from hotloop.pipeline.steering import Steer
from hotloop.pipeline.steps.loop import Drive, Steps
from hotloop.tools import file_search
from hotloop.tools.multi_agent import ROOT
from hotloop.tools.registry import build_call
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import Event
from hotloop.wire.included import shown
from hotloop.wire.items import Compaction
from hotloop.wire.request import CreateRequest
from hotloop.wire.response import ErrorInfo, Response


class Turn:
    """A validated, rendered request ready to generate."""

    def __init__(self, service: Service, session: Session, prepared: Prepared, options: TurnOptions) -> None:
        self.service = service
        self.session = session
        self.prepared = prepared
        self.options = options
        self.multi_agent = multi_agent(prepared.request)
        self.builder = ResponseBuilder(
            prepared.response,
            options.stream_id,
            service.settings.reasoning_events,
            _sealer(service, prepared.request),
            typed=build_call,
            checks=input_checks([*prepared.tools.specs, *prepared.tools.deferred]),
            agent=ROOT if self.multi_agent else None,
            # A search's results and a code run's outputs go out only when included (stored whole either way:
            # wire/included.py); a message after a search cites its results (tools/file_search.py).
            shown=shown(prepared.request.include),
            cite=file_search.citations if prepared.tools.file_search is not None else None,
        )
        # A multi-agent response runs subagents (pipeline/agents/) and waits for its client's tool outputs on
        # WebSocket (pipeline/inject.py); over HTTP it ends at the client's call, as any response does. One bell
        # wakes its root for either.
        bell = asyncio.Event()
        self.roster = Roster(_limits(service, prepared.request), bell) if self.multi_agent else None
        # What reaches the response from outside while it runs: its steers, and (a multi-agent response on
        # WebSocket) injected tool outputs (pipeline/inject.py).
        self.inbox = Inbox(bell, injects=self.roster is not None and options.websocket)
        self.hub = Hub(self.inbox if self.inbox.injects else None, self.roster) if self.roster is not None else None
        self.generate = prepared.request.generate is not False and not _prewarm(prepared.request)
        self._stop: ErrorInfo | None = None  # a shutdown's cut: the turn ends `failed`, not `cancelled`
        if prepared.tools.approvals:
            self.builder.needs_approval = prepared.tools.approvals
        self._ending: list[Event] = []  # the events that ended a cancelled turn, until someone takes them
        self._looped: Outcome | None = None  # how a turn with MCP tools ended (`_tool_loop`)
        self._calls: Calls | None = None  # the server-run calls of its steps, once they run (`_tool_loop`)

    @property
    def response(self) -> Response:
        return self.prepared.response

    @property
    def lane(self) -> Lane:
        return self.options.lane

    # -- from outside ---------------------------------------------------------------------------------------------

    def steer(self, steer: Steer) -> None:
        """Steer the generating response: it stops at the next token boundary, and the steer is acknowledged in
        its stream (or by `late_steers` once it has ended). Raises `SteerRefused` past `MAX_PENDING`."""
        self.inbox.steer(steer)  # a response waiting for tool outputs or its subagents ends, steered

    @property
    def steers(self) -> tuple[Steer, ...]:
        return tuple(self.inbox.steers)

    def late_steers(self) -> list[Steer]:
        """The steers that came too late for the response's own stream; the transport acknowledges them."""
        return self.inbox.late_steers()

    def inject(self, raw: list[msgspec.Raw]) -> bool:
        """Tool outputs for the calls this response waits for (`response.inject`): committed now, and acknowledged
        in its stream (True), or kept for a failure once it has ended (False, `late_injects`). Raises
        `InvalidParam` for a response that takes none or a batch that answers no waiting call: nothing is kept."""
        if not self.inbox.injects:
            raise InvalidParam(
                f"Response '{self.response.id}' takes no injected input: it is not a multi-agent response.",
                param="response_id",
            )
        return self.inbox.offer(raw, self.builder.response.output, self.service.secret)

    def late_injects(self) -> list[list[msgspec.Raw]]:
        """The injects that came once the response was ending, taken once: the transport fails them."""
        late, self.inbox.late = self.inbox.late, []
        return late

    def cut(self, error: ErrorInfo) -> None:
        """A graceful shutdown cuts this turn (state/drain.py, which then cancels its task): it ends `failed`
        with `error`, is stored and recorded, and its consumer still gets the terminal event."""
        self._stop = error

    def ending(self) -> list[Event]:
        """The events that ended a cancelled turn, taken once (a background response's listener)."""
        ending, self._ending = self._ending, []
        return ending

    # -- the event stream -----------------------------------------------------------------------------------------

    async def events(self, congested: Callable[[], bool] | None = None) -> AsyncGenerator[Event, None]:
        """Every event of the response, terminal last; never raises for backend faults (→ `response.failed`).

        One generator around the generation's: each layer costs every event about half a microsecond.
        `congested` (the transport's): while it is true, consecutive deltas of an item are merged (pipeline/merge.py).
        """
        gauge = self.service.metrics.in_flight.labels(self.options.transport)
        gauge.inc()
        self.service.drain.enter(self)
        try:
            try:
                for event in self._opening():
                    yield event
                for event in self._compacting():
                    yield event
                step = await self._compact()
                for event in step.events:
                    yield event
                for listed in self.prepared.steps.listed if self.prepared.steps is not None else ():
                    for event in self.builder.mcp_list_tools(listed):
                        yield event
                generation = self._generation()
                if step.failure is not None:
                    outcome = step.failure
                elif self.prepared.safety.verdict == "block":
                    outcome = self._blocked()
                elif not self.generate:
                    outcome = await generation.prefill()
                elif self.prepared.steps is not None:  # the server runs steps between generations
                    async for event in self._tool_loop(generation, congested):
                        yield event
                    outcome = self._looped or Outcome.failed("server_error", "The tool loop ended without an outcome.")
                else:
                    async for event in generation.events(congested):
                        yield event
                    outcome = generation.result()
                outcome = step.counted(outcome)
            except (asyncio.CancelledError, GeneratorExit):
                if self.roster is not None:
                    self.roster.cancel()  # its subagents end with it
                self._ending = await asyncio.shield(self._finish_cancelled())
                raise
            async for event in self._rest_injected(outcome):
                yield event
            self._output_findings()
            if self.hub is not None and self.hub.blocked:  # as an inject the steps took would end it
                outcome = msgspec.structs.replace(BLOCKED, usage=outcome.usage)
            for steer in self.late_steers():  # acknowledged in order, before the terminal event
                yield self.builder.steer_accepted(steer.id)
            for event in await self._finish(outcome):
                yield event
            log_finished(self.prepared, self.options)  # the terminal event has left: not on the client's clock
        except asyncio.CancelledError:
            if self._stop is None:
                raise
            # A shutdown cut (state/drain.py), not a departed client: the consumer still gets the terminal event.
            _uncancel()
            for event in self.ending():  # delivered here, not by a listener too
                yield event
        finally:
            self.service.drain.leave(self)
            gauge.dec()

    # -- the steps ------------------------------------------------------------------------------------------------

    def _opening(self) -> list[Event]:
        builder, response = self.builder, self.prepared.response
        if not response.background:
            return [builder.created(), builder.in_progress()]
        response.status = "queued"
        opening = [builder.created(), builder.queued()]
        response.status = "in_progress"
        return [*opening, builder.in_progress()]

    def _compacting(self) -> list[Event]:
        """A `compaction_trigger`'s compaction item opens (no content yet) and says it is being made while its
        summary is sampled; `_compact` ends it (protocol.md §1.12)."""
        plan = self.prepared.compaction
        if plan is None or not plan.triggered or self.prepared.safety.verdict == "block" or not self.generate:
            return []
        opened = self.builder.open_item(Compaction(encrypted_content="", id=plan.item_id))
        return [*opened, self.builder.compacting(plan.item_id)]

    async def _compact(self) -> compaction.Step:
        """When the turn compacts (compaction.py), the summary first: the turn then generates on the compacted
        context, whose prompt is the chain's rendered state; the compaction item is the output's first."""
        prepared = self.prepared
        plan = prepared.compaction
        if plan is None or prepared.safety.verdict == "block" or not self.generate:
            return compaction.NO_STEP
        request, model = prepared.request, prepared.model
        try:
            with prepared.timings.stage("compact"):
                done = await compaction.run(
                    self.service,
                    model,
                    request,
                    prepared.tools.specs,
                    plan,
                    prepared.response.id,
                    self.options.transport,
                )
        except compaction.CompactionFailed as exc:
            return compaction.Step(failure=Outcome(status="failed", error=exc.error))
        prepared.generation.prompt_tokens, prepared.generation.items = done.prompt, done.items
        # The compacted state holds the compaction item, the output's first.
        self.prepared = dataclasses.replace(prepared, rendered=done.rendered, rendered_output=1)
        ended = [self.builder.emit_done(done.item)] if plan.triggered else self.builder.add_item(done.item)
        return compaction.Step(events=ended, usage=done.usage)

    def _generation(self) -> Generation:
        prepared = self.prepared
        timings = prepared.timings
        # A compaction's summary is model time and an MCP server's listing its time, not the API's own: each has its
        # stage and is left out of this one.
        seconds = timings.seconds
        timings.add(
            "pre_inference", timings.since("start") - seconds.get("compact", 0.0) - seconds.get("mcp_list", 0.0)
        )
        timings.mark("inference")
        return self._generation_of(prepared.generation, timings)

    def _generation_of(self, request: GenerationRequest, timings: StageTimings) -> Generation:
        service = self.service
        return Generation(
            self.prepared.model,
            request,
            self.builder,
            timings,
            service.metrics,
            service.settings.backend_timeout_s,
            self.options.transport,
            self.inbox.steers,
        )

    async def _tool_loop(
        self, generation: Generation, congested: Callable[[], bool] | None
    ) -> AsyncGenerator[Event, None]:
        """The generations and what the server runs between them (steps/loop.py); `_looped` is how they ended."""
        prepared, hub = self.prepared, self.hub
        steps = Steps.of(self.service, prepared, self.session.owner)
        waits = actions = None
        if hub is not None:
            if hub.inbox is not None:
                waits = Waits(hub, self.service.settings.ws_inject_wait_s)
            subagents = Subagents(self.service, prepared, hub.roster, steps.calls, self.options.websocket)
            actions = AgentActions(hub.roster, hub.roster.root, steps.calls, subagents.start, hub)
        self._calls = steps.calls
        drive = Drive(self._step_generation, self.inbox.steered, congested, waits, actions)
        async for event in steps.run(self.builder, generation, drive):
            yield event
        self._looped = steps.outcome
        if hub is not None:
            async for event in self._end_subagents(hub, steps):
                yield event
        self.prepared = dataclasses.replace(prepared, rendered=steps.rendered, rendered_output=steps.rendered_output)

    async def _end_subagents(self, hub: Hub, steps: Steps) -> AsyncGenerator[Event, None]:
        """The root has ended: its subagents still running are interrupted, and what they finished goes out after
        the root's last item; their generations' usage is the response's too."""
        roster, outcome = hub.roster, self._looped
        await roster.stop()
        if not roster.spawned:
            return
        status = outcome.status if outcome is not None else "failed"
        for event in self.builder.close_open("incomplete" if status == "incomplete" else "completed", last=True):
            yield event
        async for event in hub.pump(self.builder, steps.calls):
            yield event
        if outcome is not None and roster.usage is not None:
            self._looped = msgspec.structs.replace(outcome, usage=roster.usage.plus(outcome.usage))

    async def _rest_injected(self, outcome: Outcome) -> AsyncGenerator[Event]:
        """The response is ending: the injects committed but not yet taken go through its hub (agents/hub.py), as
        the steps' own do. Only a response that generated has a call an inject could answer (`_calls`)."""
        hub, calls = self.hub, self._calls
        if hub is None:
            return
        if calls is None:
            if hub.inbox is not None:
                hub.inbox.close()
            return
        async for event in hub.rest(self.builder, calls, outcome.status):
            yield event

    def _output_findings(self) -> None:
        """What the safety stage found in the outputs the steps took in (MCP calls', injected, subagents'), said
        once all are in: `hotloop_safety_output` in the metadata (docs/safety.md)."""
        if self._calls is not None and self._calls.findings:
            self.builder.response.metadata[OUTPUT_SAFETY_KEY] = self._calls.summary()

    def _step_generation(self, request: GenerationRequest) -> Generation:
        """A later step's generation, on its own clock: the turn's `ttft` is its first generation's."""
        timings = StageTimings(trace=self.prepared.timings.trace)
        timings.mark("inference")
        return self._generation_of(request, timings)

    def _blocked(self) -> Outcome:
        timings = self.prepared.timings
        timings.add("generate", timings.since("inference"))  # every normal end has the stage
        return BLOCKED

    async def _finish(self, outcome: Outcome) -> list[Event]:
        return await finish(self.service, self.session, self.prepared, self.options, self.builder, outcome)

    async def _finish_cancelled(self) -> list[Event]:
        return await finish_cancelled(self.service, self.session, self.prepared, self.options, self.builder, self._stop)


def _sealer(service: Service, request: CreateRequest) -> Callable[[str], str] | None:
    """With `include: ["reasoning.encrypted_content"]`, reasoning items come back sealed: a stateless client hands
    them back in its input, and this server (or a replica with the same secret) reads them again."""
    if "reasoning.encrypted_content" not in (request.include or ()):
        return None
    secret = service.secret
    return lambda text: sealing.seal(text, secret)


def _uncancel() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


def _limits(service: Service, request: CreateRequest) -> Limits:
    settings, config = service.settings, request.multi_agent or {}
    total = settings.multi_agent_max_subagents
    return Limits(min(config.get("max_concurrent_subagents") or 6, total), total, settings.multi_agent_max_depth)


def _prewarm(request: CreateRequest) -> bool:
    options = request.prompt_cache_options
    return bool(options and options.get("prewarm") is True)
