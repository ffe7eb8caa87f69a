"""The generate stage of a turn: the backend's deltas become events, each wait on the backend bounded by the stall
timer (hotloop/stall.py), and the stage ends with an `Outcome` that finishing (finish.py) records. A backend's
fault never escapes as an exception: it is an outcome (`failed`, with the error a client sees).
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
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from hotloop.models import Model
from hotloop.observability.metrics import Metrics
from hotloop.observability.timings import StageTimings
from hotloop.observability.tracing import GenerationSpan
from hotloop.pipeline.merge import DeltaMerger
from hotloop.stall import BackendStalled, StallTimer
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import Event
from hotloop.wire.response import ErrorInfo, Usage

log = logging.getLogger("hotloop.turn")
BLOCKED_MESSAGE = "The input was blocked by this server's safety policy."


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """How a response's generation ended."""

    status: str  # completed | incomplete | failed
    usage: Usage | None = None
    reason: str | None = None  # incomplete_details.reason
    error: ErrorInfo | None = None

    @classmethod
    def failed(cls, code: str, message: str) -> Outcome:
        return cls(status="failed", error=ErrorInfo(code=code, message=message))


BLOCKED = Outcome.failed("content_filter", BLOCKED_MESSAGE)


class Generation:
    """One response's generation: `events()` yields its events; `outcome` is set once they are all out."""

    def __init__(
        self,
        model: Model,
        request: GenerationRequest,
        builder: ResponseBuilder,
        timings: StageTimings,
        metrics: Metrics,
        timeout_s: float,
        transport: str,
        steers: list[Any] | None = None,
    ) -> None:
        self.model = model
        self.request = request
        self.builder = builder
        self.timings = timings
        self.metrics = metrics
        self.timeout_s = timeout_s
        self.transport = transport
        # The turn's steers (pipeline/steering.py): once one is there, the generation stops at the next delta.
        self.steers = steers if steers is not None else []
        self.outcome: Outcome | None = None

    def result(self) -> Outcome:
        """How the generation ended, once `events()` is done."""
        return self.outcome or Outcome.failed("server_error", "The model backend failed.")

    async def prefill(self) -> Outcome:
        """A `generate: false` warmup: the prompt evaluated into the engine's cache, no output (§3.4)."""
        stall = StallTimer(self.timeout_s)
        try:
            cached = await stall.wait(self.model.backend.prefill(self.request.prompt_tokens))
        except Exception as exc:
            return self._failure(exc)
        finally:
            stall.close()
        self.timings.add("generate", self.timings.since("inference"))
        return Outcome(status="completed", usage=Usage.of(len(self.request.prompt_tokens), cached, 0))

    async def events(self, congested: Callable[[], bool] | None) -> AsyncGenerator[Event, None]:
        """The backend's deltas as events; `congested` (the transport's): merge deltas while it is true.

        One generator, no helper generator inside it: every event passes through each layer of async generators
        on its way to the socket, and a layer costs about half a microsecond per event."""
        timings, builder = self.timings, self.builder
        merger = DeltaMerger() if congested is not None else None
        stall = StallTimer(self.timeout_s)
        first = True
        steers = self.steers
        emitted = 0
        span = None
        if timings.trace is not None:  # this generation's span; the engine request carries its traceparent
            span = timings.trace.generation()
            self.request.traceparent = span.traceparent
        try:
            # Closing the backend's generator (a stall, a fault, a client gone) stops its work (Backend docs).
            async with contextlib.aclosing(self.model.backend.generate(self.request)) as deltas:
                # Only the backend's time counts: the consumer's (sending the last event) is outside the wait.
                while (delta := await stall.wait(anext(deltas, None))) is not None:
                    if first:
                        timings.add("ttft", timings.since("inference"))
                        first = False
                    if isinstance(delta, Finished):
                        self.outcome = self._finished(delta)
                        break
                    if steers:  # steered: stop at this token boundary, keeping the output so far
                        self.outcome = self._steered(emitted)
                        break
                    emitted += 1
                    ready = [delta] if merger is None or congested is None else merger.feed(delta, congested())
                    for item in ready:
                        for event in feed_delta(builder, item):
                            yield event
            timings.add("generate", timings.since("inference"))
            if self.outcome is None:
                raise RuntimeError("backend ended without a Finished delta")
        except (asyncio.CancelledError, GeneratorExit):
            self.metrics.generations_cancelled.labels(self.transport).inc()
            raise
        except Exception as exc:
            self.outcome = self._failure(exc)
        finally:
            stall.close()
            if span is not None:
                self._end_span(span)
        for event in _held(builder, merger):  # a failure keeps the text generated so far, merged or not
            yield event

    def _end_span(self, span: GenerationSpan) -> None:
        trace, outcome = self.timings.trace, self.outcome
        assert trace is not None
        error = "cancelled" if outcome is None else (outcome.error.code if outcome.error is not None else None)
        found: dict[str, Any] = {"gen_ai.response.time_to_first_chunk": self.timings.seconds.get("ttft")}
        if outcome is not None:
            found["gen_ai.response.finish_reasons"] = [outcome.reason or outcome.status]
        trace.end_generation(span, self.model.id, found, error)

    def _finished(self, delta: Finished) -> Outcome:
        if delta.engine_ms is not None:  # the engine's own time, as it reported it
            self.timings.add("engine", delta.engine_ms / 1000)
        prompt = len(self.request.prompt_tokens) if delta.prompt_tokens is None else delta.prompt_tokens
        usage = Usage.of(prompt, delta.cached_tokens, delta.output_tokens, delta.reasoning_tokens)
        reason = "max_output_tokens" if delta.reason == "length" else None
        return Outcome(status="incomplete" if reason else "completed", usage=usage, reason=reason)

    def _steered(self, emitted: int) -> Outcome:
        # The engine reports no counts for a stream cut short: each delta is about one token.
        usage = Usage.of(len(self.request.prompt_tokens), 0, emitted)
        return Outcome(status="incomplete", usage=usage, reason="steered")

    def _failure(self, exc: Exception) -> Outcome:
        response_id = self.request.response_id
        if isinstance(exc, BackendStalled):
            log.warning("backend stalled for %s: %s", response_id, exc)
            self.metrics.backend_failures.labels("timeout").inc()
            return Outcome.failed("server_error", str(exc))
        self.metrics.backend_failures.labels("error").inc()
        if isinstance(exc, BackendError):  # an upstream engine's failure, with its code (backends/upstream/chat.py)
            log.warning("backend failed for %s: %s", response_id, exc)
            return Outcome.failed(exc.code, str(exc))
        log.error("generation failed for %s", response_id, exc_info=exc)
        return Outcome.failed("server_error", "The model backend failed.")


def _held(builder: ResponseBuilder, merger: DeltaMerger | None) -> list[Event]:
    """The events of the text a merger still holds."""
    if merger is None:
        return []
    return [event for delta in merger.flush() for event in feed_delta(builder, delta)]


def feed_delta(builder: ResponseBuilder, delta: Any) -> list[Event]:
    """A backend delta's events (simengine/responses.py builds its events the same way)."""
    if isinstance(delta, TextDelta):
        return builder.text_delta(delta.text)
    if isinstance(delta, ReasoningDelta):
        return builder.reasoning_delta(delta.text)
    if isinstance(delta, ToolCallStart):
        return builder.tool_call_start(delta.name, delta.kind, delta.namespace)
    if isinstance(delta, ToolCallDelta):
        return builder.tool_call_delta(delta.text)
    if isinstance(delta, ToolCallEnd):
        return builder.tool_call_end(delta.incomplete)
    return []
