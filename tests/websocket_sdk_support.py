"""WebSocket mode through openai-python (`client.responses.connect()`), as the SDK tests drive it
(test_websocket_sdk.py, test_steering.py)."""

from __future__ import annotations

import json
from typing import Any

import openai
from openai.resources.responses.responses import ResponsesConnection
from openai.types.responses import Response

from conftest import RunningServer
from wsutil import TERMINAL, check_frame, check_sequence


def ws_client(server: RunningServer, **kwargs: Any) -> openai.OpenAI:
    return server.client(websocket_base_url=server.base_url.replace("http", "ws"), **kwargs)


def run_turn(conn: ResponsesConnection, **body: Any) -> tuple[Response, list[Any]]:
    """Send one create through the SDK; its events (schema-checked raw, then typed) and final Response."""
    conn.response.create(**body)
    frames: list[dict[str, Any]] = []
    typed: list[Any] = []
    while True:
        data = conn.recv_bytes()
        frame = json.loads(data)
        check_frame(frame)
        assert frame["type"] != "error", frame
        frames.append(frame)
        typed.append(conn.parse_event(data))
        if frame["type"] in TERMINAL:
            break
    check_sequence(frames)
    final = typed[-1].response
    assert isinstance(final, Response)
    return final, typed
