"""One turn, the single entry point both transports call: `start_turn(...)` then `turn.events()`.

`start_turn` runs every pre-inference stage (validate → resolve previous state → normalize → render) and raises
a `HotloopError` before anything is sent; `Turn.events()` streams the response's events and finishes it (cache,
persist) before its terminal event leaves, so a stored response is readable once a client has seen it end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

import msgspec

from hotloop.backends.base import (
    Finished,
    GenerationRequest,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from hotloop.errors import HotloopError
from hotloop.ids import new_id
from hotloop.metering.records import record_for
from hotloop.models import Model
from hotloop.observability.timings import StageTimings
from hotloop.pipeline.context import ChainState, Context
from hotloop.pipeline.normalize import normalize_input
from hotloop.pipeline.prompt import render_prompt
from hotloop.pipeline.resolve import CONTINUABLE, count_calls, expand_references, resolve_parent
from hotloop.pipeline.service import Service
from hotloop.pipeline.session import Lane, Session
from hotloop.pipeline.tokens import Rendered
from hotloop.pipeline.tools import ToolChoice, ToolSet, resolve_tool_choice, resolve_tools
from hotloop.pipeline.validate import check_new_items, check_request
from hotloop.safety import SafetyResult
from hotloop.wire.builder import ResponseBuilder, error_body
from hotloop.wire.events import Event
from hotloop.wire.items import ContextItem
from hotloop.wire.request import CreateRequest
from hotloop.wire.response import ErrorInfo, Response, Usage

log = logging.getLogger("hotloop.turn")
SAFETY_METADATA_KEY = "hotloop_safety"
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

    # -- the event stream ---------------------------------------------------------------------------------------

    async def events(self) -> AsyncGenerator[Event, None]:
        """Every event of the response, terminal last; never raises for backend faults (→ `response.failed`)."""
        gauge = self.service.metrics.in_flight.labels(self.options.transport)
        gauge.inc()
        try:
            async with contextlib.aclosing(self._events()) as events:
                async for event in events:
                    yield event
        finally:
            gauge.dec()

    async def _events(self) -> AsyncGenerator[Event, None]:
        builder = self.builder
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
        try:
            if self.safety.verdict == "block":
                outcome = ("failed", None, None, ErrorInfo(code="content_filter", message=BLOCKED_MESSAGE))
            elif not self.generate:
                cached = await self.model.backend.prefill(self.generation.prompt_tokens)
                outcome = ("completed", Usage.of(prompt_tokens, cached, 0), None, None)
            else:
                first = True
                async with contextlib.aclosing(self.model.backend.generate(self.generation)) as deltas:
                    async for delta in deltas:
                        if first:
                            timings.add("ttft", timings.since("inference"))
                            first = False
                        if isinstance(delta, Finished):
                            usage = Usage.of(prompt_tokens, delta.cached_tokens, delta.output_tokens)
                            reason = "max_output_tokens" if delta.reason == "length" else None
                            outcome = ("incomplete" if reason else "completed", usage, reason, None)
                            break
                        for event in self._feed(delta):
                            yield event
            timings.add("generate", timings.since("inference"))
            if outcome is None:
                raise RuntimeError("backend ended without a Finished delta")
        except (asyncio.CancelledError, GeneratorExit):
            await asyncio.shield(self._finish_cancelled())
            raise
        except Exception:
            log.exception("generation failed for %s", self.response.id)
            outcome = (
                "failed",
                None,
                None,
                ErrorInfo(code="server_error", message="The model backend failed."),
            )
        for event in await self._finish(*outcome):
            yield event

    def _feed(self, delta: Any) -> list[Event]:
        builder = self.builder
        if isinstance(delta, TextDelta):
            return builder.text_delta(delta.text)
        if isinstance(delta, ToolCallStart):
            return builder.tool_call_start(delta.name, delta.kind, delta.namespace)
        if isinstance(delta, ToolCallDelta):
            return builder.tool_call_delta(delta.text)
        if isinstance(delta, ToolCallEnd):
            return builder.tool_call_end()
        return []

    async def _finish(
        self, status: str, usage: Usage | None, reason: str | None, error: ErrorInfo | None
    ) -> list[Event]:
        """Persist, then cache, then the terminal event: a client that saw it end can read it back."""
        self.timings.mark("finish")
        events = self.builder.close(status, usage, reason=reason, error=error)
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

    def _account(self) -> None:
        """The usage record and the metrics of a finished response (post-inference, off the event bytes)."""
        service = self.service
        service.ledger.record(
            record_for(self.response, self.session.owner, self.options.transport, self.timings.milliseconds())
        )
        service.metrics.observe(self.timings)
        service.metrics.responses.labels(self.model.id, self.response.status, self.options.transport).inc()
        service.metrics.count_safety(self.safety)

    async def _finish_cancelled(self) -> None:
        """The client went away or the response was cancelled: keep what finished, never cache it (§3.11).

        The terminal event is kept in `cancelled_events` for a listener that outlives the consumer (a streamed
        background response cancelled by `POST …/cancel`).
        """
        self.cancelled_events = self.builder.finish("cancelled", None)
        if self.response.store:
            try:
                await self.service.store.save(self.session.owner, self.response, self.new_items)
            except Exception:
                log.exception("could not store cancelled response %s", self.response.id)
        self._account()

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
            rendered=self.rendered,
            safety_states=self.safety.states,
            tools=self.tools,
        )


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


async def start_turn(
    service: Service,
    session: Session,
    request: CreateRequest,
    options: TurnOptions = DEFAULT_OPTIONS,
    received_at: float | None = None,
) -> Turn:
    """Validate, resolve, normalize and render; raises `HotloopError` (nothing stored, nothing cached).

    `received_at` (time.perf_counter()) is when the request's last byte arrived; stage timings start there.
    """
    timings = StageTimings(received_at)
    try:
        return await _prepare(service, session, request, options, timings)
    except HotloopError:
        if request.previous_response_id:
            session.evict(options.lane, request.previous_response_id)
        raise


async def _prepare(
    service: Service, session: Session, request: CreateRequest, options: TurnOptions, timings: StageTimings
) -> Turn:
    with timings.stage("validate"):
        check_request(request, websocket=options.websocket)
        model = service.models.resolve(request.model)
        raw_items = normalize_input(request.input)
    with timings.stage("resolve"):
        parent = await resolve_parent(service, session, request.previous_response_id)
        new_items = await expand_references(service, session, raw_items, parent)
    with timings.stage("validate"):
        if parent is not None and parent.tools is not None and parent.request.tools == request.tools:
            tools = parent.tools  # validated once per chain, again only when a request changes them
        else:
            tools = resolve_tools(request.tools)
        choice = resolve_tool_choice(request.tool_choice, tools)
        known = parent.call_ids if parent is not None else frozenset()
        call_ids = check_new_items(new_items, known, service.secret)
    with timings.stage("safety"):
        safety = service.safety.scan(parent.safety_states if parent else None, new_items)
    with timings.stage("render"):
        prompt, rendered = render_prompt(service.renderer, model, request, choice, parent, new_items)
    calls_so_far = (parent.calls_in_context if parent is not None else 0) + count_calls(new_items)
    response = _new_response(request, model, tools.echo, choice)
    if safety.verdict != "allow":
        response.metadata[SAFETY_METADATA_KEY] = safety.summary()
    generation = GenerationRequest(
        prompt_tokens=prompt,
        tools=list(choice.tools.specs) if choice.mode != "none" else [],
        tool_choice=choice.mode,
        forced_tool=choice.forced,
        parallel_tool_calls=response.parallel_tool_calls,
        max_output_tokens=request.max_output_tokens,
        temperature=response.temperature,
        top_p=response.top_p,
        presence_penalty=response.presence_penalty,
        frequency_penalty=response.frequency_penalty,
        text_format=response.text.get("format", {"type": "text"}),
        calls_so_far=calls_so_far,
        metadata=response.metadata,
    )
    return Turn(
        service,
        session,
        request,
        response,
        parent=parent,
        new_items=new_items,
        call_ids=call_ids,
        model=model,
        generation=generation,
        rendered=rendered,
        safety=safety,
        tools=tools,
        options=options,
        timings=timings,
    )


def _text_config(text: dict[str, Any] | None) -> dict[str, Any]:
    config = {"format": {"type": "text"}, "verbosity": "medium"}
    for key, value in (text or {}).items():
        if value is not None:
            config[key] = value
    fmt = config["format"]
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        # The echoed format always has `description` and `strict` (OR `JsonSchemaResponseFormat` requires them).
        config["format"] = {**fmt, "description": fmt.get("description"), "strict": fmt.get("strict") is True}
    return config


def _new_response(request: CreateRequest, model: Model, tools: list[Any], choice: ToolChoice) -> Response:
    reasoning = request.reasoning or {}
    tier = request.service_tier
    return Response(
        id=new_id("resp"),
        created_at=int(time.time()),
        model=model.id,
        previous_response_id=request.previous_response_id,
        instructions=request.instructions,
        tools=tools,
        tool_choice=choice.echo,
        parallel_tool_calls=request.parallel_tool_calls is not False,
        truncation=request.truncation or "disabled",
        text=_text_config(request.text),
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        top_logprobs=request.top_logprobs or 0,
        reasoning={"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        max_output_tokens=request.max_output_tokens,
        max_tool_calls=request.max_tool_calls,
        store=request.store is not False,
        background=request.background is True,
        service_tier="default" if tier in (None, "auto") else tier,
        metadata=dict(request.metadata or {}),
        safety_identifier=request.safety_identifier,
        prompt_cache_key=request.prompt_cache_key,
        user=request.user,
    )
