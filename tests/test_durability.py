"""SIGKILL under load: every response whose terminal event a client received is readable after a restart.

A real `hotloop serve` process takes store=true turns from HTTP (JSON), SSE and WebSocket clients on threads,
each continuing its own chain, until it is killed with SIGKILL in the middle of them. A new process on the same
store must then return every response a client saw end, with the output the client saw.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from http_support import parse_sse
from process_support import ServerProcess, free_port
from replica_support import HEADERS, SIM, STORES, get_response, shared_store
from wsutil import WS, final

PACE = {"sim_ttft_ms": 2, "sim_tps": 2000, "sim_output_tokens": 12}  # ~8 ms a response: many are in flight
CLIENTS_PER_TRANSPORT = 2
SEEN_BEFORE_KILL = 8  # responses each transport must have seen end before the kill


class Recorder:
    """What the clients saw end, per transport, and any failure that happened before the kill."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.outputs: dict[str, list[Any]] = {}
        self.by_transport: dict[str, int] = {}
        self.killed = threading.Event()
        self.failures: list[str] = []

    def saw(self, transport: str, response: dict[str, Any]) -> None:
        assert response["status"] == "completed", response
        with self.lock:
            self.outputs[response["id"]] = response["output"]
            self.by_transport[transport] = self.by_transport.get(transport, 0) + 1

    def count(self, transport: str) -> int:
        with self.lock:
            return self.by_transport.get(transport, 0)

    def run(self, transport: str, loop: Callable[[], None]) -> None:
        """Run one client until the kill ends it; an error before the kill is a failure."""
        try:
            loop()
        except Exception as exc:
            if not self.killed.is_set():
                self.failures.append(f"{transport}: {type(exc).__name__}: {exc}")


def _body(previous: str | None, turn: int) -> dict[str, Any]:
    body: dict[str, Any] = {"model": SIM, "input": f"turn {turn}", "store": True}
    if previous:
        body["previous_response_id"] = previous
    return body


def http_client(base_url: str, seen: Recorder) -> Callable[[], None]:
    def loop() -> None:
        previous = None
        with httpx.Client(base_url=base_url, headers=HEADERS, timeout=30) as http:
            for turn in range(10_000):
                reply = http.post("/responses", json=_body(previous, turn))
                assert reply.status_code == 200, reply.text
                seen.saw("http", reply.json())
                previous = reply.json()["id"]

    return loop


def sse_client(base_url: str, seen: Recorder) -> Callable[[], None]:
    def loop() -> None:
        previous = None
        with httpx.Client(base_url=base_url, headers=HEADERS, timeout=30) as http:
            for turn in range(10_000):
                terminal = None
                with http.stream("POST", "/responses", json={**_body(previous, turn), "stream": True}) as reply:
                    assert reply.status_code == 200
                    kind = ""
                    for line in reply.iter_lines():  # as the events arrive: the kill may cut the stream after it
                        if line.startswith("event: "):
                            kind = line[7:]
                        elif line.startswith("data: "):
                            if kind == "response.completed":
                                terminal = parse_sse(f"event: {kind}\n{line}\n\n", done=False)[0]
                                seen.saw("sse", terminal["response"])
                            kind = ""
                if terminal is None:
                    raise ConnectionError("the stream ended without its terminal event")
                previous = terminal["response"]["id"]

    return loop


def ws_client(ws_url: str, seen: Recorder) -> Callable[[], None]:
    def loop() -> None:
        previous = None
        with WS(ws_url, api_key="replica-key") as ws:
            for turn in range(10_000):
                response = final(ws.turn(**_body(previous, turn)))
                seen.saw("ws", response)
                previous = response["id"]

    return loop


@pytest.mark.parametrize("kind", STORES)
def test_responses_seen_to_end_survive_sigkill(tmp_path: Path, kind: str) -> None:
    with shared_store(kind, tmp_path) as store:
        settings = {**store, **PACE}
        seen = _load_until_killed(ServerProcess(tmp_path, **settings).wait_ready())
        _assert_readable(ServerProcess(tmp_path, **settings), seen)


def test_redis_with_aof_survives_its_own_sigkill(tmp_path: Path) -> None:
    """docs/stores.md: with `appendonly yes` and `appendfsync always`, Redis itself may be killed too. A private
    redis-server (the machine's shared one keeps nothing on disk) is SIGKILLed first, then hotloop; both restart."""
    port, aof = free_port(), tmp_path / "redis"
    aof.mkdir()
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(aof), "--save", ""]
    command += ["--appendonly", "yes", "--appendfsync", "always"]

    def start_redis() -> subprocess.Popen[bytes]:
        redis = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout.strip() != b"PONG":
            assert redis.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        return redis

    redis = start_redis()
    settings: dict[str, Any] = {"store_url": f"redis://127.0.0.1:{port}/0?prefix=aof:", **PACE}
    try:
        seen = _load_until_killed(ServerProcess(tmp_path, **settings).wait_ready(), kill_first=redis.kill)
        redis.wait(10)
        redis = start_redis()  # replays its append-only file
        _assert_readable(ServerProcess(tmp_path, **settings), seen)
    finally:
        redis.kill()
        redis.wait(10)


def _assert_readable(server: ServerProcess, seen: dict[str, list[Any]]) -> None:
    with server as restarted:
        missing = []
        for response_id, output in seen.items():
            reply = get_response(restarted.base_url, response_id)
            if reply.status_code != 200:
                missing.append(response_id)
                continue
            stored = reply.json()
            assert stored["status"] == "completed" and stored["output"] == output, response_id
        assert not missing, f"{len(missing)} of {len(seen)} responses seen to end are gone: {missing[:5]}"


def _load_until_killed(server: ServerProcess, kill_first: Callable[[], None] | None = None) -> dict[str, list[Any]]:
    """Clients of every transport on threads until each has seen SEEN_BEFORE_KILL responses end, then SIGKILL
    (after `kill_first`, e.g. the store's own process); the outputs the clients saw, by response id."""
    seen = Recorder()
    loops = {"http": http_client(server.base_url, seen), "sse": sse_client(server.base_url, seen)}
    loops["ws"] = ws_client(server.ws_url, seen)
    threads = [
        threading.Thread(target=seen.run, args=(transport, loop), daemon=True)
        for transport, loop in loops.items()
        for _ in range(CLIENTS_PER_TRANSPORT)
    ]
    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while any(seen.count(transport) < SEEN_BEFORE_KILL for transport in loops):
            assert not seen.failures, seen.failures
            assert time.monotonic() < deadline, seen.by_transport
            time.sleep(0.01)
        seen.killed.set()
        if kill_first is not None:
            kill_first()
        server.process.kill()  # SIGKILL, with responses of every transport in flight
    finally:
        server.kill()
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive()
    assert not seen.failures, seen.failures
    with seen.lock:
        return dict(seen.outputs)
