"""Property-based fuzzing of WebSocket mode (protocol.md §3.2, §3.10): random text and binary frames never close the
socket; every error frame is a valid `error` envelope below 500; a valid `response.create` sent after a batch of
bad frames still completes.

Longer campaign: `HOTLOOP_FUZZ_EXAMPLES=5000 pytest tests/test_fuzz_websocket.py` (see fuzz_support.py).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from conftest import RunningServer
from fuzz_support import (
    NAN_TOKENS,
    VALID_BODY,
    create_bodies,
    dumps,
    fuzz_settings,
    garbage,
    or_frame,
    raw_bodies,
    short_text,
)
from wsutil import TERMINAL, WS, check_frame

EVENT_TYPES = ["response.create", "response.append", "response.steer", "response.processed", "response.inject", "x"]

shaped_frames = st.one_of(
    # valid JSON, wrong shape
    st.fixed_dictionaries({"type": st.one_of(st.sampled_from(EVENT_TYPES), garbage)}),
    st.fixed_dictionaries(
        {"type": st.sampled_from(EVENT_TYPES)},
        optional={
            "input": garbage,
            "previous_response_id": garbage,
            "response_id": garbage,
            "stream_id": st.one_of(st.sampled_from(["", "lane-1", "bad id!", "x" * 300]), garbage),
            "response": garbage,
        },
    ),
    st.lists(garbage, max_size=3),
    garbage,
)
random_creates = create_bodies().map(lambda body: {"type": "response.create", **body})


@st.composite
def frames(draw: st.DrawFn) -> str | bytes:
    """One client frame: a random create, a wrong-shaped event, or raw bytes as a text or a binary frame."""
    kind = draw(st.integers(0, 5))
    if kind <= 1:
        data = dumps(draw(random_creates))
    elif kind <= 3:
        data = dumps(draw(shaped_frames))
    elif kind == 4:
        data = draw(raw_bodies())
        if data.startswith(b"{") and draw(st.booleans()):
            data = b'{"type":"response.create",' + data[1:]
    else:
        token = draw(st.sampled_from(NAN_TOKENS))
        data = b'{"type":"response.create","temperature":' + token.encode() + b',"store":false}'
    if draw(st.booleans()):
        return data  # a binary frame
    return (
        data.decode("utf-8", errors=draw(st.sampled_from(["replace", "ignore", "surrogateescape"])))
        .encode("utf-8", errors="replace")
        .decode()
    )


def recv(ws: WS, timeout: float = 20.0) -> dict[str, Any]:
    """One server frame: a text frame holding an error envelope or an event, valid against OR (`or_frame`)."""
    raw = ws.conn.recv(timeout)
    assert isinstance(raw, str), "the server sends text frames only (§3.2)"
    frame: dict[str, Any] = json.loads(raw)
    check_frame(or_frame(frame))
    check_fuzzed_frame(frame)
    return frame


def probe(ws: WS) -> None:
    """A valid create after the batch: read (and validate) every frame until its terminal event."""
    marker = uuid.uuid4().hex
    ws.create(**{**VALID_BODY, "metadata": {"probe": marker, "sim_output_tokens": "4"}})
    while True:
        frame = recv(ws)
        if frame["type"] in TERMINAL and frame["response"]["metadata"].get("probe") == marker:
            assert frame["type"] == "response.completed", frame
            return


def check_fuzzed_frame(frame: dict[str, Any]) -> None:
    """`recv` has schema-checked it; a client's garbage is never the server's fault."""
    if frame["type"] == "error":
        assert 400 <= frame["status"] < 500, frame
    elif frame["type"] == "response.failed":
        assert frame["response"]["error"]["code"] != "server_error", frame


@fuzz_settings(1.0)
@given(batch=st.lists(frames(), min_size=1, max_size=8))
def test_random_frames_never_kill_the_connection(server: RunningServer, batch: list[str | bytes]) -> None:
    with WS(server.ws_url, max_size=None, close_timeout=1) as ws:
        for frame in batch:
            ws.send(frame)
        probe(ws)


@fuzz_settings(0.3)
@given(batch=st.lists(random_creates, min_size=1, max_size=6), lane=st.one_of(st.none(), st.just("fz")))
def test_random_creates_on_one_socket(server: RunningServer, batch: list[dict[str, Any]], lane: str | None) -> None:
    """Every create gets exactly one answer: an `error` frame or a response ending in a terminal event."""
    with WS(server.ws_url, max_size=None, close_timeout=1) as ws:
        for body in batch:
            if lane is not None and "stream_id" not in body:
                body = {**body, "stream_id": lane}
            ws.send(dumps(body))
        answered = 0
        while answered < len(batch):
            frame = recv(ws)
            if frame["type"] == "error" or frame["type"] in TERMINAL:
                answered += 1
        probe(ws)


@fuzz_settings(0.2)
@given(text=short_text, token=st.sampled_from([*NAN_TOKENS, "1e999", "-0", "01", "[]", "{}"]))
def test_bad_json_frames_get_invalid_json(server: RunningServer, text: str, token: str) -> None:
    with WS(server.ws_url, close_timeout=1) as ws:
        ws.send('{"type": "response.create", "input": ' + json.dumps(text))  # truncated
        frame = recv(ws)
        assert frame["type"] == "error" and frame["error"]["code"] == "invalid_json", frame
        ws.send(b"\xff\xfe" + text.encode())  # a binary frame that is not UTF-8
        frame = recv(ws)
        assert frame["type"] == "error" and frame["error"]["code"] == "invalid_json", frame
        ws.send('{"type":"response.create","store":false,"top_p":' + token + "}")
        recv(ws)
        probe(ws)
