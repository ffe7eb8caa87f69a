"""Property-based fuzzing of the HTTP API (protocol.md §1.2, §1.3, §1.9): whatever a client sends, never a 5xx;
every 4xx carries the 4-key error body with a non-null code; every 200 is a valid Response.

Longer campaign: `HOTLOOP_FUZZ_EXAMPLES=5000 pytest tests/test_fuzz_http.py` (see fuzz_support.py).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import RunningServer
from fuzz_support import VALID_BODY, create_bodies, dumps, fuzz_settings, garbage, or_frame, or_view, raw_bodies
from http_support import TERMINAL
from schema import check_event, check_response

HEADERS = {"Content-Type": "application/json"}


def sse_events(text: str) -> list[dict[str, Any]]:
    """The events of an SSE body (`[DONE]` last), each schema-checked (OR view), numbered 0, 1, 2, …"""
    blocks = [block for block in text.split("\n\n") if block.strip()]
    assert blocks[-1] == "data: [DONE]", blocks[-1]
    events: list[dict[str, Any]] = []
    for block in blocks[:-1]:
        event_line, data_line = block.split("\n")
        event = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {event['type']}", block
        check_event(or_frame(event))
        events.append(event)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[-1]["type"] in TERMINAL and not any(event["type"] in TERMINAL for event in events[:-1])
    return events


@pytest.fixture(scope="module")
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with server.http() as client:
        yield client


def check_reply(reply: httpx.Response) -> dict[str, Any] | None:
    """No 5xx; a 4xx is the §1.9 error body; returns the JSON of a 200 (None for an error)."""
    assert reply.status_code < 500, (reply.status_code, reply.text[:2000])
    if reply.status_code >= 400:
        assert reply.headers["content-type"].startswith("application/json"), reply.headers
        body = reply.json()
        assert set(body) == {"error"}, body
        error = body["error"]
        assert set(error) == {"message", "type", "param", "code"}, error
        assert isinstance(error["code"], str) and error["code"], error
        assert isinstance(error["message"], str) and error["message"], error
        assert error["param"] is None or isinstance(error["param"], str), error
        return None
    assert reply.status_code == 200, reply.text[:2000]
    if reply.headers["content-type"].startswith("text/event-stream"):  # GET ?stream=true replays (§1.8)
        return {"object": "stream", "events": sse_events(reply.text)}
    data: dict[str, Any] = reply.json()
    return data


def check_created(reply: httpx.Response) -> None:
    data = check_reply(reply)
    if data is not None:
        check_response(or_view(data))
        assert data["status"] in ("completed", "incomplete", "queued", "in_progress"), data


@fuzz_settings(3.0)
@given(body=create_bodies())
def test_create_bodies_never_5xx(http: httpx.Client, body: dict[str, Any]) -> None:
    check_created(http.post("/responses", content=dumps(body), headers=HEADERS))


@fuzz_settings(0.6)
@given(body=raw_bodies())
def test_raw_bodies_never_5xx(http: httpx.Client, body: bytes) -> None:
    reply = http.post("/responses", content=body, headers=HEADERS)
    check_created(reply)


@fuzz_settings(0.4)
@given(body=create_bodies())
def test_streamed_create_never_5xx(http: httpx.Client, body: dict[str, Any]) -> None:
    body = {**body, "stream": True}
    reply = http.post("/responses", content=dumps(body), headers=HEADERS)
    if reply.status_code != 200 or reply.headers["content-type"].startswith("application/json"):
        check_created(reply)
        return
    final = sse_events(reply.text)[-1]["response"]
    if final["status"] == "failed":  # an in-band failure must not be the server's fault (§1.9)
        assert final["error"]["code"] != "server_error", final


@fuzz_settings(0.3)
@given(body=create_bodies(), path=st.sampled_from(["/responses/input_tokens", "/responses/compact"]))
def test_other_post_endpoints_never_5xx(http: httpx.Client, body: dict[str, Any], path: str) -> None:
    reply = http.post(path, content=dumps(body), headers=HEADERS)
    check_reply(reply)


ids = st.one_of(
    st.text(min_size=1, max_size=60),
    st.just("resp_" + "A" * 24),
    st.just("x" * 3000),
    st.just("%00"),
    st.just("../../etc/passwd"),
    st.binary(min_size=1, max_size=20).map(lambda b: b.decode("latin-1")),
)
query_values = st.one_of(
    st.text(max_size=10), st.sampled_from(["0", "1", "100", "101", "-1", "1e3", "asc", "desc", "true", "٣"])
)
queries = st.dictionaries(
    st.sampled_from(["limit", "order", "after", "include[]", "include", "stream", "starting_after", "zzz"]),
    query_values,
    max_size=4,
)


@fuzz_settings(1.0)
@given(
    response_id=ids,
    params=queries,
    route=st.sampled_from(["get", "input_items", "cancel", "delete", "get_stream"]),
)
def test_id_endpoints_never_5xx(http: httpx.Client, response_id: str, params: dict[str, str], route: str) -> None:
    quoted = urllib.parse.quote(response_id, safe="")
    if route == "get":
        reply = http.get(f"/responses/{quoted}", params=params)
    elif route == "get_stream":
        reply = http.get(f"/responses/{quoted}", params={**params, "stream": "true"})
    elif route == "input_items":
        reply = http.get(f"/responses/{quoted}/input_items", params=params)
    elif route == "cancel":
        reply = http.post(f"/responses/{quoted}/cancel", params=params)
    else:
        reply = http.delete(f"/responses/{quoted}", params=params)
    assert reply.status_code < 500, (route, reply.status_code, reply.text[:500])
    if reply.status_code >= 400:  # a 307 is Starlette's slash redirect ("/" as the id)
        check_reply(reply)


@pytest.fixture(scope="module")
def stored_id(http: httpx.Client) -> str:
    reply = http.post("/responses", json={**VALID_BODY, "store": True, "input": [{"role": "user", "content": "hi"}]})
    assert reply.status_code == 200, reply.text
    response_id: str = reply.json()["id"]
    return response_id


@fuzz_settings(0.5)
@given(params=queries, garbage_param=garbage)
def test_input_items_of_a_stored_response(
    http: httpx.Client, stored_id: str, params: dict[str, str], garbage_param: Any
) -> None:
    reply = http.get(f"/responses/{stored_id}/input_items", params={**params, "x": str(garbage_param)[:50]})
    data = check_reply(reply)
    if data is not None:
        assert data["object"] == "list", data
    data = check_reply(http.get(f"/responses/{stored_id}", params=params))
    if data is not None and data["object"] == "response":
        check_response(or_view(data))


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


def test_bad_requests_do_not_grow_memory(http: httpx.Client) -> None:
    """The server runs in this process: thousands of rejected requests must not grow its RSS (leaks, caches)."""
    import random

    rng = random.Random(7)
    bad = [
        b"{",
        b"[]",
        b'{"input": 5}',
        b'{"temperature": "hot"}',
        b'{"input":[{"type":"function_call_output","call_id":"nope","output":"x"}]}',
        b'{"previous_response_id":"resp_missing00000000000000000"}',
        b'{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,!!"}]}]}',
        b'{"tools":[{"type":"function"}], "tool_choice": 3}',
        b'{"metadata":{"a":1}}',
        b'{"input":' + b"[" * 1000 + b"]" * 1000 + b"}",
        b'{"model":"nope","input":"' + b"x" * 20_000 + b'"}',
        b"\xff\xfe",
    ]

    def batch(count: int) -> None:
        for _ in range(count):
            reply = http.post("/responses", content=rng.choice(bad), headers=HEADERS)
            assert 400 <= reply.status_code < 500, reply.text[:500]

    batch(500)  # warm-up: imports, allocator arenas, caches reach their steady state
    before = _rss_kib()
    batch(2500)
    growth_mib = (_rss_kib() - before) / 1024
    assert growth_mib < 30, f"RSS grew by {growth_mib:.1f} MiB over 2500 rejected requests"
