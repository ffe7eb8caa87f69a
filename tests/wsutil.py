"""A small raw WebSocket client for the WebSocket mode tests: every frame it receives is schema-checked."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from schema import check_event, check_ws_error

TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
SLOW = {"sim_tps": "20", "sim_output_tokens": "2000"}  # ~100 s of output: only ever cut short

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
        "additionalProperties": False,
    },
}


def check_frame(frame: dict[str, Any]) -> None:
    """Validate one server frame: the error envelope (§3.10) or an event (§2, §3.7)."""
    if frame["type"] == "error":
        check_ws_error(frame)
        assert "sequence_number" not in frame, frame
        assert frame["status"] >= 400 and isinstance(frame["error"]["code"], str), frame
        assert set(frame["error"]) >= {"type", "code", "message", "param"}, frame
    else:
        check_event(frame)
        assert isinstance(frame["sequence_number"], int), frame


class WS:
    def __init__(
        self, url: str, *, api_key: str | None = None, headers: dict[str, str] | None = None, **kwargs: Any
    ) -> None:
        sent = {**({"Authorization": f"Bearer {api_key}"} if api_key else {}), **(headers or {})}
        self.conn: ClientConnection = connect(url, additional_headers=sent or None, open_timeout=10, **kwargs)

    def __enter__(self) -> WS:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    def send(self, frame: dict[str, Any] | str | bytes) -> None:
        self.conn.send(frame if isinstance(frame, str | bytes) else json.dumps(frame))

    def create(self, **body: Any) -> None:
        self.send({"type": "response.create", **body})

    def recv(self, timeout: float = 10.0) -> dict[str, Any]:
        raw = self.conn.recv(timeout)
        assert isinstance(raw, str), "the server sends text frames only (§3.2)"
        frame: dict[str, Any] = json.loads(raw)
        check_frame(frame)
        return frame

    def collect(self, terminals: int = 1, errors: int = 0, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Frames until `terminals` terminal events and `errors` error frames have arrived."""
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        seen_terminals = seen_errors = 0
        while seen_terminals < terminals or seen_errors < errors:
            frame = self.recv(max(0.01, deadline - time.monotonic()))
            out.append(frame)
            if frame["type"] in TERMINAL:
                seen_terminals += 1
            elif frame["type"] == "error":
                seen_errors += 1
        return out

    def turn(self, timeout: float = 10.0, **body: Any) -> list[dict[str, Any]]:
        """One create answered by a full response: its events, checked for order and numbering."""
        self.create(**body)
        events = self.collect(timeout=timeout)
        check_sequence(events)
        return events

    def error(self, timeout: float = 10.0, **body: Any) -> dict[str, Any]:
        """One create answered by an `error` frame."""
        self.create(**body)
        frame = self.recv(timeout)
        assert frame["type"] == "error", frame
        return frame

    def closed_with(self, timeout: float = 10.0) -> int | None:
        """Read until the server closes; the close code it sent."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                self.recv(max(0.01, deadline - time.monotonic()))
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd is not None else None


def check_sequence(events: Iterable[dict[str, Any]]) -> None:
    """One response's events: 0, 1, 2, … from response.created, one terminal last, output = the done items."""
    events = list(events)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    assert events[1]["type"] == "response.in_progress"
    assert events[-1]["type"] in TERMINAL
    assert not any(event["type"] in TERMINAL for event in events[:-1])
    ids = {event["response"]["id"] for event in events if "response" in event}
    assert len(ids) == 1
    done = [event["item"] for event in events if event["type"] == "response.output_item.done"]
    assert events[-1]["response"]["output"] == done


def final(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The response of the terminal event."""
    assert events[-1]["type"] in TERMINAL, events[-1]
    response: dict[str, Any] = events[-1]["response"]
    return response


def by_response(frames: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Group response events by response id, in arrival order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    current: dict[str | None, str] = {}
    for frame in frames:
        if frame["type"] == "error":
            continue
        lane = frame.get("stream_id")
        if "response" in frame:
            current[lane] = frame["response"]["id"]
        groups.setdefault(current[lane], []).append(frame)
    return groups


def function_calls(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in response["output"] if item["type"] == "function_call"]


def user(text: str) -> list[dict[str, Any]]:
    return [{"type": "message", "role": "user", "content": text}]
