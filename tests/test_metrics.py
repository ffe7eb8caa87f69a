"""GET /metrics through a real server: Prometheus text with per-stage histograms, responses by transport, cache
lookups that move as each cache is used, the WebSocket connection gauge, the ledger backlog; no key needed and no
key in any label; 404 when metrics are off."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import RunningServer, start_server
from hotloop.observability.timings import STAGES
from hotloop.pipeline.state.session import owner_of
from http_support import check_sequence, error_of, parse_sse
from metrics_support import Scrape, metrics_url, scrape, wait_for
from wsutil import WS, final, user

SIM = "hotloop-sim"
KEY = "sk-metrics-test-key-7Qf3Lx9Zp2Wm"
OTHER_KEY = "sk-metrics-other-key-4Hd8Rt1Yv6Kc"


@pytest.fixture(scope="module")
def mserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("metrics"), models=[SIM], api_keys=[KEY, OTHER_KEY])
    yield running
    running.stop()


@pytest.fixture
def http(mserver: RunningServer) -> Iterator[httpx.Client]:
    with mserver.http(KEY) as client:
        yield client


def create(http: httpx.Client, **body: Any) -> dict[str, Any]:
    reply = http.post("/responses", json={"model": SIM, **body})
    assert reply.status_code == 200, reply.text
    response: dict[str, Any] = reply.json()
    assert response["status"] == "completed", response
    return response


def unique(text: str) -> str:
    """Text no earlier test has sent, so the token cache has not seen it."""
    return f"{text} [{uuid.uuid4().hex}]"


def delta(before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    return after.value(name, **labels) - before.value(name, **labels)


def lookups(before: Scrape, after: Scrape, cache: str) -> tuple[float, float]:
    """(hits, misses) of one cache between two scrapes."""
    return (
        delta(before, after, "hotloop_cache_lookups_total", cache=cache, result="hit"),
        delta(before, after, "hotloop_cache_lookups_total", cache=cache, result="miss"),
    )


# -- format and access ----------------------------------------------------------------------------------------------


def test_prometheus_text_without_a_key(mserver: RunningServer, http: httpx.Client) -> None:
    create(http, input="hello")
    reply = httpx.get(metrics_url(mserver), timeout=10)  # no Authorization at all
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    parsed = Scrape(reply.text)
    expected = {
        "hotloop_stage_seconds": "histogram",
        "hotloop_responses": "counter",
        "hotloop_cache_lookups": "counter",
        "hotloop_active_connections": "gauge",
        "hotloop_responses_in_flight": "gauge",
        "hotloop_safety_verdicts": "counter",
        "hotloop_ledger_backlog": "gauge",
        "hotloop_token_cache_bytes": "gauge",
        "hotloop_chain_cache_entries": "gauge",
        "hotloop_render_fallbacks": "gauge",
        "hotloop_websocket_sessions": "gauge",
    }
    for name, kind in expected.items():
        assert parsed.types.get(name) == kind, (name, parsed.types.get(name))
    # A wrong key does not matter either: the endpoint does not authenticate.
    assert httpx.get(metrics_url(mserver), headers={"Authorization": "Bearer nope"}, timeout=10).status_code == 200


def test_ledger_backlog_and_gauges(mserver: RunningServer, http: httpx.Client) -> None:
    create(http, input="hello")
    current = scrape(mserver)
    assert current.has("hotloop_ledger_backlog")
    assert current.value("hotloop_ledger_backlog") >= 0
    for gauge in ("hotloop_token_cache_bytes", "hotloop_chain_cache_entries", "hotloop_render_fallbacks"):
        assert current.has(gauge) and current.value(gauge) >= 0, gauge
    assert current.value("hotloop_chain_cache_entries") >= 1  # the stored response just created


def test_no_key_in_any_label(mserver: RunningServer, http: httpx.Client) -> None:
    secret_text = unique("do-not-export-this-input")
    create(http, input=secret_text)
    with mserver.http(OTHER_KEY) as other:
        create(other, input="hello from the other key")
    with WS(mserver.ws_url, api_key=KEY) as ws:
        final(ws.turn(model=SIM, input=user("hi")))
    current = scrape(mserver)
    forbidden = [KEY, OTHER_KEY, owner_of(KEY, True), owner_of(OTHER_KEY, True), secret_text]
    for value in current.label_values():
        for token in forbidden:
            assert token not in value, (token, value)
    for token in forbidden:
        assert token not in current.text, token


def test_metrics_disabled(tmp_path: Path) -> None:
    running = start_server(tmp_path, models=[SIM], metrics=False)
    try:
        reply = httpx.get(metrics_url(running), timeout=10)
        error_of(reply, 404, "not_found", None)
        with running.http() as http:  # the API itself still works
            assert http.post("/responses", json={"model": SIM, "input": "hi"}).status_code == 200
    finally:
        running.stop()


# -- stage histograms -------------------------------------------------------------------------------------------------


def test_stage_histograms(mserver: RunningServer, http: httpx.Client) -> None:
    before = scrape(mserver)
    create(http, input="one")
    after = scrape(mserver)
    for stage in STAGES:
        # Each finished response observes every stage once (ttft and generate: it generated).
        assert delta(before, after, "hotloop_stage_seconds_count", stage=stage) == 1, stage
        assert delta(before, after, "hotloop_stage_seconds_sum", stage=stage) >= 0, stage
    create(http, input="two", stream=False)
    with WS(mserver.ws_url, api_key=KEY) as ws:
        final(ws.turn(model=SIM, input=user("three")))
    http.post("/responses", json={"model": SIM, "input": "four", "stream": True}).raise_for_status()
    current = scrape(mserver)
    for stage in STAGES:
        count = current.value("hotloop_stage_seconds_count", stage=stage)
        assert count - before.value("hotloop_stage_seconds_count", stage=stage) == 4, stage
        buckets = sorted(
            (float(dict(labels)["le"]), value)
            for (name, labels), value in current.samples.items()
            if name == "hotloop_stage_seconds_bucket" and dict(labels)["stage"] == stage
        )
        assert buckets[-1] == (float("inf"), count), stage
        assert [value for _, value in buckets] == sorted(value for _, value in buckets), stage  # cumulative
    # Every stage label is one of the documented stages.
    seen = {dict(labels)["stage"] for name, labels in current.samples if name == "hotloop_stage_seconds_count"}
    assert seen == set(STAGES)


def test_prewarm_has_no_generation_stages(mserver: RunningServer, http: httpx.Client) -> None:
    before = scrape(mserver)
    create(http, input="warm me", generate=False)
    after = scrape(mserver)
    for stage in ("validate", "resolve", "safety", "render", "pre_inference", "generate", "post_inference"):
        assert delta(before, after, "hotloop_stage_seconds_count", stage=stage) == 1, stage
    assert delta(before, after, "hotloop_stage_seconds_count", stage="ttft") == 0


# -- responses by transport -----------------------------------------------------------------------------------------


def test_responses_total_by_transport(mserver: RunningServer, http: httpx.Client) -> None:
    name = "hotloop_responses_total"
    before = scrape(mserver)
    create(http, input="json")
    mid = scrape(mserver)
    assert delta(before, mid, name, model=SIM, status="completed", transport="http") == 1
    assert delta(before, mid, name, model=SIM, status="completed", transport="sse") == 0
    assert delta(before, mid, name, model=SIM, status="completed", transport="websocket") == 0

    reply = http.post("/responses", json={"model": SIM, "input": "sse", "stream": True})
    assert reply.status_code == 200
    check_sequence(parse_sse(reply.text))
    after_sse = scrape(mserver)
    assert delta(mid, after_sse, name, model=SIM, status="completed", transport="sse") == 1
    assert delta(mid, after_sse, name, model=SIM, status="completed", transport="http") == 0

    with WS(mserver.ws_url, api_key=KEY) as ws:
        first = final(ws.turn(model=SIM, input=user("ws one")))
        final(ws.turn(model=SIM, input=user("ws two"), previous_response_id=first["id"]))
    after_ws = scrape(mserver)
    assert delta(after_sse, after_ws, name, model=SIM, status="completed", transport="websocket") == 2
    assert delta(after_sse, after_ws, name, model=SIM, status="completed", transport="http") == 0

    # An incomplete response is counted under its own status.
    create_reply = http.post("/responses", json={"model": SIM, "input": "cut short", "max_output_tokens": 16})
    assert create_reply.status_code == 200, create_reply.text
    status = create_reply.json()["status"]
    last = scrape(mserver)
    assert delta(after_ws, last, name, model=SIM, status=status, transport="http") == 1


def test_rejected_request_is_not_a_response(mserver: RunningServer, http: httpx.Client) -> None:
    before = scrape(mserver)
    reply = http.post("/responses", json={"model": SIM, "input": "x", "previous_response_id": "resp_missing"})
    assert reply.status_code == 400
    after = scrape(mserver)
    for transport in ("http", "sse", "websocket"):
        for status in ("completed", "failed", "incomplete"):
            assert delta(before, after, "hotloop_responses_total", model=SIM, status=status, transport=transport) == 0
    assert delta(before, after, "hotloop_stage_seconds_count", stage="validate") == 0


# -- caches ---------------------------------------------------------------------------------------------------------


def test_websocket_continuation_hits_connection_and_render_state(mserver: RunningServer) -> None:
    with WS(mserver.ws_url, api_key=KEY) as ws:
        first = final(ws.turn(model=SIM, input=user(unique("first")), store=False))
        before = scrape(mserver)
        final(ws.turn(model=SIM, input=user(unique("second")), store=False, previous_response_id=first["id"]))
        after = scrape(mserver)
    assert lookups(before, after, "connection") == (1, 0)
    assert lookups(before, after, "render_state") == (1, 0)  # only the new input rendered
    assert lookups(before, after, "chain") == (0, 0)  # the connection's cache answered first


def test_websocket_new_chain_counts_a_full_render(mserver: RunningServer) -> None:
    with WS(mserver.ws_url, api_key=KEY) as ws:
        before = scrape(mserver)
        final(ws.turn(model=SIM, input=user(unique("fresh")), store=False))
        after = scrape(mserver)
    assert lookups(before, after, "connection") == (0, 0)  # no previous_response_id: no lookup
    assert lookups(before, after, "render_state") == (0, 1)


def test_websocket_continuation_of_http_response_misses_connection(mserver: RunningServer, http: httpx.Client) -> None:
    parent = create(http, input=unique("made over http"))
    with WS(mserver.ws_url, api_key=KEY) as ws:
        before = scrape(mserver)
        final(ws.turn(model=SIM, input=user(unique("continued on ws")), previous_response_id=parent["id"]))
        after = scrape(mserver)
    assert lookups(before, after, "connection") == (0, 1)
    assert lookups(before, after, "chain") == (1, 0)  # the process's stored-chain cache had it


def test_http_continuation_hits_chain(mserver: RunningServer, http: httpx.Client) -> None:
    parent = create(http, input=unique("stored parent"))
    before = scrape(mserver)
    child = create(http, input=unique("child"), previous_response_id=parent["id"])
    after = scrape(mserver)
    assert child["previous_response_id"] == parent["id"]
    assert lookups(before, after, "chain") == (1, 0)
    assert lookups(before, after, "connection") == (0, 0)  # HTTP has no connection cache
    assert lookups(before, after, "render_state") == (1, 0)


def test_http_continuation_of_unstored_chain_misses(mserver: RunningServer, http: httpx.Client) -> None:
    parent = create(http, input=unique("not stored"), store=False)
    before = scrape(mserver)
    reply = http.post("/responses", json={"model": SIM, "input": "next", "previous_response_id": parent["id"]})
    after = scrape(mserver)
    error_of(reply, 400, "previous_response_not_found", "previous_response_id")
    assert lookups(before, after, "chain") == (0, 1)


def test_resent_history_hits_token_cache(mserver: RunningServer, http: httpx.Client) -> None:
    history = [
        {"type": "message", "role": "user", "content": unique("What is the capital of France?")},
        {"type": "message", "role": "assistant", "content": unique("Paris.")},
        {"type": "message", "role": "user", "content": unique("And of Italy?")},
    ]
    before = scrape(mserver)
    create(http, input=history, store=False)
    mid = scrape(mserver)
    hits, misses = lookups(before, mid, "tokens")
    assert hits == 0 and misses >= 2, (hits, misses)  # every message after the first is new
    assert lookups(before, mid, "resend") == (0, 1)  # no earlier request starts the same way
    # The same history after another opening message: not a resend of the first request, but every message
    # after the new first one comes from the token cache.
    other = [{"type": "message", "role": "user", "content": unique("Hello.")}, *history[1:]]
    create(http, input=other, store=False)
    after = scrape(mserver)
    hits, misses = lookups(mid, after, "tokens")
    assert hits >= 2 and misses == 1, (hits, misses)
    assert lookups(mid, after, "render_state") == (0, 1)  # no chain: a full render, from cached messages
    assert after.value("hotloop_token_cache_bytes") > 0
    # The first history resent with one more message: it starts from that request (pipeline/resend.py), renders
    # only the new message, and looks nothing up in the token cache.
    create(http, input=[*history, {"type": "message", "role": "user", "content": unique("And Spain?")}], store=False)
    last = scrape(mserver)
    assert lookups(after, last, "resend") == (1, 0)
    assert lookups(after, last, "render_state") == (1, 0)
    assert lookups(after, last, "tokens") == (0, 0)
    assert last.value("hotloop_cache_bytes", cache="resend") > 0


# -- connections ----------------------------------------------------------------------------------------------------


def test_active_websocket_connections(mserver: RunningServer) -> None:
    def active(current: Scrape) -> float:
        return current.value("hotloop_active_connections", transport="websocket")

    wait_for(mserver, lambda current: active(current) == 0)
    ws = WS(mserver.ws_url, api_key=KEY)
    try:
        wait_for(mserver, lambda current: active(current) == 1)
        final(ws.turn(model=SIM, input=user("hi")))
        assert active(scrape(mserver)) == 1
        with WS(mserver.ws_url, api_key=OTHER_KEY):
            wait_for(mserver, lambda current: active(current) == 2)
        wait_for(mserver, lambda current: active(current) == 1)
    finally:
        ws.close()
    wait_for(mserver, lambda current: active(current) == 0)
    # HTTP requests are not connections of this gauge.
    assert not any(
        dict(labels).get("transport") != "websocket"
        for name, labels in scrape(mserver).samples
        if name == "hotloop_active_connections"
    )


def test_in_flight_back_to_zero(mserver: RunningServer, http: httpx.Client) -> None:
    create(http, input="hi")
    with WS(mserver.ws_url, api_key=KEY) as ws:
        final(ws.turn(model=SIM, input=user("hi")))
    current = wait_for(
        mserver,
        lambda current: all(
            current.value("hotloop_responses_in_flight", transport=transport) == 0
            for transport in ("http", "websocket")
        ),
    )
    assert current.has("hotloop_responses_in_flight", transport="http")
