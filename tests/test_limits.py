"""Admission limits: per-key requests and tokens per minute (429 over HTTP and WebSocket), WebSocket connection
limits per server and per key (the upgrade gets 429)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from websockets.exceptions import InvalidStatus

from conftest import RunningServer, start_server, stored_counts
from hotloop.errors import RateLimited, StoreUnavailable
from hotloop.pipeline.state.limits import PRUNE_FLOOR, ConnectionSlots, RateLimiter
from http_support import error_of, usage_record
from metrics_support import scrape
from wsutil import WS, final

SIM = "hotloop-sim"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the limiter, driven with a clock of its own -------------------------------------------------------------------


@pytest.mark.fast
def test_requests_per_minute_refill_continuously() -> None:
    clock = Clock()
    limiter = RateLimiter(rpm=2, tpm=0, clock=clock)
    limiter.admit("a")
    limiter.admit("a")
    with pytest.raises(RateLimited) as info:
        limiter.admit("a")
    refused = info.value
    assert (refused.status, refused.type, refused.code) == (429, "requests", "rate_limit_exceeded")
    assert "try again in 30s" in refused.message
    assert refused.headers["retry-after"] == "30"
    assert refused.headers["x-ratelimit-limit-requests"] == "2"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert refused.headers["x-ratelimit-reset-requests"] == "1m0s"
    limiter.admit("b")  # another key has its own window
    clock.now += 29.0
    with pytest.raises(RateLimited) as info:
        limiter.admit("a")  # a refused request is not counted: the wait only shrinks
    assert "try again in 1s" in info.value.message
    clock.now += 1.0
    limiter.admit("a")
    clock.now += 3600
    for _ in range(2):  # a full bucket never holds more than a minute's allowance
        limiter.admit("a")
    with pytest.raises(RateLimited):
        limiter.admit("a")


@pytest.mark.fast
def test_tokens_are_charged_after_the_response() -> None:
    clock = Clock()
    limiter = RateLimiter(rpm=0, tpm=600, clock=clock)  # 10 tokens a second
    limiter.admit("a")
    limiter.charge("a", 800)  # one response may overshoot: the key then waits for the window to come back
    with pytest.raises(RateLimited) as info:
        limiter.admit("a")
    assert info.value.type == "tokens"
    assert "try again in 20.1s" in info.value.message
    assert info.value.headers["retry-after"] == "21"
    clock.now += 20.1
    limiter.admit("a")


@pytest.mark.fast
def test_idle_keys_are_forgotten() -> None:
    clock = Clock()
    limiter = RateLimiter(rpm=10, tpm=0, clock=clock)
    for key in range(PRUNE_FLOOR):
        limiter.admit(str(key))
    clock.now += 60  # every bucket is full again: nothing worth remembering
    limiter.admit("new")
    assert len(limiter._keys) == 1


@pytest.mark.fast
def test_no_limits_admit_everything() -> None:
    limiter = RateLimiter(rpm=0, tpm=0)
    for _ in range(1000):
        limiter.admit("a")
        limiter.charge("a", 10**9)
    assert not limiter._keys


@pytest.mark.fast
def test_connection_slots() -> None:
    slots = ConnectionSlots(total=3, per_key=2)
    slots.acquire("a")
    slots.acquire("a")
    with pytest.raises(RateLimited, match="API key"):
        slots.acquire("a")
    slots.acquire("b")
    with pytest.raises(RateLimited, match="server"):
        slots.acquire("c")
    slots.release("a")
    slots.acquire("c")
    assert (slots.open, slots.held("a"), slots.held("c")) == (3, 1, 1)


# -- over HTTP -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(
        tmp_path_factory.mktemp("ratelimited"),
        api_keys=["key-a", "key-b", "key-c", "key-d"],
        models=[SIM],
        rate_limit_rpm=2,
        max_connections=2,
        max_connections_per_key=1,
    )
    yield running
    running.stop()


def test_http_requests_per_minute(limited: RunningServer) -> None:
    body = {"model": SIM, "input": "hi"}
    with limited.http("key-a") as http:
        for _ in range(2):
            reply = http.post("/responses", json=body)
            assert reply.status_code == 200
            usage_record(http, reply.json()["id"])
        before = stored_counts(limited)
        records = len(http.get("/usage").json()["data"])
        ledger = limited.service.ledger
        recorded = sum(totals.responses for totals in ledger.totals_by_owner.values())
        reply = http.post("/responses", json=body)
        error = error_of(reply, 429, "rate_limit_exceeded", None)
        assert error["type"] == "requests" and "try again in" in error["message"]
        assert 25 <= int(reply.headers["retry-after"]) <= 30
        assert reply.headers["x-ratelimit-limit-requests"] == "2"
        assert reply.headers["x-ratelimit-remaining-requests"] == "0"
        assert stored_counts(limited) == before  # a refused request stores nothing
        # …and has no usage record: none was given to the ledger, and it has written all it holds.
        assert sum(totals.responses for totals in ledger.totals_by_owner.values()) == recorded
        deadline = time.monotonic() + 5
        while ledger.backlog:
            assert time.monotonic() < deadline, ledger.backlog
            time.sleep(0.01)
        assert len(http.get("/usage").json()["data"]) == records
        assert http.get("/models").status_code == 200  # only creates are counted
    with limited.http("key-b") as http:  # per key
        assert http.post("/responses", json=body).status_code == 200
    with pytest.raises(openai.RateLimitError) as info:
        limited.client("key-a").responses.create(model=SIM, input="hi")
    assert info.value.code == "rate_limit_exceeded"


def test_compact_is_counted_like_a_create(limited: RunningServer) -> None:
    """POST /v1/responses/compact generates (a summary): it takes from the same per-key budget as a create."""
    history = [{"role": "user", "content": "Fix the bug."}, {"role": "assistant", "content": "Done."}]
    with limited.http("key-d") as http:
        assert http.post("/responses", json={"model": SIM, "input": "hi", "store": False}).status_code == 200
        compacted = http.post("/responses/compact", json={"model": SIM, "input": history})
        assert compacted.status_code == 200, compacted.text
        error = error_of(
            http.post("/responses/compact", json={"model": SIM, "input": history}), 429, "rate_limit_exceeded", None
        )
        assert error["type"] == "requests"
        error_of(http.post("/responses", json={"model": SIM, "input": "hi"}), 429, "rate_limit_exceeded", None)


def test_websocket_rate_limit_is_an_error_event(limited: RunningServer) -> None:
    with WS(limited.ws_url, api_key="key-c") as ws:
        first = final(ws.turn(input="one", store=False))
        assert first["status"] == "completed"
        assert final(ws.turn(input="two", stream_id="lane", store=False))["status"] == "completed"
        frame = ws.error(input="three", previous_response_id=first["id"], stream_id="lane", store=False)
        assert frame["status"] == 429 and frame["stream_id"] == "lane"
        assert frame["error"]["code"] == "rate_limit_exceeded" and frame["error"]["type"] == "requests"
        assert int(frame["error"]["headers"]["retry-after"]) >= 1
        # The connection stays open and answers the next event.
        ws.send({"type": "response.bogus"})
        assert ws.recv()["error"]["code"] == "unknown_event_type"


def test_tokens_per_minute_over_websocket_evicts_the_parent(tmp_path: Path) -> None:
    """A create refused for tokens evicts its parent from the lane (§3.8.3): a `store: false` parent is gone."""
    running = start_server(tmp_path, models=[SIM], rate_limit_tpm=600)  # 10 tokens a second
    limiter = running.service.rate_limiter
    try:
        with WS(running.ws_url) as ws:
            big = final(ws.turn(input="long", store=False, metadata={"sim_output_tokens": "800"}))
            assert big["usage"]["output_tokens"] == 800
            frame = ws.error(input="next", previous_response_id=big["id"], store=False)
            assert frame["status"] == 429 and frame["error"]["type"] == "tokens"
            assert int(frame["error"]["headers"]["retry-after"]) >= 2
            limiter.clock = lambda: time.monotonic() + 60  # a minute later: the window is full again
            again = ws.error(input="next", previous_response_id=big["id"], store=False)
            assert again["error"]["code"] == "previous_response_not_found"
        with running.http() as http:
            reply = http.post("/responses", json={"model": SIM, "input": "fine"})
            assert reply.status_code == 200, reply.text
    finally:
        running.stop()


# -- WebSocket connection limits -------------------------------------------------------------------------------


def _denied(url: str, api_key: str) -> dict[str, object]:
    with pytest.raises(InvalidStatus) as info:
        WS(url, api_key=api_key)
    response = info.value.response
    assert response.status_code == 429
    assert response.headers["retry-after"] == "1"
    body = json.loads(response.body)
    assert set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, object] = body["error"]
    assert error["code"] == "rate_limit_exceeded"
    return error


def test_websocket_connection_limits(limited: RunningServer) -> None:
    slots = limited.service.connection_slots
    first = WS(limited.ws_url, api_key="key-a")
    try:
        assert "API key" in str(_denied(limited.ws_url, "key-a")["message"])
        with WS(limited.ws_url, api_key="key-b"):
            assert "server" in str(_denied(limited.ws_url, "key-c")["message"])
        deadline = time.monotonic() + 5
        while slots.open > 1:  # the slot is free once the server has seen the close
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with WS(limited.ws_url, api_key="key-c") as ws:
            ws.send({"type": "response.bogus"})
            assert ws.recv()["type"] == "error"
    finally:
        first.close()


# -- POST /v1/responses/input_tokens: admitted like a create, never run ---------------------------------------


def test_input_tokens_is_admitted_like_a_create(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counting tokens takes from the key's requests per minute and is refused while draining, like a create; it
    stores nothing, so the store is not probed, and it leaves nothing for a later resend."""
    running = start_server(tmp_path, models=[SIM], rate_limit_rpm=3, api_keys=["key-a", "key-b", "key-c"])
    history = [{"role": "user", "content": "Fix the bug."}, {"role": "user", "content": "In parse()."}]
    count = {"model": SIM, "input": history}
    try:
        with running.http("key-a") as http:
            for _ in range(3):
                reply = http.post("/responses/input_tokens", json=count)
                assert reply.status_code == 200 and reply.json()["input_tokens"] > 0, reply.text
            reply = http.post("/responses/input_tokens", json=count)
            assert error_of(reply, 429, "rate_limit_exceeded", None)["type"] == "requests"
            assert reply.headers["x-ratelimit-limit-requests"] == "3"
        with running.http("key-b") as http:
            probed: list[bool] = []

            async def down() -> None:
                probed.append(True)
                raise StoreUnavailable("The response store is unavailable.")

            with monkeypatch.context() as patch:  # the store seen down: a create that stores is refused first
                patch.setattr(running.service.store, "ensure_available", down)
                error_of(http.post("/responses", json={"model": SIM, "input": "hi"}), 503, "store_unavailable", None)
                assert http.post("/responses/input_tokens", json=count).status_code == 200  # not probed
            assert probed == [True]
            assert scrape(running).value("hotloop_cache_entries", cache="resend") == 0  # nothing to resend from
            created = http.post("/responses", json={**count, "store": False})  # a create is kept for a resend
            assert created.status_code == 200, created.text
            assert scrape(running).value("hotloop_cache_entries", cache="resend") == 1
        root = running.base_url.removesuffix("/v1")
        assert httpx.get(f"{root}/readyz").json() == {"status": "ready"}
        running.service.drain.begin()  # no WebSocket waits on the drain's event: safe from this thread
        ready = httpx.get(f"{root}/readyz")
        assert (ready.status_code, ready.json()) == (503, {"status": "draining"})
        with running.http("key-c") as http:
            error_of(http.post("/responses/input_tokens", json=count), 503, "server_is_overloaded", None)
    finally:
        running.stop()
