"""pipeline/steering.py without a socket (protocol.md §3.6): a steer's input checked (`new_steer`), the creates it
leads to (`successor`, `with_steers`), the room for it (`check_room`), what a response waits for
(`required_input`), and a connection's answers to every steer (`Steering`)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from hotloop.pipeline.steering import (
    ENDED_KEPT,
    MAX_PENDING,
    Steer,
    Steering,
    SteerRefused,
    check_room,
    new_steer,
    required_input,
    successor,
    with_steers,
)
from hotloop.wire.items import CustomToolCall, FunctionCall, Message, OutputItem, OutputText
from hotloop.wire.request import CreateRequest

pytestmark = pytest.mark.fast

CALLS: list[OutputItem] = [
    Message(role="assistant", content=[OutputText(text="Let me look.")]),
    FunctionCall(call_id="c1", name="shell", arguments="{}"),
    CustomToolCall(call_id="c2", name="patch", input="diff"),
]
STUBS = [
    {"type": "function_call_output", "call_id": "c1"},
    {"type": "custom_tool_call_output", "call_id": "c2"},
]


def refused(target: Any, raw: Any) -> SteerRefused:
    with pytest.raises(SteerRefused) as info:
        new_steer(target, raw)
    return info.value


def steer(target: str = "resp_1", text: str = "Shorter, please.") -> Steer:
    return new_steer(target, text)


def inputs(request: CreateRequest) -> list[Any]:
    assert isinstance(request.input, list)
    return [msgspec.json.decode(raw) for raw in request.input]


# -- new_steer ----------------------------------------------------------------------------------------------------


def test_a_text_steer() -> None:
    made = new_steer("resp_1", "Shorter, please.")
    assert made.id.startswith("steer_") and made.target == "resp_1" and made.input == "Shorter, please."
    assert made.entries == [{"role": "user", "content": "Shorter, please."}]
    assert made.ref() == {"id": made.id, "previous_response_id": "resp_1"}
    assert made.failed_ref() == {**made.ref(), "input": "Shorter, please."}
    assert new_steer("resp_1", "again").id != made.id


def test_a_steer_of_user_messages() -> None:
    messages = [
        {"role": "user", "content": "Stop."},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Look at this:"},
                {"type": "input_image", "image_url": "https://example.com/a.png"},
                {"type": "input_file", "file_id": "file_1"},
            ],
        },
    ]
    made = new_steer("resp_1", messages)
    assert made.entries == messages and made.input is messages


@pytest.mark.parametrize("target", [None, "", 7, ["resp_1"]])
def test_a_steer_names_its_target(target: Any) -> None:
    error = refused(target, "hi")
    assert error.code == "invalid_input" and "previous_response_id" in error.message


@pytest.mark.parametrize("raw", ["", [], None, {"role": "user", "content": "hi"}, 3])
def test_a_steer_has_input(raw: Any) -> None:
    error = refused("resp_1", raw)
    assert error.code == "invalid_input" and "non-empty" in error.message


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("hi", "only messages"),
        ({"role": "user", "content": "hi", "id": "msg_1"}, "only messages"),
        ({"type": "function_call_output", "call_id": "c1", "output": "x"}, "only messages"),
        ({"role": "assistant", "content": "hi"}, "user role"),
        ({"role": "system", "content": "hi"}, "user role"),
        ({"content": "hi"}, "user role"),
        ({"role": "user", "content": [{"type": "output_text", "text": "hi"}]}, "input[1].content"),
        ({"role": "user", "content": ["hi"]}, "input[1].content"),
        ({"role": "user", "content": 5}, "input[1].content"),
        ({"role": "user", "content": None}, "input[1].content"),
    ],
)
def test_a_steer_takes_only_user_messages_of_input_parts(entry: Any, says: str) -> None:
    error = refused("resp_1", [{"role": "user", "content": "fine"}, entry])
    assert error.code == "invalid_input" and says in error.message, error.message
    if says != "input[1].content":
        assert error.message.startswith("input[1]")


def test_a_steer_part_is_normalized() -> None:
    """A part of an allowed type that does not decode is refused with the normalize stage's message."""
    error = refused("resp_1", [{"role": "user", "content": [{"type": "input_text"}]}])
    assert error.code == "invalid_input" and "input[0]" in error.message and "text" in error.message


# -- successor / with_steers --------------------------------------------------------------------------------------


def test_the_successor_continues_the_steered_response() -> None:
    request = CreateRequest(model="m", input="Tell me a story.", previous_response_id="resp_0", generate=False)
    first, second = steer("resp_1", "Shorter."), new_steer("resp_1", [{"role": "user", "content": "In French."}])
    created = successor(request, "resp_1", [first, second])
    assert created.previous_response_id == "resp_1" and created.generate is None and created.model == "m"
    assert inputs(created) == [{"role": "user", "content": "Shorter."}, {"role": "user", "content": "In French."}]
    assert request.input == "Tell me a story."  # the steered request itself is unchanged


def test_a_conversations_successor_continues_the_conversation() -> None:
    request = CreateRequest(model="m", input="hi", conversation="conv_1")
    created = successor(request, "resp_1", [steer()])
    assert created.previous_response_id is None and created.conversation == "conv_1"
    assert inputs(created) == [{"role": "user", "content": "Shorter, please."}]


def test_with_steers_puts_the_steers_after_the_creates_own_input() -> None:
    outputs = [msgspec.Raw(b'{"type":"function_call_output","call_id":"c1","output":"ok"}')]
    request = CreateRequest(model="m", input=outputs, previous_response_id="resp_1")
    assert with_steers(request, []) is request
    joined = with_steers(request, [steer(text="one"), steer(text="two")])
    assert inputs(joined) == [
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ]
    assert joined.previous_response_id == "resp_1"
    text = with_steers(CreateRequest(model="m", input="own"), [steer(text="one")])
    assert inputs(text) == [{"role": "user", "content": "own"}, {"role": "user", "content": "one"}]
    nothing = with_steers(CreateRequest(model="m"), [steer(text="one")])
    assert inputs(nothing) == [{"role": "user", "content": "one"}]


# -- check_room / required_input ----------------------------------------------------------------------------------


def test_check_room() -> None:
    waiting: list[Steer] = []
    for _ in range(MAX_PENDING):
        check_room(waiting)
        waiting.append(steer())
    with pytest.raises(SteerRefused) as info:
        check_room(waiting)
    assert info.value.code == "too_many_pending_steers" and str(MAX_PENDING) in info.value.message


def test_required_input_stubs_each_call() -> None:
    assert required_input(CALLS) == STUBS
    assert required_input([Message(role="assistant", content=[OutputText(text="done")])]) == []
    assert required_input([]) == []


# -- Steering: a connection's answers -----------------------------------------------------------------------------


def answer_code(steering: Steering, made: Steer) -> str:
    with pytest.raises(SteerRefused) as info:
        steering.answer(made)
    return info.value.code


def test_a_steer_for_no_response_of_this_connection() -> None:
    assert answer_code(Steering(), steer("resp_x")) == "response_not_found"


@pytest.mark.parametrize("status", ["completed", "incomplete"])
def test_a_response_with_calls_queues_steers_until_a_create_continues_it(status: str) -> None:
    steering = Steering()
    steering.end("resp_1", status, CALLS)
    first, second = steer(text="one"), steer(text="two")
    assert steering.answer(first) == STUBS  # pending: the outputs it waits for
    assert steering.answer(second) == STUBS
    assert steering.continued("resp_1") == [first, second]
    assert steering.continued("resp_1") == []  # taken once
    # Continued, it waits for nothing: a later steer finds it ended.
    assert answer_code(steering, steer()) == "response_already_completed"


def test_at_most_max_pending_steers_wait() -> None:
    steering = Steering()
    steering.end("resp_1", "completed", CALLS)
    for _ in range(MAX_PENDING):
        steering.answer(steer())
    assert answer_code(steering, steer()) == "too_many_pending_steers"
    assert len(steering.continued("resp_1")) == MAX_PENDING


@pytest.mark.parametrize(
    ("status", "steered", "code"),
    [
        ("completed", False, "response_already_completed"),
        ("incomplete", False, "response_already_completed"),  # e.g. max_output_tokens: it ended
        ("incomplete", True, "response_not_active"),  # steered already: its successor takes steers
        ("failed", False, "response_not_active"),
        ("cancelled", False, "response_not_active"),
    ],
)
def test_a_response_that_waits_for_nothing(status: str, steered: bool, code: str) -> None:
    steering = Steering()
    steering.end("resp_1", status, [Message(role="assistant", content=[OutputText(text="x")])], steered=steered)
    assert answer_code(steering, steer()) == code
    assert steering.queued == {}


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_calls_of_a_failed_response_wait_for_nothing(status: str) -> None:
    steering = Steering()
    steering.end("resp_1", status, CALLS)
    assert steering.ended["resp_1"].waiting == []
    assert answer_code(steering, steer()) == "response_not_active"


def test_a_steered_response_with_calls_waits_for_them() -> None:
    steering = Steering()
    steering.end("resp_1", "incomplete", CALLS, steered=True)
    assert steering.answer(steer()) == STUBS


def test_queue_checks_the_room() -> None:
    steering = Steering()
    for _ in range(MAX_PENDING):
        steering.queue(steer("resp_running"))  # a steer for a response still generating may be queued too
    with pytest.raises(SteerRefused) as info:
        steering.queue(steer("resp_running"))
    assert info.value.code == "too_many_pending_steers"
    assert len(steering.continued("resp_running")) == MAX_PENDING


def test_continued() -> None:
    steering = Steering()
    assert steering.continued(None) == [] and steering.continued("resp_unknown") == []
    steering.end("resp_1", "completed", CALLS)
    assert steering.continued("resp_1") == []  # nothing queued, but it waits no more
    assert answer_code(steering, steer()) == "response_already_completed"


def test_only_the_latest_ended_responses_are_kept() -> None:
    steering = Steering()
    steering.end("resp_0", "completed", CALLS)
    steering.answer(steer("resp_0"))
    for n in range(1, ENDED_KEPT + 1):
        steering.end(f"resp_{n}", "completed", CALLS)
    assert len(steering.ended) == ENDED_KEPT and "resp_0" not in steering.ended
    assert "resp_0" not in steering.queued  # its queued steers went with it
    assert answer_code(steering, steer("resp_0")) == "response_not_found"
    assert steering.answer(steer("resp_1")) == STUBS
