"""WebSocket handshake, limits and lifetime: auth, 426, close codes, the age limit and disconnects (§3.1, §3.11)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from conftest import RunningServer, start_server, stored_counts
from http_support import FINISHED, wait_status
from wsutil import SLOW, WS, final


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("limited"), max_body_bytes=4096, ws_max_queued=2)
    yield running
    running.stop()


def _rejected(url: str, api_key: str | None) -> InvalidStatus:
    with pytest.raises(InvalidStatus) as info:
        WS(url, api_key=api_key)
    return info.value


def test_upgrade_needs_the_right_key(keyed_server: RunningServer) -> None:
    for key in (None, "wrong-key"):
        response = _rejected(keyed_server.ws_url, key).response
        assert response.status_code == 401
        if response.body:
            body = json.loads(response.body)
            assert body["error"]["code"] == "invalid_api_key"
            assert set(body["error"]) == {"message", "type", "param", "code"}
    with WS(keyed_server.ws_url, api_key="key-a") as ws:
        assert final(ws.turn(input="hi"))["status"] == "completed"


def test_stored_response_belongs_to_its_key(keyed_server: RunningServer) -> None:
    with WS(keyed_server.ws_url, api_key="key-a") as ws:
        mine = final(ws.turn(input="secret", store=True))
    with WS(keyed_server.ws_url, api_key="key-b") as ws:
        frame = ws.error(input="more", previous_response_id=mine["id"])
        assert frame["error"]["code"] == "previous_response_not_found"
    with WS(keyed_server.ws_url, api_key="key-a") as ws:
        assert final(ws.turn(input="more", previous_response_id=mine["id"]))["status"] == "completed"


def test_websocket_disabled_answers_426(tmp_path: Path) -> None:
    running = start_server(tmp_path, websocket=False)
    try:
        response = _rejected(running.ws_url, "k").response
        assert response.status_code == 426
        if response.body:
            assert json.loads(response.body)["error"]["code"]
    finally:
        running.stop()


def test_frame_over_the_limit_closes_1009(limited: RunningServer) -> None:
    with WS(limited.ws_url, max_size=None) as ws:
        assert final(ws.turn(input="small"))["status"] == "completed"
        ws.create(input="x" * 8192)
        assert ws.closed_with() == 1009


def test_queue_over_the_cap_closes_1008(limited: RunningServer) -> None:
    before = stored_counts(limited)
    with WS(limited.ws_url) as ws:
        # The server may close before the last creates go out (a busy machine): sending then fails, the code stays.
        with contextlib.suppress(ConnectionClosed):
            for n in range(5):
                ws.create(input=f"q{n}", metadata=SLOW, store=False)
        assert ws.closed_with() == 1008
    assert stored_counts(limited) == before


def test_age_limit_lets_the_response_in_flight_finish(tmp_path: Path) -> None:
    running = start_server(tmp_path, ws_max_age_s=1.0)
    try:
        with WS(running.ws_url) as ws:
            # ~1.5 s of output, so the limit passes while it runs
            ws.create(input="long", metadata={"sim_tps": "40", "sim_output_tokens": "60"}, store=False)
            started = time.monotonic()
            assert ws.recv()["type"] == "response.created"
            time.sleep(max(0.0, 1.1 - (time.monotonic() - started)))
            ws.create(input="too late")
            frames = ws.collect(errors=1, timeout=10)
            errors = [frame for frame in frames if frame["type"] == "error"]
            assert errors[0]["status"] == 400
            assert errors[0]["error"]["code"] == "websocket_connection_limit_reached"
            assert errors[0]["error"]["param"] is None
            assert "limit reached" in errors[0]["error"]["message"]
            assert final(frames)["status"] == "completed"
            assert ws.closed_with() == 1001
        with WS(running.ws_url) as ws:  # idle past the limit: the error once, then 1001
            time.sleep(1.2)
            frame = ws.recv()
            assert frame["error"]["code"] == "websocket_connection_limit_reached"
            assert ws.closed_with() == 1001
    finally:
        running.stop()


def test_disconnect_cancels_generation(server: RunningServer) -> None:
    ws = WS(server.ws_url)
    ws.create(input="go on forever", metadata=SLOW, store=True)
    created = ws.recv()
    response_id = created["response"]["id"]
    deltas = 0
    while deltas < 3:
        deltas += ws.recv()["type"] == "response.output_text.delta"
    ws.close()
    with server.http() as http:
        stored = wait_status(http, response_id, FINISHED, timeout=5, missing_ok=True)
    assert stored["status"] == "cancelled"
    assert stored["usage"] is None or stored["usage"]["output_tokens"] < 2000


def test_browser_key_subprotocol(keyed_server: RunningServer) -> None:
    protocols = ["openai-insecure-api-key.key-a", "responses"]
    with WS(keyed_server.ws_url, subprotocols=protocols) as ws:  # type: ignore[arg-type]
        assert ws.conn.subprotocol == "responses"
        assert final(ws.turn(input="hi"))["status"] == "completed"
    wrong = ["openai-insecure-api-key.nope", "responses"]
    with pytest.raises(InvalidStatus) as info:
        WS(keyed_server.ws_url, subprotocols=wrong)  # type: ignore[arg-type]
    assert info.value.response.status_code == 401


def test_queue_overflow_cancels_the_running_response(limited: RunningServer) -> None:
    with WS(limited.ws_url) as ws:
        ws.create(input="long", metadata=SLOW, store=True)
        response_id = ws.recv()["response"]["id"]
        with contextlib.suppress(ConnectionClosed):  # the close may come before the last creates go out
            for n in range(4):
                ws.create(input=f"q{n}", store=False)
        assert ws.closed_with() == 1008
    with limited.http() as http:
        assert wait_status(http, response_id, FINISHED, timeout=5, missing_ok=True)["status"] == "cancelled"


def test_lanes_off_and_deflate(tmp_path: Path) -> None:
    """ws_lanes off: ids still validated and echoed, one FIFO; ws_deflate: the client's offer is accepted."""
    running = start_server(tmp_path, ws_lanes=False, ws_deflate=True)
    paced = {"sim_tps": "200", "sim_output_tokens": "40"}
    try:
        with WS(running.ws_url) as ws:
            assert ws.conn.protocol.extensions, "permessage-deflate was not negotiated"
            ws.create(input="a", stream_id="a", metadata=paced, store=False)
            ws.create(input="b", stream_id="b", metadata=paced, store=False)
            frames = ws.collect(terminals=2)
            lanes = [frame["stream_id"] for frame in frames]
            assert lanes == sorted(lanes) and set(lanes) == {"a", "b"}  # a's whole response, then b's
            assert ws.error(input="x", stream_id="bad id")["error"]["code"] == "invalid_stream_id"
        with WS(running.ws_url, compression=None) as ws:
            assert not ws.conn.protocol.extensions
            assert final(ws.turn(input="plain"))["status"] == "completed"
    finally:
        running.stop()
