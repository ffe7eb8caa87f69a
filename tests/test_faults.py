"""Backend faults and vanishing clients against real `hotloop serve` processes (docs/reliability.md).

A backend that stalls or dies mid-stream ends the response `failed` (server_error) within `backend_timeout_s`, its
parent is evicted (protocol.md §3.8.3), a usage record is written and the socket goes on. A client that vanishes
mid-response has its generation stopped at once and its connection's memory freed.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import time
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import RunningServer, start_server
from hotloop.stall import BackendStalled, StallTimer
from http_support import check_sequence, error_of, parse_sse, usage_record, wait_status
from metrics_support import Scrape
from process_support import ServerProcess
from wsutil import WS, final

TIMEOUT_S = 0.5
SLACK_S = 0.75  # a loaded 2-core CI machine
# Half a second between tokens: a stop that waited for the next send would show.
SLOW = {"sim_tps": "2", "sim_output_tokens": "2000"}


@pytest.fixture(scope="module")
def proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("faults"), backend_timeout_s=TIMEOUT_S, ledger_flush_ms=10) as running:
        yield running


@pytest.fixture
def http(proc: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=proc.base_url, timeout=30) as client:
        yield client


def _scrape(proc: ServerProcess) -> Scrape:
    reply = httpx.get(f"http://127.0.0.1:{proc.port}/metrics", timeout=10)
    assert reply.status_code == 200
    return Scrape(reply.text)


def _fault(value: str, **more: str) -> dict[str, str]:
    return {"hotloop_sim_fault": value, **more}


# -- the timer, without a server ------------------------------------------------------------------------------------


async def _ticks(gaps: list[float], waiting: asyncio.Event | None = None) -> AsyncGenerator[int, None]:
    """A tick after each gap; `waiting` is set once the consumer waits for the second."""
    for index, gap in enumerate(gaps):
        if index and waiting is not None:
            waiting.set()
        await asyncio.sleep(gap)
        yield index


async def _drain(
    timer: StallTimer, gaps: list[float], consumer_s: float = 0.0, waiting: asyncio.Event | None = None
) -> int:
    ticks, count = _ticks(gaps, waiting), 0
    try:
        while await timer.wait(anext(ticks, None)) is not None:
            count += 1
            await asyncio.sleep(consumer_s)  # a slow client: outside the wait, not counted
    finally:
        timer.close()
    return count


def test_stall_timer_bounds_each_wait_only() -> None:
    async def run() -> None:
        # Many short waits and a slow consumer add up past the limit: no stall.
        assert await _drain(StallTimer(0.1), [0.02] * 10, consumer_s=0.05) == 10
        assert await _drain(StallTimer(0), [0.05] * 3) == 3  # 0: no limit
        started = time.monotonic()
        with pytest.raises(BackendStalled, match=r"no output within 0\.1 s"):
            await _drain(StallTimer(0.1), [0.01, 0.01, 5.0])
        assert 0.1 <= time.monotonic() - started < 0.5

    asyncio.run(run())


def test_stall_timer_lets_a_real_cancellation_through() -> None:
    async def run() -> None:
        waiting = asyncio.Event()
        task = asyncio.ensure_future(_drain(StallTimer(0.1), [0.01, 5.0], waiting=waiting))
        await waiting.wait()  # the timer bounds the wait for the second tick now
        task.cancel()  # the client went away before the limit: a cancellation, not a stall
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())


# -- a backend that stalls or dies -------------------------------------------------------------------------------


def test_websocket_stall_fails_in_time_and_the_socket_goes_on(proc: ServerProcess, http: httpx.Client) -> None:
    before = _scrape(proc)
    with WS(proc.ws_url) as ws:
        parent = final(ws.turn(input="hello", store=False))["id"]
        started = time.monotonic()
        events = ws.turn(input="go on", store=False, previous_response_id=parent, metadata=_fault("stall_after:3"))
        elapsed = time.monotonic() - started
        failed = final(events)
        assert events[-1]["type"] == "response.failed"
        assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
        assert "stalled" in failed["error"]["message"]
        assert sum(event["type"] == "response.output_text.delta" for event in events) == 3
        print(f"websocket: stall → response.failed after {elapsed * 1000:.0f} ms (limit {TIMEOUT_S * 1000:.0f})")
        assert TIMEOUT_S <= elapsed < TIMEOUT_S + SLACK_S, elapsed
        # §3.8.3: the failed continuation evicted its store:false parent; the failed response is not continuable.
        for gone in (parent, failed["id"]):
            assert ws.error(input="again", previous_response_id=gone)["error"]["code"] == "previous_response_not_found"
        assert final(ws.turn(input="fresh start", store=False))["status"] == "completed"
    record = usage_record(http, failed["id"])
    assert record["status"] == "failed" and record["transport"] == "websocket"
    after = _scrape(proc)
    assert after.value("hotloop_backend_failures_total", reason="timeout") == (
        before.value("hotloop_backend_failures_total", reason="timeout") + 1
    )


def test_websocket_backend_error_mid_stream(proc: ServerProcess, http: httpx.Client) -> None:
    with WS(proc.ws_url) as ws:
        parent = final(ws.turn(input="hello", store=True))["id"]
        events = ws.turn(input="more", previous_response_id=parent, metadata=_fault("die_after:5"))
        failed = final(events)
        assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
        assert sum(event["type"] == "response.output_text.delta" for event in events) == 5
        # A stored parent evicted from the lane is hydrated from the store again (§3.8.3).
        assert final(ws.turn(input="retry", previous_response_id=parent))["status"] == "completed"
    assert wait_status(http, failed["id"], {"failed"})["error"]["code"] == "server_error"
    assert usage_record(http, failed["id"])["status"] == "failed"


def test_sse_stall_fails_in_band_within_the_timeout(proc: ServerProcess, http: httpx.Client) -> None:
    started = time.monotonic()
    reply = http.post("/responses", json={"input": "hi", "stream": True, "metadata": _fault("stall_after:2")})
    elapsed = time.monotonic() - started
    assert reply.status_code == 200
    events = parse_sse(reply.text)
    response = check_sequence(events)
    errors = [event for event in events if event["type"] == "error"]
    assert len(errors) == 1 and errors[0]["error"]["code"] == "server_error"  # §2.9: error, then response.failed
    assert events[-1]["type"] == "response.failed" and events[-2]["type"] == "error"
    assert response["status"] == "failed" and "stalled" in response["error"]["message"]
    print(f"sse: stall → response.failed after {elapsed * 1000:.0f} ms (limit {TIMEOUT_S * 1000:.0f})")
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + SLACK_S, elapsed
    assert wait_status(http, response["id"], {"failed"})["status"] == "failed"
    assert usage_record(http, response["id"])["transport"] == "sse"


def test_json_create_with_a_crashing_backend_is_a_500(proc: ServerProcess, http: httpx.Client) -> None:
    reply = http.post("/responses", json={"input": "hi", "metadata": _fault("crash")})
    error_of(reply, 500, "server_error", None)
    assert http.post("/responses", json={"input": "hi"}).status_code == 200


@pytest.mark.parametrize("value", ["stall_after:x", "die_after:-1", "explode", "", "stall_after:"])
def test_a_bad_fault_value_is_ignored(proc: ServerProcess, http: httpx.Client, value: str) -> None:
    reply = http.post("/responses", json={"input": "hi", "metadata": _fault(value)})
    assert reply.status_code == 200, reply.text
    assert reply.json()["status"] == "completed"


# -- a client that vanishes ----------------------------------------------------------------------------------------


def _vanish(sock: socket.socket, clock: Any = time.time) -> float:
    """Drop a connection without a close handshake, as a killed client's kernel does; returns the moment (wall
    clock by default: the server's too). `shutdown` first: a plain close would wait for the client's reader thread."""
    at = clock()
    sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    return float(at)


def _cancel_latency(http: httpx.Client, response_id: str, vanished_at: float) -> float:
    """Seconds from the drop to the record of the cancelled response, written when the backend has stopped."""
    record = usage_record(http, response_id)
    assert record["status"] == "cancelled", record
    return float(record["created_at"]) - vanished_at


def test_websocket_client_vanishing_stops_generation(proc: ServerProcess, http: httpx.Client) -> None:
    before = _scrape(proc)
    ws = WS(proc.ws_url)
    ws.create(input="talk for a long time", store=False, metadata=SLOW)
    response_id = ws.recv()["response"]["id"]
    while ws.recv()["type"] != "response.output_text.delta":
        pass
    vanished_at = _vanish(ws.conn.socket)
    latency = _cancel_latency(http, response_id, vanished_at)
    print(f"websocket: client gone → generation stopped in {latency * 1000:.1f} ms")
    assert 0 <= latency < 0.2, latency
    after = _wait_metrics(proc, lambda s: s.value("hotloop_websocket_sessions") == 0)
    assert after.value("hotloop_generations_cancelled_total", transport="websocket") == (
        before.value("hotloop_generations_cancelled_total", transport="websocket") + 1
    )
    assert after.value("hotloop_cache_bytes", cache="connection") == 0
    assert after.value("hotloop_responses_in_flight", transport="websocket") == 0


def test_sse_client_vanishing_stops_generation(proc: ServerProcess, http: httpx.Client) -> None:
    before = _scrape(proc)
    body = {"input": "talk for a long time", "stream": True, "store": False, "metadata": SLOW}
    sock = socket.create_connection(("127.0.0.1", proc.port))
    payload = httpx.Request("POST", f"{proc.base_url}/responses", json=body)
    head = "POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    sock.sendall(f"{head}Content-Length: {len(payload.content)}\r\n\r\n".encode() + payload.content)
    received = b""
    while b"response.output_text.delta" not in received:
        received += sock.recv(65536)
    response_id = received.split(b'"id":"', 1)[1].split(b'"', 1)[0].decode()
    latency = _cancel_latency(http, response_id, _vanish(sock))
    print(f"sse: client gone → generation stopped in {latency * 1000:.1f} ms")
    assert 0 <= latency < 0.2, latency
    after = _wait_metrics(proc, lambda s: s.value("hotloop_responses_in_flight", transport="sse") == 0)
    assert after.value("hotloop_generations_cancelled_total", transport="sse") == (
        before.value("hotloop_generations_cancelled_total", transport="sse") + 1
    )


def _wait_metrics(proc: ServerProcess, check: Any, timeout: float = 5.0) -> Scrape:
    deadline = time.monotonic() + timeout
    while not check(current := _scrape(proc)):
        assert time.monotonic() < deadline, current.text
        time.sleep(0.01)
    return current


# -- in-process: the backend's own stop, the session collected -----------------------------------------------------


def test_vanished_connection_is_collected_and_its_backend_stopped(tmp_path: Path) -> None:
    running: RunningServer = start_server(tmp_path, models=["hotloop-sim"])
    try:
        service = running.service
        sim = service.models.resolve("hotloop-sim").backend
        ws = WS(running.ws_url)
        final(ws.turn(input="x" * 5000, store=False))
        ws.create(input="slow", store=False, previous_response_id=None, metadata=SLOW, stream_id="lane")
        while ws.recv()["type"] != "response.output_text.delta":
            pass
        assert len(service.sessions) == 1 and service.connection_states.bytes > 5000
        stopped = sim.stats.stopped
        gone = _vanish(ws.conn.socket, time.perf_counter)
        deadline = time.monotonic() + 5
        while sim.stats.stopped == stopped:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        latency = sim.stats.closed_at - gone
        print(f"in-process: client gone → sim generator closed in {latency * 1000:.2f} ms")
        assert 0 <= latency < 0.2, latency
        while service.connection_states.bytes or len(service.sessions):
            gc.collect()
            assert time.monotonic() < deadline, (service.connection_states.bytes, len(service.sessions))
            time.sleep(0.01)
        assert len(service.connection_states) == 0
    finally:
        running.stop()
