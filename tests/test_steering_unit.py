"""pipeline/steering.py without a socket (protocol.md §3.6): a steer's input checked (`new_steer`), the creates it
leads to (`successor`, `with_steers`), the room for it (`check_room`) and what a response waits for
(`required_input`); a connection's answers to every steer are tested in tests/test_connection.py."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from hotloop.pipeline.steering import (
    MAX_PENDING,
    Steer,
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
