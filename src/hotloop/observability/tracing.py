"""OpenTelemetry traces of responses (docs/tracing.md): one span per response with the GenAI semantic conventions'
attributes, child spans for its stages, a span for each generation whose `traceparent` the engine request
carries, and a span per WebSocket connection that its responses link to. Off unless configured; exported over
OTLP (HTTP or gRPC) by the SDK's batch processor, on its own thread, never on the event loop.

A response's spans are made when each ends, as finished spans handed straight to the batch processor: the SDK's
live spans cost ~20 µs each to start and end, these ~3 µs. So a turn pays an append per stage while it runs and a
few microseconds per span at its end, and nothing at all with tracing off. Their ids come from the provider's id
generator, the response's sampling decision from its sampler (OTEL_TRACES_SAMPLER: by default, the parent's
decision, else sampled); a response not sampled makes no spans, and its engine requests carry no traceparent.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

PROTOCOLS = ("http/protobuf", "grpc")
_PROPAGATOR = TraceContextTextMapPropagator()
# perf_counter seconds (the timings' clock) → epoch nanoseconds (the spans'), fixed once: the two clocks do not
# drift apart noticeably within a response.
_EPOCH_OFFSET_NS = time.time_ns() - time.perf_counter_ns()
Attributes = dict[str, Any]


def epoch_ns(perf_seconds: float) -> int:
    return _EPOCH_OFFSET_NS + int(perf_seconds * 1e9)


def wanted(endpoint: str, enabled: bool, env: Mapping[str, str] = os.environ) -> bool:
    """Tracing is on with an endpoint in the config or the standard variables, or `otel_traces`; the standard
    switches (`OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none`) turn it off."""
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true" or env.get("OTEL_TRACES_EXPORTER", "") == "none":
        return False
    standard = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return bool(endpoint or standard or enabled)


def exporter(endpoint: str, protocol: str, env: Mapping[str, str] = os.environ) -> SpanExporter:
    """The OTLP exporter: `protocol` (else OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL, else http/protobuf) to `endpoint`
    (else the exporter reads the standard variables itself, headers and timeouts included)."""
    chosen = protocol or env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    chosen = chosen or "http/protobuf"
    if chosen not in PROTOCOLS:
        raise ValueError(f"otel_protocol must be one of {', '.join(PROTOCOLS)}, not {chosen!r}")
    if chosen == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
        except ImportError:
            raise ValueError("otel_protocol grpc needs the gRPC exporter: pip install 'hotloop[grpc]'") from None

        return GrpcExporter(endpoint=endpoint or None, insecure=endpoint.startswith("http://") or None)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    if endpoint and not endpoint.rstrip("/").endswith("/v1/traces"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"  # a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is
    return HttpExporter(endpoint=endpoint or None)


class Tracing:
    """The server's tracer; `content`: prompts and outputs go on the response spans (off by default)."""

    def __init__(self, span_exporter: SpanExporter, *, content: bool = False) -> None:
        attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "hotloop"}
        self.provider = TracerProvider(resource=Resource.create(attributes))
        # A busy server ends many spans between two exports: room for a few seconds of them (the SDK's 2,048
        # drops spans at a few hundred turns a second), unless OTEL_BSP_MAX_QUEUE_SIZE says otherwise.
        queue = None if os.environ.get("OTEL_BSP_MAX_QUEUE_SIZE") else 65536
        self.processor = BatchSpanProcessor(span_exporter, max_queue_size=queue)
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("hotloop")
        self.scope = InstrumentationScope("hotloop")
        self.content = content

    @classmethod
    def configured(cls, endpoint: str, protocol: str, enabled: bool, content: bool) -> Tracing | None:
        if not wanted(endpoint, enabled):
            return None
        return cls(exporter(endpoint, protocol), content=content)

    @staticmethod
    def parent(headers: Mapping[str, str]) -> Context | None:
        """The context of an incoming `traceparent` (and `tracestate`), or None without a valid one."""
        context = _PROPAGATOR.extract(headers)
        return context if trace.get_current_span(context).get_span_context().is_valid else None

    def connection(self, parent: Context | None, started: float) -> Span:
        """A WebSocket connection's span, from its upgrade to its close (an SDK span: one per connection)."""
        return self.tracer.start_span(
            "websocket /v1/responses", context=parent, kind=SpanKind.SERVER, start_time=epoch_ns(started)
        )

    def response(self, parent: Context | None, connection: SpanContext | None, started: float) -> ResponseTrace | None:
        """A response's trace from `started` (perf_counter), or None when the sampler drops it."""
        found = trace.get_current_span(parent).get_span_context() if parent is not None else None
        remote = found if found is not None and found.is_valid else None  # the caller's span, if any
        ids = self.provider.id_generator
        trace_id = remote.trace_id if remote is not None else ids.generate_trace_id()
        links = [Link(connection)] if connection is not None else []
        decision = self.provider.sampler.should_sample(parent, trace_id, "chat", SpanKind.SERVER, None, links)
        if not decision.decision.is_sampled():
            return None
        state = decision.trace_state or (remote.trace_state if remote is not None else None)
        context = SpanContext(trace_id, ids.generate_span_id(), False, TraceFlags(TraceFlags.SAMPLED), state)
        return ResponseTrace(self, context, remote, links, started)

    def emit(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        times: tuple[float, float],
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes | None = None,
        links: Sequence[Link] = (),
        error: str | None = None,
    ) -> None:
        """One finished span, to the exporter's queue."""
        status = Status(StatusCode.ERROR, error) if error is not None else Status(StatusCode.UNSET)
        if attributes is not None or error is not None:  # an attribute without a value is left out
            attributes = {key: value for key, value in (attributes or {}).items() if value is not None}
            if error is not None:
                attributes["error.type"] = error
        span = ReadableSpan(
            name=name,
            context=context,
            parent=parent,
            resource=self.provider.resource,
            attributes=attributes,
            links=links,
            kind=kind,
            status=status,
            start_time=epoch_ns(times[0]),
            end_time=epoch_ns(times[1]),
            instrumentation_scope=self.scope,
        )
        self.processor.on_end(span)

    def child(self, parent: SpanContext) -> SpanContext:
        """A new span's context in `parent`'s trace."""
        span_id = self.provider.id_generator.generate_span_id()
        return SpanContext(parent.trace_id, span_id, False, parent.trace_flags, parent.trace_state)

    def shutdown(self) -> None:
        """Export what is buffered, then stop (the server's shutdown)."""
        self.provider.shutdown()


class GenerationSpan:
    """One generation's span: its context (the engine request's `traceparent`) and when it began."""

    __slots__ = ("context", "started", "traceparent")

    def __init__(self, context: SpanContext) -> None:
        self.context = context
        self.started = time.perf_counter()
        self.traceparent = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


class ResponseTrace:
    """One response's span, its stages' intervals and its generations' spans."""

    __slots__ = ("context", "intervals", "links", "parent", "started", "tracing")

    def __init__(
        self,
        tracing: Tracing,
        context: SpanContext,
        parent: SpanContext | None,
        links: Sequence[Link],
        started: float,
    ) -> None:
        self.tracing = tracing
        self.context = context
        self.parent = parent
        self.links = links
        self.started = started
        self.intervals: list[tuple[str, float, float]] = []  # (stage, start, end) in perf_counter seconds

    def generation(self) -> GenerationSpan:
        return GenerationSpan(self.tracing.child(self.context))

    def end_generation(self, span: GenerationSpan, model: str, attributes: Attributes, error: str | None) -> None:
        found = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model, **attributes}
        times = (span.started, time.perf_counter())
        self.tracing.emit(
            f"generate {model}", span.context, self.context, times, kind=SpanKind.CLIENT, attributes=found, error=error
        )

    def end(self, name: str, attributes: Attributes, error: str | None = None) -> None:
        """The stages' spans, then the response's, named `name` and given `attributes`."""
        tracing, context = self.tracing, self.context
        for stage, start, end in self.intervals:
            tracing.emit(stage, tracing.child(context), context, (start, end))
        times = (self.started, time.perf_counter())
        tracing.emit(
            name,
            context,
            self.parent,
            times,
            kind=SpanKind.SERVER,
            attributes=attributes,
            links=self.links,
            error=error,
        )


def messages(items: Sequence[Any]) -> str:
    """Items as the content attributes carry them: their JSON."""
    import msgspec

    return msgspec.json.encode(list(items)).decode()
