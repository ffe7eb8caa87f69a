"""Graceful shutdown of a real `hotloop serve` process under load from HTTP, SSE and WebSocket clients: SIGTERM stops
accepting, refuses new creates (503), lets in-flight responses finish within `shutdown_grace_s`, fails the rest
(`server_error`), closes WebSockets with 1001, flushes the ledger and the store, and exits 0."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import start_server
from http_support import FINISHED, error_of, parse_sse, usage_record, wait_status
from process_support import SIM, ServerProcess
from wsutil import SLOW, TERMINAL, WS, final

GRACE_S = 2.0
SHORT = {"sim_tps": "100", "sim_output_tokens": "100"}  # ~1 s: finishes within the grace period
CUT = "server_error"


class Load:
    """Clients that each start a response, say so, and return what they saw."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.pool = ThreadPoolExecutor(max_workers=12)
        self.started: list[threading.Event] = []
        self.terminated = threading.Event()  # set once SIGTERM has been sent and the server has begun draining

    def run(self, client: Callable[[threading.Event], Any]) -> Future[Any]:
        started = threading.Event()
        self.started.append(started)
        return self.pool.submit(client, started)

    def wait_started(self, timeout: float = 20) -> None:
        for started in self.started:
            assert started.wait(timeout), "a client did not start its response"


def _ws_turn(
    server: ServerProcess, metadata: dict[str, str], late: threading.Event | None = None
) -> Callable[[threading.Event], Any]:
    def client(started: threading.Event) -> dict[str, Any]:
        with WS(server.ws_url) as ws:
            ws.create(input="hello", store=True, metadata=metadata)
            frames = [ws.recv(timeout=20)]
            started.set()
            seen: dict[str, Any] = {}
            if late is not None:
                assert late.wait(30)  # the server is draining now: a create on another lane is refused at once
                ws.create(input="late", store=True, stream_id="late")
            while frames[-1]["type"] not in TERMINAL:
                frame = ws.recv(timeout=20)
                if frame["type"] == "error":
                    seen["late"] = frame
                else:
                    assert "stream_id" not in frame, frame  # nothing runs on the late lane
                    frames.append(frame)
            seen["response"] = final(frames)
            seen["close"] = ws.closed_with(timeout=20)
            seen["closed_at"] = time.monotonic()
            return seen

    return client


def _ws_idle(server: ServerProcess) -> Callable[[threading.Event], Any]:
    def client(started: threading.Event) -> tuple[int | None, float]:
        with WS(server.ws_url) as ws:
            started.set()
            code = ws.closed_with(timeout=20)
            return code, time.monotonic()

    return client


def _sse(server: ServerProcess, metadata: dict[str, str]) -> Callable[[threading.Event], Any]:
    def client(started: threading.Event) -> list[dict[str, Any]]:
        body = {"model": SIM, "input": "hello", "stream": True, "metadata": metadata}
        with httpx.stream("POST", f"{server.base_url}/responses", json=body, timeout=30) as reply:
            assert reply.status_code == 200
            text = ""
            for chunk in reply.iter_text():
                text += chunk
                started.set()
        return parse_sse(text)

    return client


def _json(server: ServerProcess, metadata: dict[str, str]) -> Callable[[threading.Event], Any]:
    def client(started: threading.Event) -> httpx.Response:
        started.set()
        body = {"model": SIM, "input": "hello", "metadata": metadata}
        return httpx.post(f"{server.base_url}/responses", json=body, timeout=30)

    return client


def _wait_generating(server: ServerProcess, transport: str, count: int, timeout: float = 10.0) -> None:
    """Poll GET /metrics until `count` responses of `transport` are generating."""
    deadline = time.monotonic() + timeout
    while True:
        text = httpx.get(server.base_url.removesuffix("/v1") + "/metrics", timeout=5).text
        line = f'hotloop_responses_in_flight{{transport="{transport}"}}'
        values = [float(row.split()[-1]) for row in text.splitlines() if row.startswith(line)]
        if values and values[0] >= count:
            return
        assert time.monotonic() < deadline, f"{transport}: fewer than {count} responses generating"
        time.sleep(0.02)


def _wait_refusing(server: ServerProcess, timeout: float = 10.0) -> None:
    """Poll until the server refuses new connections: its shutdown closes the listener and begins the drain in one
    step (transports/server.py `Server.shutdown`)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
        except OSError:
            return
        assert time.monotonic() < deadline, "the server still accepts connections"
        time.sleep(0.02)


def test_sigterm_drains_then_exits_cleanly(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, shutdown_grace_s=GRACE_S).wait_ready()
    try:
        load = Load(server)
        ws_short = load.run(_ws_turn(server, SHORT))
        ws_long = load.run(_ws_turn(server, SLOW, late=load.terminated))
        ws_idle = load.run(_ws_idle(server))
        sse_short = load.run(_sse(server, SHORT))
        sse_long = load.run(_sse(server, SLOW))
        json_short = load.run(_json(server, SHORT))
        json_long = load.run(_json(server, SLOW))
        keep_alive = httpx.Client(base_url=server.base_url, timeout=30)
        background = keep_alive.post(
            "/responses", json={"model": SIM, "input": "bg", "background": True, "metadata": SLOW}
        ).json()
        load.wait_started()
        # Both JSON requests are generating (not merely sent); the background response counts as "http" too, so
        # two would be met by it and the short JSON while the long one is not yet admitted (it would get a 503).
        _wait_generating(server, "http", 3)

        server.signal()
        sigterm_at = time.monotonic()
        _wait_refusing(server)  # uvicorn noticed the signal (within 0.1 s): the drain has begun
        load.terminated.set()
        # A new create on an open HTTP connection is refused; new connections are not accepted.
        refused = keep_alive.post("/responses", json={"model": SIM, "input": "late"})
        error_of(refused, 503, "server_is_overloaded", None)
        assert refused.headers["connection"] == "close"
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=2)

        code, idle_closed_at = ws_idle.result(timeout=30)
        assert code == 1001
        assert idle_closed_at - sigterm_at < GRACE_S  # an idle connection does not wait for the grace period

        short = ws_short.result(timeout=30)
        assert short["response"]["status"] == "completed"
        assert short["close"] == 1001

        long = ws_long.result(timeout=30)
        assert long["response"]["status"] == "failed"
        assert long["response"]["error"]["code"] == CUT
        assert long["close"] == 1001
        assert long["closed_at"] - sigterm_at >= GRACE_S - 0.5
        late = long["late"]
        assert late["status"] == 503 and late["stream_id"] == "late"
        assert late["error"]["code"] == "server_is_overloaded"

        sse_done = sse_short.result(timeout=30)
        assert sse_done[-1]["type"] == "response.completed"
        sse_cut = sse_long.result(timeout=30)
        assert [event["type"] for event in sse_cut[-2:]] == ["error", "response.failed"]
        assert sse_cut[-1]["response"]["error"]["code"] == CUT

        assert json_short.result(timeout=30).status_code == 200
        cut_reply = json_long.result(timeout=30)
        error_of(cut_reply, 500, CUT, None)
        keep_alive.close()

        assert server.wait(timeout=30) == 0
        output = server.output()
        assert "Traceback" not in output, output
        assert time.monotonic() - sigterm_at < GRACE_S + 10
        load.pool.shutdown()

        finished = {
            "ws_short": short["response"]["id"],
            "sse_short": sse_done[-1]["response"]["id"],
            "json_short": json_short.result().json()["id"],
        }
        cut = {
            "ws_long": long["response"]["id"],
            "sse_long": sse_cut[-1]["response"]["id"],
            "background": background["id"],
        }
    finally:
        if server.process.poll() is None:
            server.kill()

    # The same data directory after a restart: everything finished is stored complete, the cut ones failed, and
    # every one of them has its usage record.
    with ServerProcess(tmp_path) as again, httpx.Client(base_url=again.base_url, timeout=30) as http:
        for name, response_id in finished.items():
            stored = http.get(f"/responses/{response_id}").json()
            assert stored["status"] == "completed", (name, stored)
            assert stored["output"], name
            assert usage_record(http, response_id)["status"] == "completed"
        for name, response_id in cut.items():
            stored = wait_status(http, response_id, FINISHED, timeout=2)
            assert stored["status"] == "failed", (name, stored)
            assert stored["error"]["code"] == CUT, name
            assert usage_record(http, response_id)["status"] == "failed"


def test_an_idle_server_stops_at_once(tmp_path: Path) -> None:
    """Nothing running: no wait for the grace period; an idle WebSocket is closed with 1001."""
    running = start_server(tmp_path, models=[SIM], shutdown_grace_s=30)
    with WS(running.ws_url) as ws:
        started = time.monotonic()
        running.stop()
        assert not running.thread.is_alive()
        assert time.monotonic() - started < 5
        assert ws.closed_with(timeout=5) == 1001


def test_stopping_a_threaded_server_drains_it(tmp_path: Path) -> None:
    """`ThreadedServer.stop()` takes the same path: the response running is cut after the grace period, the
    create queued behind it on its lane is refused with 503, then the socket closes with 1001."""
    running = start_server(tmp_path, models=[SIM], shutdown_grace_s=0.5)
    service = running.service
    with WS(running.ws_url) as ws:
        ws.create(input="long", metadata=SLOW)
        assert ws.recv()["type"] == "response.created"
        ws.create(input="queued")  # waits behind the first on the default lane
        stopper = threading.Thread(target=running.stop)
        stopper.start()
        frames = ws.collect(terminals=1, errors=1, timeout=20)
        code = ws.closed_with(timeout=20)
        stopper.join(30)
    assert not stopper.is_alive()
    cut = final([frame for frame in frames if frame["type"] != "error"])
    assert cut["status"] == "failed" and cut["error"]["code"] == CUT
    refused = frames[-1]
    assert refused["type"] == "error" and refused["status"] == 503
    assert refused["error"]["code"] == "server_is_overloaded"
    assert code == 1001
    assert service.ledger.closed and service.ledger.backlog == 0  # the ledger was written out before the store closed
