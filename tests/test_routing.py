"""Replica routing (backends/upstream/routing.py) with real `hotloop sim-engine` processes behind one `tokens` upstream.

A chain sticks to the replica that served its previous turn (its prefix is cached there); new chains go to the
least-loaded replica; when the sticky replica dies the turn fails over to a healthy one and the chain sticks there
from then on; every decision and the replicas' health show in /metrics. The router's rules are also driven
directly (saturation, cooldown, the bounded memory).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from conftest import RunningServer, start_server
from hotloop.backends.upstream.routing import Router
from hotloop.config import Upstream
from metrics_support import Scrape, scrape
from simengine_support import SimEngineProcess

ROUTES = "hotloop_upstream_routes_total"


@pytest.fixture()
def engines() -> Iterator[list[SimEngineProcess]]:
    started = [SimEngineProcess(tps=5000, prefill_us_per_token=1, tool_calls=0) for _ in range(3)]
    yield [engine.wait_ready() for engine in started]
    for engine in started:
        engine.stop()


def _hotloop(tmp: Any, engines: list[SimEngineProcess], backend: Any = "tokens") -> RunningServer:
    urls = [engine.base_url for engine in engines]
    upstream = Upstream(backend=backend, urls=urls, retries=2, replica_failures=1)
    return start_server(tmp, models=["r"], default_model="r", upstreams={"r": upstream})


def _turn(http: httpx.Client, previous: str | None, text: str) -> dict[str, Any]:
    body = {"input": text, "instructions": "Be brief.", "previous_response_id": previous}
    reply = http.post("/responses", json=body)
    assert reply.status_code == 200 and reply.json()["status"] == "completed", reply.text
    response: dict[str, Any] = reply.json()
    return response


def _served(engines: list[SimEngineProcess]) -> list[int]:
    return [engine.stats()["requests"] for engine in engines]


def _routes(metrics: Scrape, engine: SimEngineProcess, decision: str) -> float:
    return metrics.value(ROUTES, model="r", replica=engine.base_url, decision=decision)


@pytest.mark.parametrize("backend", ["tokens", "openai-chat"])
def test_chains_stick_to_their_replica_and_fail_over_when_it_dies(
    engines: list[SimEngineProcess], tmp_path: Any, backend: str
) -> None:
    # openai-chat: the engine renders the chat itself; its prompt may differ from the previous one in the last
    # token or two (the generation prompt), so the cached prefix is the previous prompt but for those.
    slack = 0 if backend == "tokens" else 2
    hotloop = _hotloop(tmp_path, engines, backend)
    try:
        with hotloop.http() as http:
            chains: list[list[dict[str, Any]]] = []
            for chain in range(3):  # three new chains: one per idle replica (ties are taken in turn)
                chains.append([_turn(http, None, f"chain {chain}")])
            assert _served(engines) == [1, 1, 1]
            for turn in range(2):
                for chain in chains:
                    chain.append(_turn(http, chain[-1]["id"], f"turn {turn}"))
            assert _served(engines) == [3, 3, 3]  # every continuation went where its chain started
            for chain in chains:
                for before, after in itertools.pairwise(chain):
                    cached = after["usage"]["input_tokens_details"]["cached_tokens"]
                    assert cached >= before["usage"]["input_tokens"] - slack
            metrics = scrape(hotloop)
            assert [_routes(metrics, engine, "new") for engine in engines] == [1, 1, 1]
            assert [_routes(metrics, engine, "sticky") for engine in engines] == [2, 2, 2]

            # Which replica holds chain 0? Kill it; the next turn fails over, and the chain sticks there after.
            for engine in engines:
                engine.reset()
            chains[0].append(_turn(http, chains[0][-1]["id"], "again"))
            dead = next(engine for engine in engines if engine.stats()["requests"] == 1)
            alive = [engine for engine in engines if engine is not dead]
            dead.stop()
            moved = _turn(http, chains[0][-1]["id"], "after the crash")
            counts = [engine.stats()["requests"] for engine in alive]
            assert sorted(counts) == [0, 1]
            new_home = alive[counts.index(1)]
            after = _turn(http, moved["id"], "settled")
            assert new_home.stats()["requests"] == 2  # sticky to the new replica
            assert after["usage"]["input_tokens_details"]["cached_tokens"] >= moved["usage"]["input_tokens"] - slack
            metrics = scrape(hotloop)
            assert _routes(metrics, new_home, "fallback") == 1
            assert metrics.value("hotloop_upstream_replica_up", model="r", replica=dead.base_url) == 0
            assert metrics.value("hotloop_upstream_replica_up", model="r", replica=new_home.base_url) == 1
    finally:
        hotloop.stop()


def test_new_chains_go_to_the_least_loaded_replica(engines: list[SimEngineProcess], tmp_path: Any) -> None:
    two = engines[:2]
    hotloop = _hotloop(tmp_path, two)
    try:
        for engine in two:
            engine.script({"tps": 20, "output_tokens": 400})  # whichever gets a request generates for 20 s
        body = {"input": "long", "stream": True}
        with hotloop.http() as first, hotloop.http() as second, first.stream("POST", "/responses", json=body) as one:
            reading = _until_output(one)
            busy = [engine.stats()["active"] for engine in two]
            assert sorted(busy) == [0, 1]
            with second.stream("POST", "/responses", json=body) as other:
                also_reading = _until_output(other)
                # The second chain went to the idle replica, not to the one already generating.
                assert [engine.stats()["active"] for engine in two] == [1, 1]
                metrics = scrape(hotloop)
                in_flight = [
                    metrics.value("hotloop_upstream_replica_in_flight", model="r", replica=e.base_url) for e in two
                ]
                assert in_flight == [1, 1]
                del reading, also_reading
    finally:
        hotloop.stop()


def _until_output(response: httpx.Response) -> Iterator[str]:
    """Read up to the first output delta; the caller keeps the iterator (closing it would hang up)."""
    lines = response.iter_lines()
    for line in lines:
        if line.startswith("event: response.output_text.delta"):
            return lines
    raise AssertionError("no output")


# -- the rules, without sockets -------------------------------------------------------------------------------


class Clock:
    """The router's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_router_rules() -> None:
    clock = Clock()
    router = Router("m", ["a", "b", "c"], max_in_flight=2, failures=2, cooldown_s=5.0, remembered=2, clock=clock)
    first, decision = router.choose(None)
    assert decision == "new"
    router.succeeded(first, "r1")
    again, decision = router.choose("r1")
    assert (again, decision) == (first, "sticky")
    # Saturated (max_in_flight in flight): the chain goes elsewhere, to the least loaded.
    router.start(first)
    router.start(first)
    other, decision = router.choose("r1")
    assert other is not first and decision == "fallback"
    router.end(first)
    router.end(first)
    # Failures in a row take a replica down for the cooldown; then it is tried again; a success heals it.
    router.failed(first)
    assert router.choose("r1")[1] == "sticky"  # one failure is not enough
    router.failed(first)
    assert router.choose("r1")[1] == "fallback" and not router.readings()[first.index].up
    clock.now += 4.0
    assert router.choose("r1")[1] == "fallback"  # still cooling down
    clock.now += 1.0
    assert router.choose("r1") == (first, "sticky")
    router.succeeded(first, "r2")
    assert first.failures == 0 and router.readings()[first.index].up
    # A replica this request already failed on is not chosen again while others remain.
    replica, decision = router.choose("r2", frozenset({first.index}))
    assert replica is not first and decision == "fallback"
    # All down: the one back up soonest is still tried (never no replica at all).
    for replica in router.replicas:
        clock.now += 1.0  # each one down a second after the last
        router.failed(replica)
        router.failed(replica)
    assert router.choose(None)[0] is min(router.replicas, key=lambda r: r.down_until)
    # The memory of served responses is bounded (LRU).
    router.succeeded(router.replicas[1], "r3")
    router.succeeded(router.replicas[2], "r4")
    assert router.choose("r1")[1] != "sticky" and router.choose("r4") == (router.replicas[2], "sticky")
    counts = {decision: sum(r.routes[decision] for r in router.replicas) for decision in ("sticky", "fallback")}
    assert counts["sticky"] >= 4 and counts["fallback"] >= 3
