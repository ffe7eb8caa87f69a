"""The floor server (`hotloop bench load --floor`): hotloop's serving stack with no pipeline, the cost of which is
what the stack alone costs for the load scenario.

The same uvicorn as `hotloop serve` (uvloop, httptools, websockets-sansio, with transports/stack.py's options, which
`server_config` uses too) runs a bare ASGI app. On each `response.create` frame it replays the frames a real
hotloop server sent for that turn of the recorded rollout (bench/recording.py) with fresh response, item and call
ids, paced like hotloop-sim: output deltas spread so that the last lands at ttft + (output_tokens - 1) / tps after
the response was announced, as the simulator's clock runs. Its usage is the recorded one, so the client sizes its
tool outputs exactly as it did against hotloop. The only work left per turn is what any server of this API must do:
decode the frame, make ids, send the events.

Run as `python -m hotloop.bench.floor --port N --recording PATH` (server_process.py `FloorProcess`), so that its CPU
is measured like hotloop's.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from hotloop import clock
from hotloop.backends.sim.backend import SLEEP_MIN_S
from hotloop.bench.clients import FIRST_OUTPUT, TIMING_EVENT, kind_of
from hotloop.bench.recording import Recording
from hotloop.config import Settings
from hotloop.transports.stack import uvicorn_options

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
OPENING = frozenset({"response.created", "response.queued", "response.in_progress"})
_encode = msgspec.json.Encoder().encode


class _Create(msgspec.Struct):
    """What the floor reads of a client frame; msgspec still parses (and skips) the rest of it."""

    type: str = ""
    previous_response_id: str | None = None


_decode_frame = msgspec.json.Decoder(_Create).decode


@dataclass(frozen=True)
class Frame:
    template: str  # the recorded frame with its ids as `{slot}` fields (str.format_map)
    due_s: float | None = None  # an output delta: when it is due after the model's start
    exact: bool = False  # the turn's first or last delta: sent on hotloop-sim's exact clock (hotloop/clock.py)
    timing_seq: int | None = None  # the `hotloop:timing_metrics` event: rebuilt with the floor's own timings


@dataclass(frozen=True)
class ReplayTurn:
    opening: list[str]  # sent before the model starts (created, in_progress)
    body: list[Frame]
    prefixes: dict[str, str]  # slot → id prefix (resp, fc, msg, call)

    def fresh_ids(self, previous: str | None) -> dict[str, str]:
        ids = {slot: f"{prefix}_{secrets.token_urlsafe(18)}" for slot, prefix in self.prefixes.items()}
        if previous is not None:
            ids["previous"] = previous
        return ids


def _slots(terminal: str) -> dict[str, str]:
    """The recorded ids of a turn (from its terminal event) → their slot names."""
    response = msgspec.json.decode(terminal)["response"]
    slots = {response["id"]: "response"}
    if response.get("previous_response_id"):
        slots[response["previous_response_id"]] = "previous"
    for index, item in enumerate(response.get("output") or []):
        for key, slot in (("id", f"item{index}"), ("call_id", f"call{index}")):
            if item.get(key):
                slots[item[key]] = slot
    return slots


def compile_turn(frames: list[str], ttft_ms: float, tps: float) -> ReplayTurn:
    """A recorded turn as templates: ids become slots, deltas get their due times, the timing event is marked."""
    slots = _slots(frames[-1])
    pattern = re.compile("|".join(re.escape(recorded) for recorded in slots))

    def template(frame: str) -> str:
        escaped = frame.replace("{", "{{").replace("}", "}}")  # ids never hold braces
        return pattern.sub(lambda match: "{" + slots[match.group(0)] + "}", escaped)

    kinds = [kind_of(frame) for frame in frames]
    output_tokens = int(msgspec.json.decode(frames[-1])["response"]["usage"]["output_tokens"])
    dues = due_times(sum(kind in FIRST_OUTPUT for kind in kinds), ttft_ms, tps, output_tokens)
    due, ends = iter(enumerate(dues)), {0, len(dues) - 1}
    opening, body = [], []
    for frame, kind in zip(frames, kinds, strict=True):
        if kind in OPENING:
            opening.append(template(frame))
        elif kind in FIRST_OUTPUT:
            index, due_s = next(due)
            body.append(Frame(template(frame), due_s=due_s, exact=index in ends))
        elif kind == TIMING_EVENT:
            body.append(Frame("", timing_seq=int(msgspec.json.decode(frame)["sequence_number"])))
        else:
            body.append(Frame(template(frame)))
    prefixes = {slot: recorded.partition("_")[0] for recorded, slot in slots.items() if slot != "previous"}
    return ReplayTurn(opening, body, prefixes)


def due_times(deltas: int, ttft_ms: float, tps: float, output_tokens: int) -> list[float]:
    """When each of a turn's output deltas is due after the model's start: hotloop-sim's clock, first token at
    ttft, the last (output_tokens - 1) / tps later; one delta per token, or spread evenly if hotloop merges them."""
    if deltas < 1:
        raise ValueError("a recorded turn has no output delta to pace")
    decode_s = max(0, output_tokens - 1) / tps
    return [ttft_ms / 1000.0 + decode_s * (index / (deltas - 1) if deltas > 1 else 0.0) for index in range(deltas)]


class Conversation:
    """One WebSocket's chain: which recorded turn comes next, and the id a continuation must name."""

    def __init__(self) -> None:
        self.last_id: str | None = None
        self.index = -1

    def next_index(self, previous: str | None, turns: int) -> int | None:
        """The turn to replay for a create naming `previous`; None if it names a response this chain did not end
        with (hotloop would answer previous_response_not_found)."""
        if previous is None:
            return 0
        if previous != self.last_id:
            return None
        return min(self.index + 1, turns - 1)


def _not_found(previous: str) -> str:
    error = {
        "type": "invalid_request_error",
        "code": "previous_response_not_found",
        "message": f"Previous response with id '{previous}' not found.",
        "param": "previous_response_id",
    }
    return _encode({"type": "error", "status": 400, "error": error}).decode()


class FloorApp:
    """The bare ASGI app: GET /healthz, and a WebSocket at any path that replays the recording."""

    def __init__(self, recording: Recording) -> None:
        self.turns = [compile_turn(frames, recording.ttft_ms, recording.tps) for frames in recording.turns]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(receive, send)
        elif scope["type"] == "http":
            await _health(scope, send)
        elif scope["type"] == "lifespan":
            await _lifespan(receive, send)

    async def _websocket(self, receive: Receive, send: Send) -> None:
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        conversation = Conversation()
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("text")
            await self.frame(data if data is not None else message.get("bytes") or b"", conversation, send)

    async def frame(self, data: str | bytes, conversation: Conversation, send: Send) -> None:
        """One client frame on `conversation`'s WebSocket: a create's turn replayed through `send` (ASGI messages)."""
        received = time.perf_counter()
        create = _decode_frame(data)
        if create.type != "response.create":
            return  # response.processed and the like: no reply
        index = conversation.next_index(create.previous_response_id, len(self.turns))
        if index is None:
            await send({"type": "websocket.send", "text": _not_found(str(create.previous_response_id))})
            return
        turn = self.turns[index]
        ids = turn.fresh_ids(create.previous_response_id)
        conversation.last_id, conversation.index = ids["response"], index
        await play(turn, ids, send, received)


async def play(turn: ReplayTurn, ids: dict[str, str], send: Send, received: float) -> None:
    """Send one turn's frames, the deltas on the simulated model's clock."""
    for template in turn.opening:
        await send({"type": "websocket.send", "text": template.format_map(ids)})
    start = time.perf_counter()  # the model starts once the response is announced, as in hotloop's turn
    last = start
    for frame in turn.body:
        if frame.due_s is not None:
            if frame.exact:
                await clock.until(start + frame.due_s)
            elif (delay := start + frame.due_s - time.perf_counter()) > SLEEP_MIN_S:
                await asyncio.sleep(delay)
            last = time.perf_counter()
            text = frame.template.format_map(ids)
        elif frame.timing_seq is not None:
            text = _timing_event(ids["response"], frame.timing_seq, start - received, time.perf_counter() - last)
        else:
            text = frame.template.format_map(ids)
        await send({"type": "websocket.send", "text": text})


def _timing_event(response_id: str, sequence: int, pre_s: float, post_s: float) -> str:
    """The floor's own share of the turn, where hotloop reports its stages: request → model start, last token →
    terminal event."""
    timings = {"pre_inference": pre_s * 1000.0, "post_inference": post_s * 1000.0}
    event = {"type": TIMING_EVENT, "response_id": response_id, "timings": timings, "sequence_number": sequence}
    return _encode(event).decode()


async def _health(scope: Scope, send: Send) -> None:
    status, body = (200, b"ok") if scope.get("path") == "/healthz" else (404, b"not found")
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m hotloop.bench.floor", description="the floor server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--recording", type=Path, required=True, help="a Recording saved as JSON")
    args = parser.parse_args(argv)
    # The bench's hotloop process's settings (server_process.py): no pings, warnings only.
    settings = Settings(host="127.0.0.1", port=args.port, log_level="warning", ws_ping_interval_s=0)
    app = FloorApp(Recording.load(args.recording))
    uvicorn.Server(uvicorn.Config(app, **uvicorn_options(settings))).run()


if __name__ == "__main__":
    main()
