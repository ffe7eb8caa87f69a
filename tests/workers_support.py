"""`hotloop serve --workers N` in tests: connections and WebSockets on a chosen worker (the kernel picks which
worker accepts; these open until the wanted one has)."""

from __future__ import annotations

import contextlib
import http.client
import json
import time
from typing import Any

import psutil

from process_support import ServerProcess
from replica_support import KEY, SIM
from wsutil import WS


class Conn:
    """One keep-alive HTTP connection whose client port tells which worker accepted it."""

    def __init__(self, port: int, key: str = KEY) -> None:
        self.headers = {"Authorization": f"Bearer {key}", "content-type": "application/json"}
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.http.connect()
        assert self.http.sock is not None
        self.local_port: int = self.http.sock.getsockname()[1]

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        payload = json.dumps(body) if body is not None else None
        self.http.request(method, f"/v1{path}", body=payload, headers=self.headers)
        reply = self.http.getresponse()
        return reply.status, json.loads(reply.read())

    def create(self, **body: Any) -> dict[str, Any]:
        status, response = self.request("POST", "/responses", {"model": SIM, **body})
        assert status == 200, response
        return response


def workers_of(supervisor: ServerProcess) -> list[psutil.Process]:
    return psutil.Process(supervisor.process.pid).children()


def live_workers(supervisor: ServerProcess) -> set[int]:
    """The pids of the supervisor's workers that are running: a killed one is neither a zombie nor one reaped
    between the listing and the look at it."""
    alive = set()
    for worker in workers_of(supervisor):
        with contextlib.suppress(psutil.NoSuchProcess):
            if worker.status() != psutil.STATUS_ZOMBIE:
                alive.add(worker.pid)
    return alive


def owner_of(workers: list[psutil.Process], server_port: int, client_port: int) -> int:
    """The pid of the worker holding the server side of the connection from `client_port`."""
    for _ in range(100):
        for worker in workers:
            for conn in worker.net_connections(kind="tcp"):
                if conn.laddr and conn.raddr and conn.laddr.port == server_port and conn.raddr.port == client_port:
                    return worker.pid
        time.sleep(0.02)
    raise AssertionError(f"no worker holds the connection from port {client_port}")


def one_connection_per_worker(server: ServerProcess, workers: list[psutil.Process], key: str = KEY) -> dict[int, Conn]:
    """Open connections until every worker has accepted one (the kernel picks; 200 tries make a miss negligible)."""
    found: dict[int, Conn] = {}
    for _ in range(200):
        conn = Conn(server.port, key)
        conn.request("GET", "/models")  # served, so established on a worker
        pid = owner_of(workers, server.port, conn.local_port)
        if pid in found:
            conn.http.close()
        else:
            found[pid] = conn
        if len(found) == len(workers):
            return found
    raise AssertionError(f"only workers {sorted(found)} of {[w.pid for w in workers]} answered")


def ws_on_worker(server: ServerProcess, workers: list[psutil.Process], wanted: int, key: str = KEY) -> WS:
    """A WebSocket that the worker `wanted` accepted (the kernel picks; 200 tries make a miss negligible)."""
    for _ in range(200):
        ws = WS(server.ws_url, api_key=key)
        local_port = ws.conn.socket.getsockname()[1]
        if owner_of(workers, server.port, local_port) == wanted:
            return ws
        ws.close()
    raise AssertionError(f"worker {wanted} accepted none of 200 WebSockets")
