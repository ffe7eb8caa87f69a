"""One server to its operator: under `hotloop serve --workers N` every scrape of /metrics reports every worker's
counts (a killed worker's included), and the per-key limits hold for the server as a whole."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus

from hotloop.transports.workers import ingestion_shares
from metrics_support import Scrape
from process_support import SIM, ServerProcess, eventually
from workers_support import live_workers, one_connection_per_worker, owner_of, workers_of, ws_on_worker
from wsutil import WS, final


def scrape(server: ServerProcess) -> Scrape:
    """One /metrics on a fresh connection (so on whichever worker the kernel gives it)."""
    reply = httpx.get(f"http://127.0.0.1:{server.port}/metrics", headers={"connection": "close"}, timeout=10)
    assert reply.status_code == 200
    return Scrape(reply.text)


def console(server: ServerProcess) -> dict[str, Any]:
    reply = httpx.get(f"{server.base_url}/console/state", headers={"connection": "close"}, timeout=10)
    assert reply.status_code == 200
    state: dict[str, Any] = reply.json()
    return state


def responses(samples: Scrape, transport: str) -> float:
    return samples.total("hotloop_responses_total", transport=transport)


def replaced(server: ServerProcess, victim: int) -> bool:
    alive = live_workers(server)
    return len(alive) == 2 and victim not in alive


def test_every_scrape_counts_every_worker_and_a_killed_one_stays_counted(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, workers=2) as server:
        workers = workers_of(server)
        conns = one_connection_per_worker(server, workers)
        for conn in conns.values():  # both workers serve some of them
            for n in range(3):
                conn.create(input=f"kept-alive {n}")
        for n in range(6):  # and fresh connections wherever the kernel puts them
            reply = httpx.post(f"{server.base_url}/responses", json={"model": SIM, "input": f"fresh {n}"}, timeout=30)
            assert reply.status_code == 200, reply.text
        http_turns = 12
        victim = next(iter(conns))
        with ws_on_worker(server, workers, victim) as ws:
            previous = None
            for n in range(4):
                done = final(ws.turn(model=SIM, input=f"turn {n}", previous_response_id=previous))
                previous = done["id"]
            open_now = [scrape(server) for _ in range(6)]
        ws_turns = 4
        assert [responses(s, "http") for s in open_now] == [http_turns] * 6
        assert [responses(s, "websocket") for s in open_now] == [ws_turns] * 6
        assert [s.total("hotloop_active_connections", transport="websocket") for s in open_now] == [1] * 6
        consoles = [console(server) for _ in range(6)]  # the console's numbers are the server's too
        assert [state["responses"]["total"] for state in consoles] == [http_turns + ws_turns] * 6

        # The scrape-time readings: the victim's connection cache served three continuations; every scrape
        # shows them within a second (mirror.py), the other worker's too.
        def hits(samples: Scrape) -> float:
            return samples.total("hotloop_cache_lookups_total", cache="connection", result="hit")

        assert eventually(lambda: all(hits(scrape(server)) == ws_turns - 1 for _ in range(4)), timeout=10)

        os.kill(victim, signal.SIGKILL)
        assert eventually(lambda: replaced(server, victim), timeout=60)
        after = [scrape(server) for _ in range(6)]
        assert [responses(s, "http") for s in after] == [http_turns] * 6
        assert [responses(s, "websocket") for s in after] == [ws_turns] * 6
        assert [hits(s) for s in after] == [ws_turns - 1] * 6
        assert [s.total("hotloop_active_connections", transport="websocket") for s in after] == [0] * 6
        reply = httpx.post(f"{server.base_url}/responses", json={"model": SIM, "input": "one more"}, timeout=30)
        assert reply.status_code == 200
        assert [responses(scrape(server), "http") for _ in range(4)] == [http_turns + 1] * 4
        assert scrape(server).total("hotloop_stage_seconds_count", stage="generate") == http_turns + 1 + ws_turns


KEYS = "key-a,key-b"


def create_as(server: ServerProcess, key: str, text: str = "x") -> httpx.Response:
    """One create with `key`, on a fresh connection."""
    body = {"model": SIM, "input": text}
    return httpx.post(f"{server.base_url}/responses", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def test_a_key_gets_its_requests_a_minute_from_the_server_not_from_each_worker(tmp_path: Path) -> None:
    limit = 8
    with ServerProcess(tmp_path, workers=2, api_keys=KEYS, rate_limit_rpm=limit) as server:
        conns = one_connection_per_worker(server, workers_of(server), key="key-a")
        outcomes: Counter[int] = Counter()
        lock = threading.Lock()

        def on_conn(conn_index: int) -> None:
            conn = list(conns.values())[conn_index]
            for n in range(limit):  # each worker alone would take all of these
                status, _ = conn.request("POST", "/responses", {"model": SIM, "input": f"burst {n}"})
                with lock:
                    outcomes[status] += 1

        def fresh() -> None:
            reply = create_as(server, "key-a", "fresh")
            with lock:
                outcomes[reply.status_code] += 1

        threads = [threading.Thread(target=on_conn, args=(i,)) for i in range(len(conns))]
        threads += [threading.Thread(target=fresh) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert outcomes == {200: limit, 429: 2 * limit + 6 - limit}
        assert create_as(server, "key-b").status_code == 200  # the limit is each key's


def _open_websockets(server: ServerProcess) -> float:
    return scrape(server).total("hotloop_active_connections", transport="websocket")


def test_the_connection_caps_hold_over_every_worker_and_a_dead_one_gives_its_slots_back(tmp_path: Path) -> None:
    settings = {"api_keys": KEYS, "max_connections_per_key": 3, "max_connections": 4}
    with ServerProcess(tmp_path, workers=2, **settings) as server:
        workers = workers_of(server)
        first, second = workers[0].pid, workers[1].pid
        held = [ws_on_worker(server, workers, first, key="key-a")]
        held.append(ws_on_worker(server, workers, second, key="key-a"))
        assert eventually(lambda: _open_websockets(server) == 2)  # the tries on the wrong worker are closed
        held.append(WS(server.ws_url, api_key="key-a"))
        with pytest.raises(InvalidStatus) as refused:
            WS(server.ws_url, api_key="key-a")
        assert refused.value.response.status_code == 429
        assert b"API key has reached its limit of 3" in refused.value.response.body
        held.append(WS(server.ws_url, api_key="key-b"))  # the fourth of the server's four
        with pytest.raises(InvalidStatus) as full:
            WS(server.ws_url, api_key="key-b")
        assert b"server has reached its limit of 4" in full.value.response.body

        on_first = [owner_of(workers, server.port, ws.conn.socket.getsockname()[1]) == first for ws in held]
        lost_a = sum(on_first[:3])  # key-a's sockets on the worker about to die (its first one at least)

        os.kill(first, signal.SIGKILL)  # its sockets die with it: the supervisor gives their slots back
        assert eventually(lambda: replaced(server, first), timeout=60)
        assert eventually(lambda: _open_websockets(server) == 4 - sum(on_first), timeout=10)
        fresh = [WS(server.ws_url, api_key="key-a") for _ in range(lost_a)]
        with pytest.raises(InvalidStatus) as again:
            WS(server.ws_url, api_key="key-a")
        # Full again: the server's four if key-b's socket lived, else key-a's three (the server's is checked first)
        limit = b"API key has reached its limit of 3" if on_first[3] else b"server has reached its limit of 4"
        assert limit in again.value.response.body
        for ws in [*held, *fresh]:
            with contextlib.suppress(Exception):  # the killed worker's sockets are already gone
                ws.close()


def test_a_key_s_tokens_a_minute_are_the_server_s(tmp_path: Path) -> None:
    """Tokens spent through one worker count against the key on the other (rate_limit_tpm is the server's)."""
    with ServerProcess(tmp_path, workers=2, api_keys=KEYS, rate_limit_tpm=120) as server:  # 2 tokens a second
        (_, one), (_, two) = one_connection_per_worker(server, workers_of(server), key="key-a").items()
        statuses = []
        while not statuses or statuses[-1] == 200:  # the key's minute of tokens, all through the first worker
            status, _ = one.request("POST", "/responses", {"model": SIM, "input": "spend " * 50})
            statuses.append(status)
        assert statuses[-1] == 429 and 1 <= len(statuses) - 1 <= 3  # ~100 tokens a response
        status, refused = two.request("POST", "/responses", {"model": SIM, "input": "and now?"})
        assert status == 429 and refused["error"]["type"] == "tokens", refused
        assert create_as(server, "key-b").status_code == 200  # the window is the key's


def test_the_replica_s_ingestion_processes_are_shared_out_over_its_workers() -> None:
    """`file_search_workers` is the replica's: each server worker runs its share of them."""
    assert ingestion_shares(2, 2) == [1, 1]
    assert ingestion_shares(3, 2) == [2, 1]
    assert ingestion_shares(1, 4) == [1, 0, 0, 0]
    assert ingestion_shares(0, 3) == [0, 0, 0]
