"""Steering over WebSocket mode (protocol.md §3.6, issue 14; pipeline/steering.py): a steered response stops at the
next token boundary and ends `incomplete` (reason `steered`) with its output so far; its successor starts by
itself on the same lane, continuing it with the steer's input. A response waiting for tool outputs gets the steer
queued (`response.steer.pending`) for the create that answers it. Every failure code, raw frames and
openai-python's typed events, on hotloop-sim, SmolLM2 and sim-engine behind both upstream backends (whose request
is cancelled).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai.types.responses import ResponseSteerAcceptedEvent, ResponseSteerFailedEvent, ResponseSteerPendingEvent

from conftest import RunningServer, start_server
from hotloop.config import Upstream
from simengine_support import SimEngineProcess
from websocket_sdk_support import run_turn, ws_client
from wsutil import TERMINAL, WEATHER, WS, check_sequence, final

PACED = {"sim_tps": "200", "sim_output_tokens": "400"}  # two seconds of text: steered long before its end
TOOL = {"sim_tool_calls": "1"}


def _steer(ws: WS, target: str, text: Any = "Answer in one line instead.") -> None:
    ws.send({"type": "response.steer", "previous_response_id": target, "input": text})


def _responses(frames: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Frames split into responses (each from its `response.created` on), steer replies with their target."""
    out: list[list[dict[str, Any]]] = []
    for frame in frames:
        if frame["type"] == "response.created":
            out.append([])
        out[-1].append(frame)
    return out


def _steer_running(ws: WS, after_deltas: int = 3, **body: Any) -> list[list[dict[str, Any]]]:
    """A create steered once `after_deltas` deltas have arrived; every frame up to its successor's end."""
    ws.create(**body)
    frames: list[dict[str, Any]] = []
    deltas, steered = 0, False
    while True:
        frame = ws.recv(timeout=60)
        frames.append(frame)
        deltas += frame["type"].endswith(".delta")
        if not steered and deltas >= after_deltas:
            _steer(ws, frames[0]["response"]["id"])
            steered = True
        if frame["type"] in TERMINAL and frame["response"]["id"] != frames[0]["response"]["id"]:
            return _responses(frames)


def _check_steered(target: list[dict[str, Any]], successor: list[dict[str, Any]], lane: str | None = None) -> None:
    check_sequence(target)  # the accepted reply is numbered in the target's own sequence
    check_sequence(successor)
    steered = final(target)
    accepted = [frame for frame in target if frame["type"] == "response.steer.accepted"]
    assert len(accepted) == 1 and accepted[0]["steer"]["id"].startswith("steer_")
    assert accepted[0]["steer"]["previous_response_id"] == steered["id"]
    assert steered["status"] == "incomplete" and steered["incomplete_details"] == {"reason": "steered"}
    message = steered["output"][-1]
    assert message["status"] == "incomplete" and message["content"][0]["text"]  # the output so far is kept
    after = final(successor)
    assert after["status"] == "completed" and after["previous_response_id"] == steered["id"]
    assert all(frame.get("stream_id") == lane for frame in target + successor)


@pytest.mark.parametrize("lane", [None, "agent_1"])
@pytest.mark.parametrize("store", [True, False], ids=["stored", "stateless"])
def test_a_steered_response_stops_and_its_successor_continues_it(
    server: RunningServer, store: bool, lane: str | None
) -> None:
    extra = {"stream_id": lane} if lane else {}
    with WS(server.ws_url) as ws:
        target, successor = _steer_running(ws, input="Tell me a long story.", metadata=PACED, store=store, **extra)
        _check_steered(target, successor, lane)
        # The successor continues the steered response: the lane goes on from it.
        after = final(successor)
        more = ws.turn(input="Thanks.", previous_response_id=after["id"], store=store, **extra)
        assert final(more)["status"] == "completed"
    if store:  # the steer's input is the successor's own input
        with server.http() as http:
            items = http.get(f"/responses/{after['id']}/input_items").json()["data"]
        assert [item["content"][0]["text"] for item in items] == ["Answer in one line instead."]


def test_a_steer_for_a_response_waiting_for_tool_output_joins_its_continuation(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        events = ws.turn(input="Weather?", tools=[WEATHER], metadata=TOOL)
        waiting = final(events)
        call = waiting["output"][-1]
        _steer(ws, waiting["id"], [{"role": "user", "content": [{"type": "input_text", "text": "Celsius, please."}]}])
        pending = ws.recv()
        assert pending["type"] == "response.steer.pending" and pending["sequence_number"] == len(events)
        assert pending["reason"] == "waiting_for_required_input"
        assert pending["required_input"] == [{"type": "function_call_output", "call_id": call["call_id"]}]
        assert pending["steer"]["previous_response_id"] == waiting["id"]
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
        answer = final(ws.turn(input=[output], previous_response_id=waiting["id"], tools=[WEATHER], metadata=TOOL))
        assert answer["status"] == "completed"
        _steer(ws, waiting["id"])  # continued now: it waits for nothing
        late = ws.recv()
        assert late["type"] == "response.steer.failed" and late["error"]["code"] == "response_already_completed"
        assert late["sequence_number"] == len(events) + 1  # the target's next number after the pending reply
    with server.http() as http:
        items = http.get(f"/responses/{answer['id']}/input_items", params={"order": "asc"}).json()["data"]
    assert [item["type"] for item in items] == ["function_call_output", "message"]  # the steer after the output
    assert items[1]["content"][0]["text"] == "Celsius, please."


@pytest.mark.parametrize(
    ("steer_input", "detail"),
    [
        ("", "non-empty"),
        ([], "non-empty"),
        (42, "non-empty"),
        ([{"role": "assistant", "content": "x"}], "user role"),
        ([{"type": "function_call_output", "call_id": "c", "output": "x"}], "type, role and content"),
        ([{"role": "user", "content": [{"type": "output_text", "text": "x"}]}], "input_text"),
        ([{"role": "user", "content": "x", "id": "msg_1"}], "type, role and content"),
    ],
)
def test_invalid_steer_input_fails_without_an_id(server: RunningServer, steer_input: Any, detail: str) -> None:
    with WS(server.ws_url) as ws:
        ws.create(input="Tell me a long story.", metadata=PACED)
        created = ws.recv()
        _steer(ws, created["response"]["id"], steer_input)
        frame = next(f for f in iter(ws.recv, None) if f["type"] == "response.steer.failed")
        assert frame["error"]["code"] == "invalid_input" and detail in frame["error"]["message"]
        assert "id" not in frame["steer"] and frame["steer"]["input"] == steer_input


def test_the_other_failures(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        _steer(ws, "resp_elsewhere")
        unknown = ws.recv()
        assert unknown["error"]["code"] == "response_not_found" and unknown["sequence_number"] == 0
        done = final(ws.turn(input="hi"))
        _steer(ws, done["id"])
        assert ws.recv()["error"]["code"] == "response_already_completed"
        broken = final(ws.turn(input="hi", metadata={"hotloop_sim_fault": "die_after:2"}))
        assert broken["status"] == "failed"
        _steer(ws, broken["id"])
        assert ws.recv()["error"]["code"] == "response_not_active"
        waiting = final(ws.turn(input="Weather?", tools=[WEATHER], metadata=TOOL))
        replies = []
        for _ in range(5):
            _steer(ws, waiting["id"])
            replies.append(ws.recv())
        assert [r["type"] for r in replies] == ["response.steer.pending"] * 4 + ["response.steer.failed"]
        assert replies[-1]["error"]["code"] == "too_many_pending_steers"
        assert [r["sequence_number"] for r in replies] == list(
            range(replies[0]["sequence_number"], len(replies) + replies[0]["sequence_number"])
        )


def test_a_successor_that_cannot_start_fails_its_steer(server: RunningServer) -> None:
    """The steer's image is unreadable: the successor is refused when it renders, so the steer fails with that."""
    bad = [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]
    with WS(server.ws_url) as ws:
        ws.create(input="Tell me a long story.", metadata=PACED)
        frames: list[dict[str, Any]] = []
        while not frames or frames[-1]["type"] != "response.steer.failed":
            frames.append(ws.recv(timeout=30))
            if len(frames) == 4:
                _steer(ws, frames[0]["response"]["id"], bad)
        steered = next(f["response"] for f in frames if f["type"] == "response.incomplete")
        failed = frames[-1]
        assert failed["error"]["code"] == "successor_creation_failed"
        assert failed["steer"]["id"].startswith("steer_") and failed["steer"]["input"] == bad
        assert failed["steer"]["previous_response_id"] == steered["id"]
        assert final(ws.turn(input="still here?"))["status"] == "completed"  # the lane goes on


def test_the_sdks_typed_steer_events(server: RunningServer) -> None:
    client = ws_client(server)
    with client.responses.connect() as conn:
        done, typed = run_turn(conn, input="hi", store=False)
        conn.response.steer(previous_response_id=done.id, input="shorter please")
        failed = conn.recv()
        assert isinstance(failed, ResponseSteerFailedEvent) and failed.error.code == "response_already_completed"
        assert failed.sequence_number == len(typed)
        waiting, _ = run_turn(conn, input="Weather?", tools=[WEATHER], metadata=TOOL, store=False)
        conn.response.steer(previous_response_id=waiting.id, input="Celsius.")
        pending = conn.recv()
        assert isinstance(pending, ResponseSteerPendingEvent) and pending.required_input[0].call_id
        conn.response.create(model="hotloop-sim", input="Tell me a long story.", metadata=PACED, store=False)
        target = conn.recv()
        conn.response.steer(previous_response_id=target.response.id, input="Stop.")  # type: ignore[union-attr]
        kinds = []
        while len([k for k in kinds if k in TERMINAL]) < 2:
            event = conn.recv()
            kinds.append(event.type)
            if isinstance(event, ResponseSteerAcceptedEvent):
                assert event.steer.previous_response_id == target.response.id  # type: ignore[union-attr]
        assert "response.steer.accepted" in kinds and kinds[-1] == "response.completed"


@pytest.fixture(scope="module")
def engine() -> Iterator[SimEngineProcess]:
    process = SimEngineProcess(tps=200, prefill_us_per_token=1, output_tokens=400).wait_ready()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def upstreams(engine: SimEngineProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    models = {
        "chat": Upstream(url=engine.base_url, read_timeout_s=30),
        "tokens": Upstream(url=engine.base_url, backend="tokens", dialect="vllm", read_timeout_s=30),
    }
    running = start_server(
        tmp_path_factory.mktemp("steer"), models=[*models, "smollm2-135m"], default_model="chat", upstreams=models
    )
    yield running
    running.stop()


@pytest.mark.parametrize("model", ["chat", "tokens", "smollm2-135m"])
def test_steering_every_backend(upstreams: RunningServer, engine: SimEngineProcess, model: str) -> None:
    """An upstream engine's request is cancelled when its response is steered; SmolLM2 stops generating."""
    engine.reset()
    body: dict[str, Any] = {"model": model, "input": "Write a long story about a lighthouse.", "store": False}
    if model == "smollm2-135m":
        body["max_output_tokens"] = 256
    with WS(upstreams.ws_url) as ws:
        target, successor = _steer_running(ws, after_deltas=2, **body)
    _check_steered(target, successor)
    if model != "smollm2-135m":
        stats = engine.wait_stats(lambda s: s["cancelled"] == 1 and s["active"] == 0)
        assert stats["cancelled"] == 1 and stats["completed"] == 1  # the steered stream, then the successor's


def test_a_steer_names_only_its_own_connections_responses(tmp_path: Path) -> None:
    """A steer names only responses of its own connection: another connection's is not found."""
    server = start_server(tmp_path, models=["hotloop-sim"])
    try:
        with WS(server.ws_url) as one, WS(server.ws_url) as two:
            one.create(input="Tell me a long story.", metadata=PACED)
            created = one.recv()
            _steer(two, created["response"]["id"])
            assert two.recv()["error"]["code"] == "response_not_found"
    finally:
        server.stop()
