"""Several real `hotloop serve` processes sharing one store: chains cross replicas over HTTP and WebSocket, and
`hotloop serve --workers N` runs N such processes behind one port."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from hotloop.sealing import load_secret
from process_support import ServerProcess
from replica_support import HEADERS, KEY, SIM, STORES, get_response, http_turn, shared_store, ws_turn
from workers_support import live_workers, one_connection_per_worker, workers_of, ws_on_worker
from wsutil import TERMINAL, WEATHER, WS, final


@pytest.mark.parametrize("kind", STORES)
def test_chain_crosses_replicas_over_http_and_websocket(tmp_path: Path, kind: str) -> None:
    with shared_store(kind, tmp_path) as settings:
        replicas = [ServerProcess(tmp_path, **settings) for _ in range(2)]  # starting together on one store
        with replicas[0] as a, replicas[1] as b:
            _cross(a, b)
            _deleted_everywhere(a, b)


def _cross(a: ServerProcess, b: ServerProcess) -> None:
    # HTTP: created on A, continued on B, read back on both
    first = http_turn(a.base_url, input="first on A", store=True)
    second = http_turn(b.base_url, input="second on B", previous_response_id=first["id"], store=True)
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"]
    third = http_turn(a.base_url, input="third on A", previous_response_id=second["id"], store=True)
    assert third["usage"]["input_tokens"] > second["usage"]["input_tokens"]
    for server in (a, b):
        reply = get_response(server.base_url, first["id"])
        assert reply.status_code == 200 and reply.json()["output"] == first["output"]

    # WebSocket: two stored turns on A (a tool call answered), then a reconnect to B continues the chain
    with WS(a.ws_url, api_key=KEY) as ws:
        one = ws_turn(ws, input="weather?", tools=[WEATHER], store=True)
        call = next(item for item in one["output"] if item["type"] == "function_call")
        answer = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
        two = ws_turn(ws, input=[answer], tools=[WEATHER], previous_response_id=one["id"], store=True)
    with WS(b.ws_url, api_key=KEY) as ws:
        three = ws_turn(ws, input="and tomorrow?", tools=[WEATHER], previous_response_id=two["id"], store=True)
    assert three["usage"]["input_tokens"] > two["usage"]["input_tokens"]
    assert [item["type"] for item in _input_items(b.base_url, three["id"])] == ["message"]  # its own input only
    assert get_response(a.base_url, three["id"]).json()["output"] == three["output"]

    # both started at once on a fresh data_dir, yet they share one secret: A's sealed blob opens on B
    compact = httpx.post(f"{a.base_url}/responses/compact", json={"model": SIM, "input": "x"}, headers=HEADERS)
    assert compact.status_code == 200, compact.text
    http_turn(b.base_url, input=[*compact.json()["output"], {"role": "user", "content": "go on"}])


def _deleted_everywhere(a: ServerProcess, b: ServerProcess) -> None:
    """A DELETE on B reaches A's chain cache (HTTP) and A's open WebSocket's cache."""
    head = http_turn(a.base_url, input="kept in A's memory", store=True)
    head = http_turn(a.base_url, input="still in memory", previous_response_id=head["id"], store=True)
    with WS(a.ws_url, api_key=KEY) as ws:
        live = ws_turn(ws, input="in this connection's cache", previous_response_id=head["id"], store=True)
        for doomed in (head, live):
            reply = httpx.delete(f"{b.base_url}/responses/{doomed['id']}", headers=HEADERS, timeout=30)
            assert reply.status_code == 200 and reply.json()["deleted"] is True, reply.text
        assert get_response(a.base_url, live["id"]).status_code == 404

        def http_refused() -> bool:
            body = {"model": SIM, "input": "go on", "previous_response_id": head["id"]}
            reply = httpx.post(f"{a.base_url}/responses", json=body, headers=HEADERS, timeout=30)
            assert reply.status_code in (200, 400), reply.text
            return reply.status_code == 400 and reply.json()["error"]["code"] == "previous_response_not_found"

        def ws_refused() -> bool:
            ws.create(model=SIM, input="go on", previous_response_id=live["id"], store=True)
            frame = _first_outcome(ws)
            return frame["type"] == "error" and frame["error"]["code"] == "previous_response_not_found"

        _eventually(http_refused)
        _eventually(ws_refused)


def _first_outcome(ws: WS) -> dict[str, Any]:
    """The terminal event or error frame that answers one create."""
    while True:
        frame = ws.recv(10)
        if frame["type"] == "error" or frame["type"] in TERMINAL:
            return frame


def _eventually(check: Callable[[], bool], timeout: float = 10) -> None:
    """Deletions reach other replicas within milliseconds (Redis, PostgreSQL) or a poll interval (SQLite)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the deletion never reached the other replica"
        time.sleep(0.1)


def _input_items(base_url: str, response_id: str) -> list[dict[str, Any]]:
    reply = httpx.get(f"{base_url}/responses/{response_id}/input_items", headers=HEADERS, timeout=30)
    assert reply.status_code == 200, reply.text
    data: list[dict[str, Any]] = reply.json()["data"]
    return data


def _secret_of(data_dir: str) -> bytes:
    return load_secret(Path(data_dir))


def test_replicas_starting_together_create_one_secret(tmp_path: Path) -> None:
    """Processes creating the data_dir secret at the same moment all end up with the same key."""
    with ProcessPoolExecutor(8, mp_context=multiprocessing.get_context("fork")) as pool:
        for attempt in range(30):
            fresh = tmp_path / str(attempt)
            fresh.mkdir()
            keys = set(pool.map(_secret_of, [str(fresh)] * 8))
            assert len(keys) == 1, attempt
            assert [path.name for path in fresh.iterdir()] == ["secret.key"]  # no candidate left behind


def test_replicas_handed_one_secret_key_file_open_each_others_items(tmp_path: Path) -> None:
    """Replicas with their own data directories, each handed the same `secret_key_file` (as a Kubernetes Secret is
    mounted): an item sealed by one opens on the other, and neither makes a secret.key of its own."""
    secret = tmp_path / "secret" / "secret.key"
    secret.parent.mkdir()
    secret.write_bytes(os.urandom(32))
    with (
        ServerProcess(tmp_path / "a", secret_key_file=secret) as one,
        ServerProcess(tmp_path / "b", secret_key_file=secret) as two,
    ):
        body = {"model": SIM, "input": "remember this"}
        compacted = httpx.post(f"{one.base_url}/responses/compact", json=body, headers=HEADERS, timeout=30)
        assert compacted.status_code == 200, compacted.text
        follow = {"model": SIM, "input": [*compacted.json()["output"], {"role": "user", "content": "go on"}]}
        reply = httpx.post(f"{two.base_url}/responses", json=follow, headers=HEADERS, timeout=30)
        assert reply.status_code == 200 and reply.json()["status"] == "completed", reply.text
    assert not (tmp_path / "a" / "secret.key").exists() and not (tmp_path / "b" / "secret.key").exists()


# --- hotloop serve --workers N ------------------------------------------------------------------------------------


def test_workers_share_the_port_the_store_and_the_secret(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, workers=2) as server:
        workers = workers_of(server)
        assert len(workers) == 2
        (victim, one), (_, two) = one_connection_per_worker(server, workers).items()
        # a chain crosses the workers both ways
        first = one.create(input="started on one worker", store=True)
        second = two.create(input="continued on the other", previous_response_id=first["id"], store=True)
        third = one.create(input="and back", previous_response_id=second["id"], store=True)
        assert first["usage"]["input_tokens"] < second["usage"]["input_tokens"] < third["usage"]["input_tokens"]
        status, read = two.request("GET", f"/responses/{third['id']}")
        assert status == 200 and read["output"] == third["output"]
        # an encrypted_content blob sealed by one worker opens on the other: they share the data_dir secret
        status, compacted = one.request("POST", "/responses/compact", {"model": SIM, "input": "remember this"})
        assert status == 200, compacted
        follow = two.create(input=[*compacted["output"], {"role": "user", "content": "go on"}])
        assert follow["status"] == "completed"

        # a worker that dies is replaced; the others keep serving
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while True:
            pids = live_workers(server)
            if len(pids) == 2 and victim not in pids:
                break
            assert time.monotonic() < deadline, pids
            time.sleep(0.1)
        assert two.create(input="still here", previous_response_id=third["id"], store=True)["status"] == "completed"

        # SIGTERM to the supervisor stops every worker cleanly: a response in flight still ends normally
        workers = workers_of(server)
        slow = {"sim_ttft_ms": "0", "sim_tps": "40", "sim_output_tokens": "40"}  # about a second of output
        two.http.request(
            "POST",
            "/v1/responses",
            body=json.dumps({"model": SIM, "input": "slow", "stream": True, "metadata": slow}),
            headers={**HEADERS, "content-type": "application/json"},
        )
        reply = two.http.getresponse()
        assert reply.status == 200
        assert reply.readline().startswith(b"event: response.created")  # it is running
        server.signal(signal.SIGTERM)
        assert b"event: response.completed" in reply.read()
        assert server.wait(timeout=60) == 0, server.output()
        assert not any(worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE for worker in workers)


def test_workers_die_with_a_killed_supervisor(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, workers=2) as server:
        workers = workers_of(server)
        assert len(workers) == 2
        server.kill()  # SIGKILL: no chance to stop them itself
        _gone, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive, alive


def test_workers_that_cannot_start_stop_the_supervisor(tmp_path: Path) -> None:
    (tmp_path / "hotloop.db").mkdir()  # the store cannot open: every worker fails the same way at start-up
    server = ServerProcess(tmp_path, workers=2)
    assert server.wait(timeout=60) == 1
    assert "failed to start" in server.output()


def test_workers_on_a_busy_port_fail_at_once(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = ServerProcess(tmp_path, port=taken.getsockname()[1], workers=2)
        assert server.wait(timeout=60) == 1
    assert "in use" in server.output()


def test_the_default_is_one_worker_per_core_sharing_chains(tmp_path: Path) -> None:
    """`hotloop serve` with no `workers` setting runs one process per core; a WebSocket chain stored on one worker
    continues over a new WebSocket on another (the reconnect of a client whose connection dropped), and an HTTP
    chain crosses them too."""
    with ServerProcess(tmp_path, workers=None) as server:
        workers = workers_of(server)
        assert len(workers) == len(os.sched_getaffinity(0))
        if len(workers) < 2:
            return  # a one-core machine: nothing to cross (CI has two)
        first, second = workers[0].pid, workers[1].pid
        with ws_on_worker(server, workers, first) as ws:
            started = final(ws.turn(model=SIM, input="remember the word 'kestrel'", store=True))
        with ws_on_worker(server, workers, second) as ws:
            continued = final(ws.turn(model=SIM, input="go on", previous_response_id=started["id"], store=True))
        assert continued["status"] == "completed"
        assert continued["usage"]["input_tokens"] > started["usage"]["input_tokens"]
        (_, one), (_, two) = one_connection_per_worker(server, workers).items()
        third = one.create(input="and over HTTP", previous_response_id=continued["id"], store=True)
        status, read = two.request("GET", f"/responses/{third['id']}")
        assert status == 200 and read["previous_response_id"] == continued["id"]
