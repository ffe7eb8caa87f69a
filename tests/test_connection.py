"""A WebSocket connection's protocol driven without a socket (pipeline/connection/protocol.py; protocol.md §3.6, §3.8,
§3.9): frames in, actions out, the runs admitted and their events pulled one at a time by the test as the
transport would, on a built service (hotloop-sim). Every steer outcome, the successor chain, append, the refused
create and the parent it evicts. Lanes, limits and closes: tests/test_lanes.py."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any

import msgspec
import pytest

from hotloop.errors import HotloopError
from hotloop.pipeline.admission.entry import admit
from hotloop.pipeline.admission.lanes import LaneLimits
from hotloop.pipeline.connection.actions import Action, Enqueue, Run, Send
from hotloop.pipeline.connection.protocol import ConnectionProtocol
from hotloop.pipeline.connection.responses import Stream
from hotloop.pipeline.service import Service
from hotloop.pipeline.steering import MAX_PENDING
from hotloop.wire.events import Event

pytestmark = pytest.mark.fast

SIM = "hotloop-sim"
LONG = {"sim_output_tokens": "60"}
TOOL = {"sim_tool_calls": "1"}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
Frame = dict[str, Any]


@pytest.fixture
def service(sim_service: Service) -> Service:
    return sim_service


@pytest.fixture
def protocol(service: Service) -> ConnectionProtocol:
    return ConnectionProtocol(service.session("owner", caching=True), LaneLimits(), service.drain)


class Running:
    """A run admitted, its events pulled by hand the way the transport sends them (one count per event)."""

    def __init__(self, stream: Stream, events: AsyncGenerator[Event, None]) -> None:
        self.stream = stream
        self.events = events
        self.frames: list[Frame] = []

    @property
    def id(self) -> str:
        return self.stream.turn.response.id

    async def pull(self, until: Callable[[Frame], bool] | None = None) -> list[Frame]:
        """Send events until one satisfies `until` (or the stream's end); every frame so far."""
        async for event in self.events:
            self.stream.sent += 1
            self.frames.append(msgspec.json.decode(event.data))
            if until is not None and until(self.frames[-1]):
                break
        return self.frames

    async def to_delta(self) -> None:
        await self.pull(lambda frame: frame["type"] == "response.output_text.delta")


async def _start(service: Service, protocol: ConnectionProtocol, run: Action) -> Running:
    assert isinstance(run, Run)
    turn = await admit(service, protocol.session, run.create, run.options)
    return Running(protocol.started(run, turn), turn.events())


def _head(protocol: ConnectionProtocol, frame: Frame) -> list[Action]:
    """A frame that joins a lane, taken straight to the head of it."""
    [enqueue] = protocol.receive_frame(msgspec.json.encode(frame))
    assert isinstance(enqueue, Enqueue)
    protocol.dequeued()
    return protocol.at_head(enqueue.work)


async def _create(service: Service, protocol: ConnectionProtocol, **body: Any) -> Running:
    [run] = _head(protocol, {"type": "response.create", "model": SIM, "store": False, **body})
    return await _start(service, protocol, run)


async def _ended(service: Service, protocol: ConnectionProtocol, **body: Any) -> Running:
    """A create run to its end, with nothing following it."""
    running = await _create(service, protocol, **body)
    await running.pull()
    assert protocol.ended(running.stream) == []
    return running


def _steer(protocol: ConnectionProtocol, target: str | None, text: Any = "Shorter, please.") -> list[Action]:
    event = {"type": "response.steer", "previous_response_id": target, "input": text}
    return protocol.receive_frame(msgspec.json.encode(event))


def _replies(actions: list[Action]) -> list[Frame]:
    assert all(isinstance(action, Send) for action in actions), actions
    return [msgspec.json.decode(action.data) for action in actions if isinstance(action, Send)]


def _reply(actions: list[Action]) -> Frame:
    [reply] = _replies(actions)
    return reply


def _failure(actions: list[Action]) -> tuple[str, int, str | None]:
    reply = _reply(actions)
    assert reply["type"] == "response.steer.failed" and reply["error"]["type"] == "invalid_request_error"
    return reply["error"]["code"], reply["sequence_number"], reply.get("stream_id")


def _inputs(run: Run) -> list[Frame]:
    raw = run.create.input
    assert isinstance(raw, list)
    return [msgspec.json.decode(item) for item in raw]


# -- accepted ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lane", [None, "agent_1"])
async def test_a_steer_is_accepted_in_the_generating_responses_stream_and_its_successor_continues_it(
    service: Service, protocol: ConnectionProtocol, lane: str | None
) -> None:
    extra = {"stream_id": lane} if lane else {}
    target = await _create(service, protocol, input="Tell me a story.", metadata=LONG, **extra)
    await target.to_delta()
    assert _steer(protocol, target.id) == []  # it reaches the turn: the reply is in the turn's own stream
    frames = await target.pull()
    assert [frame["sequence_number"] for frame in frames] == list(range(len(frames)))
    assert all(frame.get("stream_id") == lane for frame in frames)
    [accepted] = [frame for frame in frames if frame["type"] == "response.steer.accepted"]
    assert accepted["steer"]["previous_response_id"] == target.id and accepted["steer"]["id"].startswith("steer_")
    assert frames[-1]["type"] == "response.incomplete"
    assert frames[-1]["response"]["incomplete_details"] == {"reason": "steered"}

    [run] = protocol.ended(target.stream)  # nothing to acknowledge late: only the successor, on the same lane
    assert isinstance(run, Run) and run.lane == lane and [steer.id for steer in run.steers] == [accepted["steer"]["id"]]
    assert run.create.previous_response_id == target.id
    assert _inputs(run) == [{"role": "user", "content": "Shorter, please."}]
    successor = await _start(service, protocol, run)
    after = (await successor.pull())[-1]
    assert after["type"] == "response.completed" and after["response"]["previous_response_id"] == target.id
    assert after.get("stream_id") == lane
    assert protocol.ended(successor.stream) == []


async def test_steers_before_the_successor_starts_join_its_input_and_a_successor_can_be_steered_again(
    service: Service, protocol: ConnectionProtocol
) -> None:
    target = await _create(service, protocol, input="Tell me a story.", metadata=LONG)
    await target.to_delta()
    assert _steer(protocol, target.id, "First.") == [] and _steer(protocol, target.id, "Second.") == []
    frames = await target.pull()
    assert [f["type"] for f in frames].count("response.steer.accepted") == 2
    [run] = protocol.ended(target.stream)
    assert isinstance(run, Run)
    assert [entry["content"] for entry in _inputs(run)] == ["First.", "Second."]  # in their order

    successor = await _start(service, protocol, run)  # the successor gets LONG too (its request, copied)
    await successor.to_delta()
    assert _steer(protocol, successor.id, "Third.") == []
    assert (await successor.pull())[-1]["response"]["incomplete_details"] == {"reason": "steered"}
    [next_run] = protocol.ended(successor.stream)
    assert isinstance(next_run, Run) and next_run.create.previous_response_id == successor.id
    third = await _start(service, protocol, next_run)
    last = (await third.pull())[-1]["response"]
    assert last["status"] == "completed" and last["previous_response_id"] == successor.id
    assert protocol.ended(third.stream) == []


async def test_a_steer_too_late_for_the_stream_is_accepted_after_its_terminal_event(
    service: Service, protocol: ConnectionProtocol
) -> None:
    target = await _create(service, protocol, input="hi", stream_id="a")
    await target.pull(lambda frame: frame["type"] == "response.completed")  # the terminal event has gone out
    assert _steer(protocol, target.id) == []
    frames = await target.pull()
    accepted, run = protocol.ended(target.stream)
    reply = _reply([accepted])
    assert reply["type"] == "response.steer.accepted" and reply["steer"]["previous_response_id"] == target.id
    assert (reply["sequence_number"], reply["stream_id"]) == (len(frames), "a")  # after the stream's last event
    assert isinstance(run, Run) and run.lane == "a" and run.create.previous_response_id == target.id


# -- pending ------------------------------------------------------------------------------------------------------


async def test_a_steer_for_a_response_waiting_for_tool_output_is_pending_then_joins_its_continuation(
    service: Service, protocol: ConnectionProtocol
) -> None:
    waiting = await _ended(service, protocol, input="Weather?", tools=[WEATHER], metadata=TOOL, stream_id="a")
    call = waiting.frames[-1]["response"]["output"][-1]
    assert call["type"] == "function_call"
    parts = [{"role": "user", "content": [{"type": "input_text", "text": "Celsius."}]}]
    first, second = _reply(_steer(protocol, waiting.id, parts)), _reply(_steer(protocol, waiting.id, "And wind."))
    for number, pending in enumerate((first, second), start=len(waiting.frames)):
        assert pending["type"] == "response.steer.pending" and pending["reason"] == "waiting_for_required_input"
        assert pending["required_input"] == [{"type": "function_call_output", "call_id": call["call_id"]}]
        assert (pending["sequence_number"], pending["stream_id"]) == (number, "a")
        assert pending["steer"]["previous_response_id"] == waiting.id

    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
    body = {"input": [output], "previous_response_id": waiting.id, "tools": [WEATHER], "stream_id": "a"}
    [run] = _head(protocol, {"type": "response.create", "model": SIM, "store": False, **body})
    assert isinstance(run, Run) and run.steers == ()  # not a successor: a refusal would be the create's own error
    assert [entry.get("type", "message") for entry in _inputs(run)] == ["function_call_output", "message", "message"]
    assert [entry["content"] for entry in _inputs(run)[1:]] == [parts[0]["content"], "And wind."]
    answer = await _start(service, protocol, run)
    assert (await answer.pull())[-1]["response"]["status"] == "completed"
    # Continued now: it waits for nothing.
    assert _failure(_steer(protocol, waiting.id)) == ("response_already_completed", len(waiting.frames) + 2, "a")


# -- failures -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", [], 42, [{"role": "assistant", "content": "x"}]])
async def test_invalid_input_fails_without_an_id(protocol: ConnectionProtocol, text: Any) -> None:
    reply = _reply(_steer(protocol, "resp_1", text))
    assert reply["error"]["code"] == "invalid_input" and reply["steer"] == {
        "previous_response_id": "resp_1",
        "input": text,
    }
    assert _failure(_steer(protocol, None))[0] == "invalid_input"  # no response named


async def test_an_unknown_response_is_not_found(protocol: ConnectionProtocol) -> None:
    assert _failure(_steer(protocol, "resp_elsewhere")) == ("response_not_found", 0, None)
    assert _failure(_steer(protocol, "resp_elsewhere")) == ("response_not_found", 0, None)  # no number taken


async def test_an_ended_response_that_waits_for_nothing_is_already_completed(
    service: Service, protocol: ConnectionProtocol
) -> None:
    done = await _ended(service, protocol, input="hi", stream_id="b")
    count = len(done.frames)
    assert _failure(_steer(protocol, done.id)) == ("response_already_completed", count, "b")
    assert _failure(_steer(protocol, done.id)) == ("response_already_completed", count + 1, "b")


async def test_a_failed_or_steered_response_is_not_active(service: Service, protocol: ConnectionProtocol) -> None:
    broken = await _ended(service, protocol, input="hi", metadata={"hotloop_sim_fault": "die_after:2"})
    assert broken.frames[-1]["type"] == "response.failed"
    assert _failure(_steer(protocol, broken.id))[0] == "response_not_active"
    steered = await _create(service, protocol, input="Tell me a story.", metadata=LONG)
    await steered.to_delta()
    _steer(protocol, steered.id)
    await steered.pull()
    [run] = protocol.ended(steered.stream)
    assert _failure(_steer(protocol, steered.id))[0] == "response_not_active"  # steered already
    await (await _start(service, protocol, run)).pull()


async def test_steers_for_a_response_that_then_fails_are_not_active(
    service: Service, protocol: ConnectionProtocol
) -> None:
    target = await _create(service, protocol, input="hi", metadata={**LONG, "hotloop_sim_fault": "die_after:3"})
    for _ in range(3):  # the third token is the last before the fault
        await target.to_delta()
    assert _steer(protocol, target.id) == []
    assert (await target.pull())[-1]["type"] == "response.failed"  # the fault came before the next token boundary
    code, number, lane = _failure(protocol.ended(target.stream))
    assert (code, number, lane) == ("response_not_active", len(target.frames), None)


async def test_too_many_pending_steers_for_a_waiting_response(service: Service, protocol: ConnectionProtocol) -> None:
    waiting = await _ended(service, protocol, input="Weather?", tools=[WEATHER], metadata=TOOL)
    replies = [_reply(_steer(protocol, waiting.id)) for _ in range(MAX_PENDING + 1)]
    assert [reply["type"] for reply in replies] == ["response.steer.pending"] * MAX_PENDING + ["response.steer.failed"]
    assert replies[-1]["error"]["code"] == "too_many_pending_steers"
    first = len(waiting.frames)
    assert [reply["sequence_number"] for reply in replies] == list(range(first, first + MAX_PENDING + 1))


async def test_too_many_steers_for_a_generating_response_and_the_numbers_of_replies_during_its_stream(
    service: Service, protocol: ConnectionProtocol
) -> None:
    target = await _create(service, protocol, input="Tell me a story.", metadata=LONG, stream_id="a")
    await target.to_delta()
    sent = len(target.frames)
    assert all(_steer(protocol, target.id) == [] for _ in range(MAX_PENDING))
    # Outside the stream: the number after its last event, then the next until it sends again (§3.6).
    assert _failure(_steer(protocol, target.id)) == ("too_many_pending_steers", sent, "a")
    assert _failure(_steer(protocol, target.id, "")) == ("invalid_input", sent + 1, "a")
    await target.pull(lambda frame: True)  # one more event out
    assert _failure(_steer(protocol, target.id, "")) == ("invalid_input", sent + 1, "a")
    frames = await target.pull()
    assert [f["type"] for f in frames].count("response.steer.accepted") == MAX_PENDING
    [run] = protocol.ended(target.stream)
    assert isinstance(run, Run) and len(run.steers) == MAX_PENDING
    await (await _start(service, protocol, run)).pull()


async def test_a_successor_that_cannot_start_fails_its_steers(service: Service, protocol: ConnectionProtocol) -> None:
    """The steer's image is unreadable: its successor is refused when it renders, and the steer fails with that."""
    bad = [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]
    target = await _create(service, protocol, input="Tell me a story.", metadata=LONG, stream_id="a")
    await target.to_delta()
    assert _steer(protocol, target.id, bad) == []
    frames = await target.pull()
    [run] = protocol.ended(target.stream)
    assert isinstance(run, Run)
    with pytest.raises(HotloopError) as refused:
        await admit(service, protocol.session, run.create, run.options)
    failed = _reply(protocol.refused(run, refused.value))
    assert failed["type"] == "response.steer.failed" and failed["error"]["code"] == "successor_creation_failed"
    assert failed["error"]["message"] == refused.value.message
    assert failed["steer"]["id"] == run.steers[0].id and failed["steer"]["input"] == bad
    assert failed["steer"]["previous_response_id"] == target.id
    assert (failed["sequence_number"], failed["stream_id"]) == (len(frames), "a")
    await _ended(service, protocol, input="still here?", stream_id="a")  # the lane goes on


# -- creates --------------------------------------------------------------------------------------------------


async def test_a_refused_create_is_answered_on_its_lane(service: Service, protocol: ConnectionProtocol) -> None:
    [run] = _head(
        protocol, {"type": "response.create", "model": SIM, "previous_response_id": "resp_x", "stream_id": "a"}
    )
    assert isinstance(run, Run)
    with pytest.raises(HotloopError) as refused:
        await admit(service, protocol.session, run.create, run.options)
    error = _reply(protocol.refused(run, refused.value))
    assert error["type"] == "error" and error["stream_id"] == "a"
    assert error["error"]["code"] == "previous_response_not_found"


async def test_append_continues_the_default_lanes_latest_response(
    service: Service, protocol: ConnectionProtocol
) -> None:
    warmup = await _ended(service, protocol, input="hi", instructions="Be brief.", generate=False)
    [run] = _head(protocol, {"type": "response.append", "input": "more"})
    assert isinstance(run, Run) and run.lane is None
    create = run.create
    assert (create.previous_response_id, create.input, create.instructions) == (warmup.id, "more", "Be brief.")
    assert create.generate is None  # an append after a warmup generates


async def test_a_create_that_does_not_decode_evicts_its_parent_from_its_lane(
    service: Service, protocol: ConnectionProtocol
) -> None:
    parent = await _ended(service, protocol, input="hi", stream_id="a")
    session = protocol.session
    assert session.cached(parent.id) is not None
    frame = {"type": "response.create", "temperature": "hot", "previous_response_id": parent.id, "stream_id": "a"}
    error = _reply(_head(protocol, frame))
    assert (error["type"], error["stream_id"], error["error"]["param"]) == ("error", "a", "temperature")
    assert session.cached(parent.id) is None  # §3.8.3: a failed continuation evicts its parent
