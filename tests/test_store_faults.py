"""Store faults and replicas, with real `hotloop serve` processes: a store cut off behind a TCP proxy the test
controls (the machine's Redis and PostgreSQL keep running), and a DELETE seen by every replica (docs/stores.md)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from http_support import error_of, parse_sse, usage_record
from process_support import ServerProcess
from store_support import drop_namespace, namespace, store_url, upstream
from wsutil import WS, final


class Proxy:
    """A TCP relay to a real server on a fixed local port; `cut()` drops every connection and refuses new ones
    (as a dead host would, but at once; `counting`: each is accepted and reset at once, and counted for
    `wait_refused`), `restore()` listens again."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._cut = False
        self._refused = threading.Condition()
        self.refused = 0  # connections reset while cut
        self.restore()

    def restore(self) -> None:
        if self._listener is not None:  # cut, counting: the listener resetting connections goes
            self._close_listener()
        self._cut = False
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener, False), daemon=True).start()

    def cut(self, counting: bool = False) -> None:
        self._close_listener()
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()
        self._cut = True
        if not counting:
            return
        with self._refused:
            self.refused = 0
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener, True), daemon=True).start()

    def wait_refused(self, count: int = 1, timeout: float = 10.0) -> None:
        """Until `count` connections were reset since the cut: the client noticed it and tried again."""
        with self._refused:
            assert self._refused.wait_for(lambda: self.refused >= count, timeout), "no connection tried while cut"

    def _close_listener(self) -> None:
        assert self._listener is not None
        # shutdown() wakes the thread blocked in accept(); close() alone would leave it accepting on Linux.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._listener = None

    def _reset(self, client: socket.socket) -> None:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a RST
        client.close()
        with self._refused:
            self.refused += 1
            self._refused.notify_all()

    def _accept(self, listener: socket.socket, cut: bool) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener closed
            if cut:
                self._reset(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._open.update((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        if not self._cut:
            self.cut()
        if self._listener is not None:
            self._close_listener()


@pytest.fixture
def cleanup() -> Iterator[list[tuple[str, str]]]:
    """(kind, namespace) pairs to drop after the test."""
    made: list[tuple[str, str]] = []
    yield made
    for kind, ns in made:
        asyncio.run(drop_namespace(kind, ns))


def create(http: httpx.Client, **body: Any) -> httpx.Response:
    return http.post("/responses", json={"model": "hotloop-sim", "input": "hi", **body})


@pytest.mark.parametrize("kind", ["redis", "postgresql"])
def test_store_unreachable(kind: str, tmp_path: Path, cleanup: list[tuple[str, str]]) -> None:
    ns = namespace()
    cleanup.append((kind, ns))
    proxy = Proxy(upstream(kind))
    url = store_url(kind, ns, tmp_path, host_port=("127.0.0.1", proxy.port))
    try:
        with (
            ServerProcess(tmp_path, store_url=url, ledger_flush_ms=20) as server,
            httpx.Client(base_url=server.base_url, timeout=30) as http,
            WS(server.ws_url) as ws,
        ):
            stored = create(http)
            assert stored.status_code == 200, stored.text
            stored_id = stored.json()["id"]
            ws_prev = final(ws.turn(model="hotloop-sim", input="start", store=False))["id"]
            usage_record(http, ws_prev)  # the ledger is idle: the first store call after the cut is the save below
            root = server.base_url.removesuffix("/v1")
            assert httpx.get(f"{root}/readyz").json() == {"status": "ready"}

            proxy.cut()
            # The first store:true response meets the dead store when it is saved: failed in-band (the stream
            # has started), nothing half-written.
            events = parse_sse(create(http, stream=True).text)
            failed_id = events[0]["response"]["id"]
            assert events[-1]["type"] == "response.failed"
            assert events[-1]["response"]["error"]["code"] == "store_unavailable"
            assert [e["error"]["code"] for e in events if e["type"] == "error"] == ["store_unavailable"]
            # Readiness asks the store itself (a load balancer takes the replica out); liveness does not.
            ready = httpx.get(f"{root}/readyz", timeout=10)
            assert (ready.status_code, ready.json()) == (503, {"status": "store_unavailable"})
            assert httpx.get(f"{root}/healthz").status_code == 200
            # Now the store is known down: store:true creates are refused before they generate, streamed or not.
            error_of(create(http), 503, "store_unavailable", None)
            error_of(create(http, stream=True), 503, "store_unavailable", None)
            error_of(create(http, background=True), 503, "store_unavailable", None)
            error_of(http.get(f"/responses/{stored_id}"), 503, "store_unavailable", None)
            error_of(http.delete(f"/responses/{stored_id}"), 503, "store_unavailable", None)
            error_of(create(http, previous_response_id="resp_unknown"), 503, "store_unavailable", None)
            error_of(http.get("/usage"), 503, "store_unavailable", None)
            # Over WebSocket too: a store:true create is refused before it generates, as an error event on its lane.
            frame = ws.error(model="hotloop-sim", input="stored?", store=True, stream_id="stored")
            assert (frame["status"], frame["error"]["code"], frame["stream_id"]) == (503, "store_unavailable", "stored")
            # WebSocket store:false: the chain goes on from the connection's cache.
            ws_ids = []
            for n in range(3):
                response = final(
                    ws.turn(model="hotloop-sim", input=f"turn {n}", store=False, previous_response_id=ws_prev)
                )
                assert response["status"] == "completed", response
                ws_prev = response["id"]
                ws_ids.append(ws_prev)
            assert server.process.poll() is None

            proxy.restore()
            deadline = time.monotonic() + 15
            while httpx.get(f"{root}/readyz", timeout=10).status_code != 200:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            while (reply := create(http)).status_code != 200:
                assert time.monotonic() < deadline, reply.text
                time.sleep(0.1)
            assert http.get(f"/responses/{stored_id}").json()["status"] == "completed"
            error_of(http.get(f"/responses/{failed_id}"), 404, "response_not_found", "response_id")
            continued = create(http, previous_response_id=stored_id)
            assert continued.status_code == 200, continued.text
            # The ledger kept the outage's records and wrote them once the store was back.
            for response_id in ws_ids:
                assert usage_record(http, response_id, timeout=20)["transport"] == "websocket"
    finally:
        proxy.close()


def test_delete_reaches_every_replica(tmp_path: Path, cleanup: list[tuple[str, str]]) -> None:
    """Replica B has the chain in memory (it served it); a DELETE on A makes B answer previous_response_not_found.

    Two processes cost seconds to start, so this runs on Redis only; every store's deletion feed is checked in
    test_store_contract (test_deletions_reach_other_replicas), and the wiring to the caches is the same."""
    kind = "redis"
    ns = namespace()
    cleanup.append((kind, ns))
    url = store_url(kind, ns, tmp_path)
    replicas = ServerProcess(tmp_path / "a", store_url=url), ServerProcess(tmp_path / "b", store_url=url)
    with (
        replicas[0] as a,
        replicas[1] as b,
        httpx.Client(base_url=a.base_url, timeout=30) as http_a,
        httpx.Client(base_url=b.base_url, timeout=30) as http_b,
    ):
        made = create(http_b)
        assert made.status_code == 200, made.text
        response_id = made.json()["id"]
        assert http_a.get(f"/responses/{response_id}").status_code == 200  # one store behind both
        assert create(http_b, previous_response_id=response_id).status_code == 200  # B continues from memory
        assert http_a.delete(f"/responses/{response_id}").status_code == 200
        deadline = time.monotonic() + 5
        while (reply := create(http_b, previous_response_id=response_id)).status_code == 200:
            assert time.monotonic() < deadline, "replica B still continues a deleted response"
            time.sleep(0.05)
        error_of(reply, 400, "previous_response_not_found", "previous_response_id")
        error_of(http_b.get(f"/responses/{response_id}"), 404, "response_not_found", "response_id")


def test_delete_missed_during_a_feed_gap(tmp_path: Path, cleanup: list[tuple[str, str]]) -> None:
    """Replica B's deletion feed is down while A deletes responses B has in memory (its chain cache, a WebSocket
    lane): once B's feed is back, B has dropped its stored chains and answers previous_response_not_found (it asks
    the store) instead of continuing them; a store:false lane, which the store could not give back, goes on."""
    kind = "redis"
    ns = namespace()
    cleanup.append((kind, ns))
    proxy = Proxy(upstream(kind))
    url_a, url_b = store_url(kind, ns, tmp_path), store_url(kind, ns, tmp_path, host_port=("127.0.0.1", proxy.port))
    replicas = ServerProcess(tmp_path / "a", store_url=url_a), ServerProcess(tmp_path / "b", store_url=url_b)
    try:
        with (
            replicas[0] as a,
            replicas[1] as b,
            httpx.Client(base_url=a.base_url, timeout=30) as http_a,
            httpx.Client(base_url=b.base_url, timeout=30) as http_b,
            WS(b.ws_url) as ws,
        ):
            made = create(http_b)
            assert made.status_code == 200, made.text
            response_id = made.json()["id"]
            assert create(http_b, previous_response_id=response_id).status_code == 200  # B continues from memory
            # Two lanes of one connection, each with its latest response in the connection's cache.
            ws_stored = final(ws.turn(model="hotloop-sim", input="stored", store=True, stream_id="stored"))["id"]
            ws_local = final(ws.turn(model="hotloop-sim", input="local", store=False, stream_id="local"))["id"]

            proxy.cut(counting=True)  # B's feed is down: it cannot hear the DELETEs below
            for doomed in (response_id, ws_stored):
                assert http_a.delete(f"/responses/{doomed}").status_code == 200
            proxy.wait_refused()  # B noticed and tried again while the proxy is still cut
            proxy.restore()

            deadline = time.monotonic() + 15  # B reconnects within its backoff (at most 5 s)
            while (reply := create(http_b, previous_response_id=response_id)).status_code == 200:
                assert time.monotonic() < deadline, "replica B still continues a response deleted during its gap"
                time.sleep(0.1)
            error_of(reply, 400, "previous_response_not_found", "previous_response_id")
            # The gap dropped the connection's stored lane with the chain cache (one step).
            refused = ws.error(
                model="hotloop-sim", input="go on", previous_response_id=ws_stored, store=True, stream_id="stored"
            )
            assert refused["error"]["code"] == "previous_response_not_found", refused
            local = ws.turn(
                model="hotloop-sim", input="go on", previous_response_id=ws_local, store=False, stream_id="local"
            )
            assert final(local)["status"] == "completed"
    finally:
        proxy.close()
