"""OTLP trace receivers on loopback for the tracing tests: one over HTTP (POST /v1/traces, protobuf) and one over
gRPC (TraceService/Export), both decoding what hotloop's exporter sends with opentelemetry-proto."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from process_support import free_port


class Received:
    """The spans a receiver decoded, with their resources' service names."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.services: set[str] = set()
        self.lock = threading.Lock()

    def add(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        with self.lock:
            for resource_spans in request.resource_spans:
                for attribute in resource_spans.resource.attributes:
                    if attribute.key == "service.name":
                        self.services.add(attribute.value.string_value)
                for scope in resource_spans.scope_spans:
                    self.spans.extend(scope.spans)

    def wait(self, check: Callable[[list[Span]], bool], timeout: float = 15.0) -> list[Span]:
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = list(self.spans)
            if check(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"the receiver got {[span.name for span in spans]}")
            time.sleep(0.05)


def value(any_value: AnyValue) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(item) for item in any_value.array_value.values]
    return getattr(any_value, kind) if kind is not None else None


def attributes(span: Span) -> dict[str, Any]:
    return {attribute.key: value(attribute.value) for attribute in span.attributes}


@contextmanager
def http_receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/HTTP receiver: its base URL (http://127.0.0.1:PORT) and what it received."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            if self.path == "/v1/traces" and self.headers["content-type"] == "application/x-protobuf":
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                received.add(request)
                status = 200
            else:
                status = 404
            reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(status)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def grpc_receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/gRPC receiver: its endpoint (http://127.0.0.1:PORT, no TLS) and what it received."""
    received = Received()

    class Service(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(
            self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
        ) -> trace_service_pb2.ExportTraceServiceResponse:
            received.add(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", received
    finally:
        server.stop(grace=None)
