"""A turn once it is prepared (pipeline/prepare.py `start_turn`): `Turn.events()` streams the response's events,
generation included, and finishes it (cache, persist, meter) before its terminal event leaves, so a stored
response is readable once a client has seen it end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any

import msgspec

from hotloop.backends.base import (
    BackendError,
    Finished,
    GenerationRequest,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from hotloop.chat.incremental import Rendered
from hotloop.metering.records import record_for
from hotloop.models import Model
from hotloop.observability.timings import StageTimings
from hotloop.pipeline.context import ChainState, Context
from hotloop.pipeline.merge import DeltaMerger
from hotloop.pipeline.resolve import CONTINUABLE, count_calls
from hotloop.pipeline.service import Service
from hotloop.pipeline.session import Lane, Session
from hotloop.pipeline.stall import BackendStalled, StallTimer
from hotloop.pipeline.tools import ToolSet
from hotloop.safety import SafetyResult
from hotloop.wire.builder import ResponseBuilder, error_body
from hotloop.wire.events import Event
from hotloop.wire.items import ContextItem
from hotloop.wire.request import CreateRequest
from hotloop.wire.response import ErrorInfo, Response, Usage

log = logging.getLogger("hotloop.turn")
finished_log = logging.getLogger("hotloop.responses")  # one line per finished response (docs/logging.md)
BLOCKED_MESSAGE = "The input was blocked by this server's safety policy."


class Turn:
    """A validated, rendered request ready to generate."""

    def __init__(
        self,
        service: Service,
        session: Session,
        request: CreateRequest,
        response: Response,
        *,
        parent: ChainState | None,
        new_items: list[ContextItem],
        call_ids: frozenset[str],
        model: Model,
        generation: GenerationRequest,
        rendered: Rendered | None,
        safety: SafetyResult,
        tools: ToolSet,
        options: TurnOptions,
        timings: StageTimings,
    ) -> None:
        self.service = service
        self.session = session
        self.request = request
        self.response = response
        self.parent = parent
        self.new_items = new_items
        self.call_ids = call_ids
        self.model = model
        self.generation = generation
        self.rendered = rendered
        self.safety = safety
        self.tools = tools
        self.options = options
        self.lane = options.lane
        self.timings = timings
        self.builder = ResponseBuilder(response, options.stream_id)
        self.generate = request.generate is not False and not _prewarm(request)
        self.cancelled_events: list[Event] = []
        # Set by a graceful shutdown that cuts this turn (pipeline/drain.py): it then ends `failed`, not `cancelled`.
        self.stop_error: ErrorInfo | None = None

    # -- the event stream ---------------------------------------------------------------------------------------

    async def events(self, congested: Callable[[], bool] | None = None) -> AsyncGenerator[Event, None]:
        """Every event of the response, terminal last; never raises for backend faults (→ `response.failed`).

        `congested` (the transport's): while it is true, consecutive deltas of an item are merged (pipeline/merge.py).
        """
        gauge = self.service.metrics.in_flight.labels(self.options.transport)
        gauge.inc()
        self.service.drain.enter(self)
        try:
            async with contextlib.aclosing(self._events(congested)) as events:
                async for event in events:
                    yield event
        except asyncio.CancelledError:
            if self.stop_error is None:
                raise
            # A shutdown cut (pipeline/drain.py), not a departed client: the consumer still gets the terminal event.
            _uncancel()
            ending, self.cancelled_events = self.cancelled_events, []  # delivered here, not by a listener too
            for event in ending:
                yield event
        finally:
            self.service.drain.leave(self)
            gauge.dec()

    async def _events(self, congested: Callable[[], bool] | None) -> AsyncGenerator[Event, None]:
        builder = self.builder
        merger = DeltaMerger() if congested is not None else None
        if self.response.background:
            self.response.status = "queued"
            yield builder.created()
            yield builder.queued()
            self.response.status = "in_progress"
        else:
            yield builder.created()
        yield builder.in_progress()
        prompt_tokens = len(self.generation.prompt_tokens)
        outcome: tuple[str, Usage | None, str | None, ErrorInfo | None] | None = None
        timings = self.timings
        timings.add("pre_inference", timings.since("start"))
        timings.mark("inference")
        generating = False
        stall = StallTimer(self.service.settings.backend_timeout_s)
        try:
            if self.safety.verdict == "block":
                outcome = ("failed", None, None, ErrorInfo(code="content_filter", message=BLOCKED_MESSAGE))
            elif not self.generate:
                cached = await stall.wait(self.model.backend.prefill(self.generation.prompt_tokens))
                outcome = ("completed", Usage.of(prompt_tokens, cached, 0), None, None)
            else:
                generating = True
                first = True
                # Closing the backend's generator (a stall, a fault, a client gone) stops its work (Backend docs).
                async with contextlib.aclosing(self.model.backend.generate(self.generation)) as deltas:
                    # Only the backend's time counts: the consumer's (sending the last event) is outside the wait.
                    while (delta := await stall.wait(anext(deltas, None))) is not None:
                        if first:
                            timings.add("ttft", timings.since("inference"))
                            first = False
                        if isinstance(delta, Finished):
                            for event in _held(builder, merger):
                                yield event
                            if delta.engine_ms is not None:  # the engine's own time, as it reported it
                                timings.add("engine", delta.engine_ms / 1000)
                            prompt = prompt_tokens if delta.prompt_tokens is None else delta.prompt_tokens
                            usage = Usage.of(prompt, delta.cached_tokens, delta.output_tokens)
                            reason = "max_output_tokens" if delta.reason == "length" else None
                            outcome = ("incomplete" if reason else "completed", usage, reason, None)
                            break
                        if merger is None or congested is None:
                            for event in feed_delta(builder, delta):
                                yield event
                            continue
                        for ready in merger.feed(delta, congested()):
                            for event in feed_delta(builder, ready):
                                yield event
                generating = False
            timings.add("generate", timings.since("inference"))
            if outcome is None:
                raise RuntimeError("backend ended without a Finished delta")
        except (asyncio.CancelledError, GeneratorExit):
            if generating:  # the `async with` above has already closed the backend's generator
                self.service.metrics.generations_cancelled.labels(self.options.transport).inc()
            await asyncio.shield(self._finish_cancelled())
            raise
        except BackendStalled as stalled:
            log.warning("backend stalled for %s: %s", self.response.id, stalled)
            self.service.metrics.backend_failures.labels("timeout").inc()
            outcome = ("failed", None, None, ErrorInfo(code="server_error", message=str(stalled)))
        except BackendError as failure:  # an upstream engine's failure, with its code (backends/openai_chat.py)
            log.warning("backend failed for %s: %s", self.response.id, failure)
            self.service.metrics.backend_failures.labels("error").inc()
            outcome = ("failed", None, None, ErrorInfo(code=failure.code, message=str(failure)))
        except Exception:
            log.exception("generation failed for %s", self.response.id)
            self.service.metrics.backend_failures.labels("error").inc()
            outcome = ("failed", None, None, ErrorInfo(code="server_error", message="The model backend failed."))
        finally:
            stall.close()
        for event in _held(builder, merger):  # a failure keeps the text generated so far, merged or not
            yield event
        for event in await self._finish(*outcome):
            yield event
        self._log_finished()  # once the terminal event has left: the log line is not on the client's clock

    async def _finish(
        self, status: str, usage: Usage | None, reason: str | None, error: ErrorInfo | None
    ) -> list[Event]:
        """Persist, then cache, then the terminal event: a client that saw it end can read it back."""
        self.timings.mark("finish")
        events = self.builder.close(status, usage, reason=reason, error=error)
        conversation = self.response.conversation
        if conversation is not None and status in ("completed", "incomplete"):
            status, error = await self._extend_conversation(conversation["id"], status, usage, error)
        # A blocked input (a secret, an injection) is never written to disk, like any rejected request.
        if self.response.store and self.safety.verdict != "block":
            try:
                await self.service.store.save(self.session.owner, self.response, self.new_items)
            except Exception:
                log.exception("could not store response %s", self.response.id)
                error = ErrorInfo(code="store_unavailable", message="The response could not be stored.")
                status = "failed"
                self.builder.set_status(status, usage, error=error)
        if status in CONTINUABLE:
            state = self._chain_state()
            self.session.remember(self.lane, state)
            self.service.chains.put(state)
        elif self.parent is not None:
            self.session.evict(self.lane, self.parent.response.id)
        self.timings.add("post_inference", self.timings.since("finish"))
        self._account()
        if self.options.include_timings:
            events.append(self.builder.timing_metrics(self.timings.milliseconds()))
        inband = error_body(error) if error is not None and self.options.inband_errors else None
        return events + self.builder.terminal(inband)

    async def _extend_conversation(
        self, conversation_id: str, status: str, usage: Usage | None, error: ErrorInfo | None
    ) -> tuple[str, ErrorInfo | None]:
        """Append the input and output to the conversation before the response is stored, so a response whose
        items could not be appended is stored (and ends) as the failure it is."""
        items = [*self.new_items, *self.response.output]
        try:
            if not await self.service.store.add_conversation_items(self.session.owner, conversation_id, items):
                log.warning("conversation %s was deleted while %s ran", conversation_id, self.response.id)
            return status, error
        except Exception:
            log.exception("could not extend conversation %s", conversation_id)
            error = ErrorInfo(code="store_unavailable", message="The conversation could not be updated.")
            self.builder.set_status("failed", usage, error=error)
            return "failed", error

    def _account(self) -> None:
        """The usage record and the metrics of a finished response (post-inference, off the event bytes)."""
        service = self.service
        service.ledger.record(
            record_for(self.response, self.session.owner, self.options.transport, self.timings.milliseconds())
        )
        if self.response.usage is not None:  # the key's tokens-per-minute window (pipeline/limits.py)
            service.rate_limiter.charge(self.session.owner, self.response.usage.total_tokens)
        service.metrics.observe(self.timings)
        service.metrics.count_response(self.model.id, self.response.status, self.options.transport)
        service.metrics.count_safety(self.safety)

    def _log_finished(self) -> None:
        if finished_log.isEnabledFor(logging.INFO):
            finished_log.info("response finished", extra={"fields": self._log_fields()})

    def _log_fields(self) -> dict[str, Any]:
        """The `response finished` line (docs/logging.md): ids, outcome and sizes, never content."""
        response = self.response
        usage = response.usage
        seconds = self.timings.seconds
        fields: dict[str, Any] = {
            "response_id": response.id,
            "model": response.model,
            "status": response.status,
            "transport": self.options.transport,
            "server_ms": round(1000 * (seconds.get("pre_inference", 0.0) + seconds.get("post_inference", 0.0)), 3),
        }
        if usage is not None:
            fields.update(
                input_tokens=usage.input_tokens,
                cached_tokens=usage.input_tokens_details.cached_tokens,
                output_tokens=usage.output_tokens,
            )
        if response.error is not None:
            fields["error_code"] = response.error.code
        return fields

    async def _finish_cancelled(self) -> None:
        """The client went away or the response was cancelled: keep what finished, never cache it (§3.11).

        The terminal event is kept in `cancelled_events` for a listener that outlives the consumer (a streamed
        background response cancelled by `POST …/cancel`).
        """
        error = self.stop_error
        if error is None:
            self.cancelled_events = self.builder.finish("cancelled", None)
        else:  # a shutdown cut: a server failure, with the in-band error on SSE
            inband = error_body(error) if self.options.inband_errors else None
            self.cancelled_events = self.builder.finish("failed", None, error=error, inband_error=inband)
        if self.response.store:
            try:
                await self.service.store.save(self.session.owner, self.response, self.new_items)
            except Exception:
                log.exception("could not store cancelled response %s", self.response.id)
        self._account()
        self._log_finished()

    def _chain_state(self) -> ChainState:
        base = self.parent.context if self.parent is not None else Context()
        output = self.response.output
        return ChainState(
            response=self.response,
            context=base.extend([*self.new_items, *output]),
            call_ids=self.call_ids | {item.call_id for item in output if hasattr(item, "call_id")},
            model=self.model,
            request=self.request,
            owner=self.session.owner,
            calls_in_context=self.generation.calls_so_far + count_calls(output),
            stored_chain=self.response.store and (self.parent is None or self.parent.stored_chain),
            # A conversation's history is in the rendered tokens but not in this chain's context: a continuation
            # by previous_response_id renders from the context, as it would after loading the chain from the store.
            rendered=self.rendered if self.response.conversation is None else None,
            safety_states=self.safety.states,
            tools=self.tools,
        )


def _held(builder: ResponseBuilder, merger: DeltaMerger | None) -> list[Event]:
    """The events of the text a merger still holds."""
    if merger is None:
        return []
    return [event for delta in merger.flush() for event in feed_delta(builder, delta)]


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


DEFAULT_OPTIONS = TurnOptions()


def feed_delta(builder: ResponseBuilder, delta: Any) -> list[Event]:
    """A backend delta's events (simengine/responses.py builds its events the same way)."""
    if isinstance(delta, TextDelta):
        return builder.text_delta(delta.text)
    if isinstance(delta, ToolCallStart):
        return builder.tool_call_start(delta.name, delta.kind, delta.namespace)
    if isinstance(delta, ToolCallDelta):
        return builder.tool_call_delta(delta.text)
    if isinstance(delta, ToolCallEnd):
        return builder.tool_call_end()
    return []
