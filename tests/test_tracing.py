"""OpenTelemetry traces (docs/tracing.md), exported by the real OTLP exporters to receivers on loopback and decoded
with opentelemetry-proto (otlp_support.py): one span per response with the GenAI attributes, its stages as child
spans, an incoming `traceparent` as the parent (HTTP, SSE, the WebSocket upgrade), a span per WebSocket connection
its responses link to, and the engine request carrying the generation span's `traceparent` (sim-engine)."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from conftest import RunningServer, start_server
from hotloop.config import Upstream
from hotloop.observability.tracing import wanted
from otlp_support import Received, attributes, grpc_receiver, http_receiver
from simengine_support import SimEngineProcess
from wsutil import WS, final

SIM = "hotloop-sim"
STAGES = {"admission", "validate", "resolve", "safety", "render", "finish"}


@pytest.fixture(scope="module", autouse=True)
def quick_export() -> Iterator[None]:
    """The batch processor's delay (5 s by default) down to 50 ms, read when each server builds its tracer."""
    before = os.environ.get("OTEL_BSP_SCHEDULE_DELAY")
    os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "50"
    yield
    if before is None:
        del os.environ["OTEL_BSP_SCHEDULE_DELAY"]
    else:
        os.environ["OTEL_BSP_SCHEDULE_DELAY"] = before


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory, quick_export: None) -> Iterator[tuple[RunningServer, Received]]:
    with http_receiver() as (url, received):
        running = start_server(tmp_path_factory.mktemp("traced"), models=[SIM], otel_endpoint=url)
        yield running, received
        running.stop()


def traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def response_span(received: Received, response_id: str) -> tuple[Span, list[Span]]:
    """The response's span and its children, once the response's finish span is in too."""

    def done(spans: list[Span]) -> bool:
        found = [span for span in spans if attributes(span).get("gen_ai.response.id") == response_id]
        return bool(found) and any(s.name == "finish" and s.parent_span_id == found[0].span_id for s in spans)

    spans = received.wait(done)
    span = next(span for span in spans if attributes(span).get("gen_ai.response.id") == response_id)
    return span, [child for child in spans if child.parent_span_id == span.span_id]


def check_response_span(span: Span, children: list[Span], response: dict[str, Any], transport: str) -> None:
    found = attributes(span)
    assert span.name == f"chat {SIM}" and span.kind == Span.SPAN_KIND_SERVER
    usage = response["usage"]
    assert found["gen_ai.operation.name"] == "chat" and found["gen_ai.provider.name"] == "hotloop"
    assert found["gen_ai.request.model"] == SIM and found["gen_ai.response.model"] == SIM
    assert found["gen_ai.usage.input_tokens"] == usage["input_tokens"]
    assert found["gen_ai.usage.output_tokens"] == usage["output_tokens"]
    assert found["gen_ai.usage.cache_read.input_tokens"] == usage["input_tokens_details"]["cached_tokens"]
    assert found["gen_ai.usage.reasoning.output_tokens"] == usage["output_tokens_details"]["reasoning_tokens"]
    assert found["gen_ai.response.finish_reasons"] == ["completed"]
    assert 0 < found["gen_ai.response.time_to_first_chunk"] < 5
    assert found["hotloop.transport"] == transport
    assert "gen_ai.input.messages" not in found and "gen_ai.output.messages" not in found  # content is opt-in
    names = {child.name for child in children}
    assert names >= STAGES and f"generate {SIM}" in names, names
    for child in children:  # inside the response, in its trace
        assert child.trace_id == span.trace_id
        assert span.start_time_unix_nano <= child.start_time_unix_nano <= child.end_time_unix_nano
        assert child.end_time_unix_nano <= span.end_time_unix_nano
    generate = next(child for child in children if child.name.startswith("generate"))
    assert generate.kind == Span.SPAN_KIND_CLIENT


def test_an_http_response_is_a_span_under_the_incoming_traceparent(traced: tuple[RunningServer, Received]) -> None:
    server, received = traced
    header, trace_id, parent_id = traceparent()
    with server.http() as http:
        reply = http.post("/responses", json={"model": SIM, "input": "Hello"}, headers={"traceparent": header})
        assert reply.status_code == 200
        response = reply.json()
        span, children = response_span(received, response["id"])
        assert span.trace_id.hex() == trace_id and span.parent_span_id.hex() == parent_id
        check_response_span(span, children, response, "http")
        assert received.services == {"hotloop"}

        # SSE, continuing it: the previous response's id on the span; no traceparent, a trace of its own
        body = {"model": SIM, "input": "Go on", "stream": True, "previous_response_id": response["id"]}
        with http.stream("POST", "/responses", json=body) as stream:
            lines = [line for line in stream.iter_lines() if line.startswith("data: {")]
        streamed = json.loads(lines[-1][6:])["response"]
        span, children = response_span(received, streamed["id"])
        check_response_span(span, children, streamed, "sse")
        assert attributes(span)["gen_ai.request.previous_response.id"] == response["id"]
        assert span.trace_id.hex() != trace_id and not span.parent_span_id


def test_a_refused_create_is_a_failed_span(traced: tuple[RunningServer, Received]) -> None:
    server, received = traced
    header, trace_id, _ = traceparent()
    with server.http() as http:
        body = {"model": SIM, "input": "x", "temperature": 9}
        reply = http.post("/responses", json=body, headers={"traceparent": header})
    assert reply.status_code == 400

    def refused(span: Span) -> bool:
        return span.trace_id.hex() == trace_id and span.name == f"chat {SIM}"

    span = next(span for span in received.wait(lambda spans: any(map(refused, spans))) if refused(span))
    assert span.status.code == span.status.STATUS_CODE_ERROR
    assert attributes(span)["error.type"] == reply.json()["error"]["code"]


def test_a_websocket_connection_is_a_span_its_responses_link_to(traced: tuple[RunningServer, Received]) -> None:
    server, received = traced
    header, trace_id, parent_id = traceparent()
    with WS(server.ws_url, headers={"traceparent": header}) as ws:
        first = final(ws.turn(model=SIM, input="one"))
        second = final(ws.turn(model=SIM, input="two", previous_response_id=first["id"]))
    spans = received.wait(lambda spans: any(span.name == "websocket /v1/responses" for span in spans))
    connection = next(span for span in spans if span.name == "websocket /v1/responses")
    assert connection.trace_id.hex() == trace_id and connection.parent_span_id.hex() == parent_id
    for response in (first, second):
        span, children = response_span(received, response["id"])
        check_response_span(span, children, response, "websocket")
        assert span.trace_id.hex() == trace_id and span.parent_span_id.hex() == parent_id
        assert [link.span_id for link in span.links] == [connection.span_id]
        assert span.end_time_unix_nano <= connection.end_time_unix_nano


def check_engine_request(engine: SimEngineProcess, received: Received, response_id: str) -> None:
    """The engine's latest request came with the traceparent of that response's generate span."""
    span, children = response_span(received, response_id)
    generate = next(child for child in children if child.name == "generate up")
    sent = engine.http.get("/stats/requests").json()["requests"][-1]["traceparent"]
    assert sent[:-2] == f"00-{span.trace_id.hex()}-{generate.span_id.hex()}-"
    assert int(sent[-2:], 16) & 1  # sampled


def test_the_engine_request_carries_the_generation_span_over_grpc(tmp_path: Path) -> None:
    engine = SimEngineProcess(tps=5000).wait_ready()
    try:
        with grpc_receiver() as (url, received):
            upstream = Upstream(url=engine.base_url, upstream_model="engine-model")
            server = start_server(
                tmp_path,
                models=["up"],
                default_model="up",
                upstreams={"up": upstream},
                otel_endpoint=url,
                otel_protocol="grpc",
                otel_content=True,
            )
            try:
                with server.http() as http:
                    reply = http.post("/responses", json={"model": "up", "input": "Hello engine"})
                    assert reply.status_code == 200
                    response = reply.json()
                    check_engine_request(engine, received, response["id"])
                    body = {"model": "up", "input": "Streamed", "stream": True}
                    with http.stream("POST", "/responses", json=body) as stream:
                        lines = [line for line in stream.iter_lines() if line.startswith("data: {")]
                    check_engine_request(engine, received, json.loads(lines[-1][6:])["response"]["id"])
                with WS(server.ws_url) as ws:
                    check_engine_request(engine, received, final(ws.turn(model="up", input="Over a socket"))["id"])
                span, _ = response_span(received, response["id"])
            finally:
                server.stop()
        found = attributes(span)
        assert found["gen_ai.provider.name"] == "openai"
        assert "Hello engine" in found["gen_ai.input.messages"]  # otel_content: the content is on the span
        assert response["output"][0]["content"][0]["text"] in found["gen_ai.output.messages"]
    finally:
        engine.stop()


def test_tracing_is_off_unless_asked() -> None:
    assert not wanted("", False, {})
    assert wanted("", False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert wanted("", False, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert wanted("http://collector:4318", False, {}) and wanted("", True, {})
    assert not wanted("http://collector:4318", True, {"OTEL_SDK_DISABLED": "true"})
    assert not wanted("", True, {"OTEL_TRACES_EXPORTER": "none"})


def test_a_server_without_tracing_has_no_tracer(server: RunningServer) -> None:
    assert server.service.tracing is None
    with server.http() as http:
        assert http.post("/responses", json={"model": SIM, "input": "x"}).status_code == 200


def test_a_compaction_summary_is_a_child_span(traced: tuple[RunningServer, Received]) -> None:
    server, received = traced
    long_input = " ".join(f"line {n}: the build failed in module_{n}.py" for n in range(400))
    compaction = [{"type": "compaction", "compact_threshold": 1000}]
    body = {"model": SIM, "input": long_input, "context_management": compaction}
    with server.http() as http:
        reply = http.post("/responses", json=body)
    assert reply.status_code == 200, reply.text
    response = reply.json()
    assert response["output"][0]["type"] == "compaction"
    _, children = response_span(received, response["id"])
    compact = [child for child in children if child.name == "compact"]
    assert len(compact) == 1
    generate = next(child for child in children if child.name.startswith("generate"))
    assert compact[0].end_time_unix_nano <= generate.start_time_unix_nano  # the summary first, then the answer


def test_a_parent_that_is_not_sampled_makes_no_spans(traced: tuple[RunningServer, Received]) -> None:
    server, received = traced
    header, trace_id, _ = traceparent()
    dropped = header[:-2] + "00"  # the caller decided not to record this trace
    with server.http() as http:
        assert http.post("/responses", json={"model": SIM, "input": "x"}, headers={"traceparent": dropped}).is_success
        after = http.post("/responses", json={"model": SIM, "input": "y"}).json()
    spans = received.wait(lambda spans: any(attributes(s).get("gen_ai.response.id") == after["id"] for s in spans))
    assert not [span for span in spans if span.trace_id.hex() == trace_id]  # sent before the one that arrived
