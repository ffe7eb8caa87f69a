"""Fewer, cheaper writes (issue 11): the events a turn produces in one loop iteration leave in one write, on SSE and
WebSocket, each event whole and in order; a client that reads slower than the model writes gets merged deltas,
sequence numbers still consecutive, every event schema-valid, the text whole."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncGenerator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect

from conftest import RunningServer, start_server
from hotloop.transports.sse import EventStreamResponse, SendState
from hotloop.wire.events import Event
from http_support import check_sequence, output_text, parse_sse
from metrics_support import scrape, wait_for
from schema import check_event
from wsutil import WS, final

TOKENS = 100_000  # ~17 MB of delta events unmerged: more than the kernel's socket buffers hold
LONG = {"sim_ttft_ms": "0", "sim_tps": "50000", "sim_output_tokens": str(TOKENS), "sim_tool_calls": "0"}


@pytest.fixture(scope="module")
def sending_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("sending"), models=["hotloop-sim"])
    yield running
    running.stop()


def test_websocket_frames_are_coalesced_into_fewer_writes(sending_server: RunningServer) -> None:
    """The default stack (uvicorn's websockets-sansio) takes the direct path; a turn's frames take fewer writes."""
    with WS(sending_server.ws_url) as ws:
        events = ws.turn(input="hello", metadata={"sim_output_tokens": "64", "sim_tool_calls": "0"})
        [connection] = list(sending_server.service.drain.connections)
        writer = connection.writer
        assert writer.direct
        assert final(events)["status"] == "completed"
        assert 0 < writer.writes < len(events)


async def _events(batches: list[list[bytes]]) -> AsyncGenerator[Event, None]:
    for batch in batches:
        for data in batch:
            yield Event(json.loads(data)["type"], data, False)
        await asyncio.sleep(0.001)  # the next batch comes in a later loop iteration


async def test_sse_coalesces_the_events_of_one_iteration_into_one_chunk() -> None:
    def event(seq: int) -> bytes:
        return json.dumps({"type": "response.output_text.delta", "sequence_number": seq, "delta": str(seq)}).encode()

    batches = [[event(0), event(1), event(2)], [event(3)], [event(4), event(5)]]
    state = SendState()
    response = EventStreamResponse(_events(batches), done=True, state=state)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    await response({"type": "http"}, receive, send)
    bodies = [message["body"] for message in sent if message["type"] == "http.response.body"]
    assert bodies[-1] == b"" and sent[-1]["more_body"] is False
    assert len(bodies) - 1 == state.chunks <= 4  # three batches (and [DONE] with the last), not seven writes
    text = b"".join(bodies).decode()
    assert [event["sequence_number"] for event in _parse(text)] == list(range(6))


def _parse(text: str) -> list[dict[str, Any]]:
    blocks = [block for block in text.split("\n\n") if block.strip()]
    assert blocks[-1] == "data: [DONE]"
    return [json.loads(block.split("\n")[1][len("data: ") :]) for block in blocks[:-1]]


def _slow_socket(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    # A small receive buffer fills up fast (not smaller than the loopback MSS: the window would stall).
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    return sock


def _check_merged(events: list[dict[str, Any]]) -> None:
    deltas = [event for event in events if event["type"] == "response.output_text.delta"]
    response = events[-1]["response"]
    assert response["status"] == "completed"
    assert response["usage"]["output_tokens"] == TOKENS
    # Merged: far fewer deltas than tokens (what the socket buffers took before the server saw the client lag
    # went out one by one); whole: their text is the done text, the response's text.
    assert len(deltas) < TOKENS * 0.7, len(deltas)
    done = next(event for event in events if event["type"] == "response.output_text.done")
    assert "".join(delta["delta"] for delta in deltas) == done["text"] == output_text(response)


def _finishing(server: RunningServer, transport: str) -> Callable[[], object]:
    """A wait for the next response of `transport` to finish on the server (counted before its terminal event)."""
    labels = {"model": "hotloop-sim", "status": "completed", "transport": transport}
    before = scrape(server).value("hotloop_responses_total", **labels)
    return lambda: wait_for(server, lambda now: now.value("hotloop_responses_total", **labels) > before, timeout=30)


def test_a_slow_websocket_reader_gets_merged_deltas(sending_server: RunningServer) -> None:
    finished = _finishing(sending_server, "websocket")
    with connect(sending_server.ws_url, sock=_slow_socket(sending_server.port), max_size=None) as ws:
        ws.send(json.dumps({"type": "response.create", "input": "go", "store": False, "metadata": LONG}))
        finished()  # not reading while the model writes it all
        events: list[dict[str, Any]] = []
        while not events or events[-1]["type"] != "response.completed":
            events.append(json.loads(ws.recv(timeout=30)))
    for event in events:
        check_event(event)
    check_sequence(events)
    _check_merged(events)


def test_a_slow_sse_reader_gets_merged_deltas(sending_server: RunningServer) -> None:
    sock = _slow_socket(sending_server.port)
    body = json.dumps({"input": "go", "store": False, "stream": True, "metadata": LONG}).encode()
    head = (
        f"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    finished = _finishing(sending_server, "sse")
    sock.sendall(head + body)
    finished()  # not reading while the model writes it all
    sock.settimeout(30)
    raw = b""
    while chunk := sock.recv(1 << 16):
        raw += chunk
    sock.close()
    header, _, chunked = raw.partition(b"\r\n\r\n")
    assert header.startswith(b"HTTP/1.1 200")
    events = parse_sse(_dechunk(chunked).decode())
    check_sequence(events)
    _check_merged(events)


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2 :]
    return bytes(out)


def test_a_reader_that_keeps_up_gets_every_token_as_a_delta(sending_server: RunningServer, tmp_path: Path) -> None:
    """No congestion, no merging: one delta per token, as before."""
    with WS(sending_server.ws_url) as ws:
        events = ws.turn(input="hi", metadata={"sim_output_tokens": "200", "sim_tps": "20000", "sim_tool_calls": "0"})
    deltas = [event for event in events if event["type"] == "response.output_text.delta"]
    assert len(deltas) == 200


def test_a_fast_models_deltas_share_writes_within_the_flush_window(tmp_path: Path) -> None:
    """64 deltas a millisecond apart: with no window about one write each; with a 20 ms window a handful, every
    frame still whole, in order and schema-valid, and the terminal event not held back."""
    tokens = {"sim_output_tokens": "64", "sim_tps": "1000", "sim_tool_calls": "0"}
    writes = {}
    for window_ms in (0.0, 20.0):
        running = start_server(tmp_path / str(window_ms), models=["hotloop-sim"], stream_flush_ms=window_ms)
        try:
            with WS(running.ws_url) as ws:
                events = ws.turn(input="hello", metadata=tokens)
                [connection] = list(running.service.drain.connections)
                writes[window_ms] = connection.writer.writes
        finally:
            running.stop()
        for event in events:
            check_event(event)
        check_sequence(events)
        assert final(events)["status"] == "completed"
        assert sum(event["type"] == "response.output_text.delta" for event in events) == 64  # frames unchanged
    assert writes[0.0] >= 30  # about one write per delta (fewer where the loop ran late and deltas met)
    assert writes[20.0] <= 12  # 64 ms of deltas in 20 ms windows, and the few events that are not deltas
