"""A turn once it is prepared (pipeline/prepare.py `start_turn`): `Turn.events()` streams the response's events:
the opening ones, the generation's (pipeline/generate.py), then finishing (pipeline/finish.py: conversation,
persist, cache, meter) before the terminal event leaves, so a stored response is readable once a client has seen
it end.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

import msgspec

from hotloop import sealing
from hotloop.backends.base import GenerationRequest
from hotloop.chat.incremental import Rendered
from hotloop.models import Model
from hotloop.observability.timings import StageTimings
from hotloop.pipeline import compaction
from hotloop.pipeline.finish import finish, finish_cancelled, log_finished
from hotloop.pipeline.generate import BLOCKED, Generation, Outcome
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.context import ChainState
from hotloop.pipeline.state.session import Lane, Session
from hotloop.pipeline.steering import Steer
from hotloop.pipeline.tools import ToolSet
from hotloop.safety import SafetyResult
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import Event
from hotloop.wire.items import Compaction, ContextItem
from hotloop.wire.request import CreateRequest
from hotloop.wire.response import ErrorInfo, Response, Usage


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepared:
    """What the pre-inference stages made of a request (pipeline/prepare.py): all a turn generates and finishes
    from."""

    request: CreateRequest
    response: Response
    parent: ChainState | None
    new_items: list[ContextItem]
    call_ids: frozenset[str]
    model: Model
    generation: GenerationRequest
    rendered: Rendered | None
    safety: SafetyResult
    tools: ToolSet
    timings: StageTimings
    compaction: compaction.Plan | None = None  # the context is compacted first (`context_management`)


class Turn:
    """A validated, rendered request ready to generate."""

    def __init__(self, service: Service, session: Session, prepared: Prepared, options: TurnOptions) -> None:
        self.service = service
        self.session = session
        self.options = options
        self.lane = options.lane
        self.request = prepared.request
        self.response = prepared.response
        self.parent = prepared.parent
        self.new_items = prepared.new_items
        self.call_ids = prepared.call_ids
        self.model = prepared.model
        self.generation = prepared.generation
        self.rendered = prepared.rendered
        self.safety = prepared.safety
        self.tools = prepared.tools
        self.timings = prepared.timings
        self.compaction = prepared.compaction
        # Steers accepted for this response (pipeline/steering.py); the first `steers_acked` were acknowledged in
        # its own event sequence, any later one by the transport once the response has ended.
        self.steers: list[Steer] = []
        self.steers_acked = 0
        self.builder = ResponseBuilder(
            self.response, options.stream_id, service.settings.reasoning_events, _sealer(service, self.request)
        )
        self.generate = self.request.generate is not False and not _prewarm(self.request)
        self.cancelled_events: list[Event] = []
        # Set by a graceful shutdown that cuts this turn (admission/drain.py): it then ends `failed`, not `cancelled`.
        self.stop_error: ErrorInfo | None = None

    # -- the event stream ---------------------------------------------------------------------------------------

    async def events(self, congested: Callable[[], bool] | None = None) -> AsyncGenerator[Event, None]:
        """Every event of the response, terminal last; never raises for backend faults (→ `response.failed`).

        The opening events, the generation's (pipeline/generate.py), then finishing (pipeline/finish.py). One
        generator around the generation's: each layer costs every event about half a microsecond.
        `congested` (the transport's): while it is true, consecutive deltas of an item are merged (pipeline/merge.py).
        """
        gauge = self.service.metrics.in_flight.labels(self.options.transport)
        gauge.inc()
        self.service.drain.enter(self)
        try:
            for event in self._opening():
                yield event
            summary: Usage | None = None
            failure: Outcome | None = None
            try:
                if self.compaction is not None and self.safety.verdict != "block" and self.generate:
                    try:
                        item, summary = await self._compact()
                    except compaction.CompactionFailed as exc:
                        failure = Outcome(status="failed", error=exc.error)
                    else:
                        for event in self.builder.add_item(item):
                            yield event
                generation = self._generation()
                if failure is not None:
                    outcome = failure
                elif self.safety.verdict == "block":
                    outcome = BLOCKED
                    self.timings.add("generate", self.timings.since("inference"))  # every normal end has the stage
                elif not self.generate:
                    outcome = await generation.prefill()
                else:
                    async for event in generation.events(congested):
                        yield event
                    outcome = generation.outcome or Outcome.failed("server_error", "The model backend failed.")
                if summary is not None:  # the summary's generation is this response's work too
                    outcome = msgspec.structs.replace(outcome, usage=summary.plus(outcome.usage))
            except (asyncio.CancelledError, GeneratorExit):
                await asyncio.shield(finish_cancelled(self))
                raise
            for steer in self.steers[self.steers_acked :]:  # acknowledged in order, before the terminal event
                yield self.builder.steer_accepted(steer.id)
                self.steers_acked += 1
            for event in await finish(self, outcome):
                yield event
            log_finished(self)  # once the terminal event has left: the log line is not on the client's clock
        except asyncio.CancelledError:
            if self.stop_error is None:
                raise
            # A shutdown cut (admission/drain.py), not a departed client: the consumer still gets the terminal event.
            _uncancel()
            ending, self.cancelled_events = self.cancelled_events, []  # delivered here, not by a listener too
            for event in ending:
                yield event
        finally:
            self.service.drain.leave(self)
            gauge.dec()

    async def _compact(self) -> tuple[Compaction, Usage]:
        """Compact the context (pipeline/compaction.py): the turn then generates on the compacted context, whose
        prompt is the chain's rendered state; the item is the output's first."""
        assert self.compaction is not None
        with self.timings.stage("compact"):
            done = await compaction.run(
                self.service, self.model, self.request, self.tools.specs, self.compaction, self.response.id
            )
        self.generation.prompt_tokens = done.prompt
        if self.model.takes_messages:
            self.generation.items = done.items
        self.rendered = done.rendered
        return done.item, done.usage

    def _generation(self) -> Generation:
        timings = self.timings
        # A compaction's summary is model time, not the API's own: it has its stage and is left out of this one.
        timings.add("pre_inference", timings.since("start") - timings.seconds.get("compact", 0.0))
        timings.mark("inference")
        settings = self.service.settings
        return Generation(
            self.model,
            self.generation,
            self.builder,
            timings,
            self.service.metrics,
            settings.backend_timeout_s,
            self.options.transport,
            self.steers,
        )

    def _opening(self) -> list[Event]:
        builder = self.builder
        if not self.response.background:
            return [builder.created(), builder.in_progress()]
        self.response.status = "queued"
        opening = [builder.created(), builder.queued()]
        self.response.status = "in_progress"
        return [*opening, builder.in_progress()]


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


def _prewarm(request: CreateRequest) -> bool:
    options = request.prompt_cache_options
    return bool(options and options.get("prewarm") is True)


# -- pre-inference stages -----------------------------------------------------------------------------------------


class TurnOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How a transport runs a turn."""

    websocket: bool = False
    lane: Lane = None
    stream_id: str | None = None
    inband_errors: bool = False  # SSE: an `error` event precedes `response.failed` (protocol.md §2.9)
    transport: str = "http"  # "http" | "sse" | "websocket": kept in the usage record and metrics
    include_timings: bool = False  # header `x-responsesapi-include-timing-metrics: true`
    # Only measured (POST /v1/responses/input_tokens): never run, so nothing is stored and the store is not probed,
    # and its input is not kept for a later resend (pipeline/inputs.py `remember`).
    measure_only: bool = False


DEFAULT_OPTIONS = TurnOptions()
MEASURE_OPTIONS = TurnOptions(measure_only=True)
