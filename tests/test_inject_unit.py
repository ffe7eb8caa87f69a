"""The inbox of a multi-agent response (pipeline/inject.py), without a server: what it commits, refuses and keeps."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from hotloop.errors import InvalidParam
from hotloop.pipeline.inject import MAX_LATE, Inbox
from hotloop.pipeline.steering import Steer
from hotloop.wire.items import FunctionCall, FunctionCallOutput

pytestmark = pytest.mark.fast

SECRET = b"k" * 32
OUTPUT = [
    FunctionCall(call_id="call_a", name="f", arguments="{}", id="fc_a", status="completed"),
    FunctionCall(call_id="call_b", name="f", arguments="{}", id="fc_b", status="completed"),
]


def raw(*call_ids: str) -> list[msgspec.Raw]:
    items = [{"type": "function_call_output", "call_id": call_id, "output": "ok"} for call_id in call_ids]
    return [msgspec.Raw(msgspec.json.encode(item)) for item in items]


def test_a_batch_is_committed_whole_or_not_at_all() -> None:
    inbox = Inbox()
    with pytest.raises(InvalidParam) as refused:
        inbox.offer(raw("call_a", "call_nope"), OUTPUT, SECRET)
    assert refused.value.param == "input[1].call_id" and not inbox.pending()
    assert inbox.offer(raw("call_a"), OUTPUT, SECRET)
    [batch] = inbox.take()
    assert isinstance(batch[0], FunctionCallOutput) and batch[0].call_id == "call_a"


def test_an_output_being_added_is_not_answered_twice() -> None:
    """Taken by the steps but not yet in the response's output: a second output for the same call is refused."""
    inbox = Inbox()
    inbox.offer(raw("call_a"), OUTPUT, SECRET)
    inbox.take()  # the steps add it to the output meanwhile
    with pytest.raises(InvalidParam) as refused:
        inbox.offer(raw("call_a"), OUTPUT, SECRET)
    assert refused.value.code == "function_call_not_found"
    assert inbox.offer(raw("call_b"), OUTPUT, SECRET)


def test_once_closed_injects_are_late_and_bounded() -> None:
    inbox = Inbox()
    inbox.offer(raw("call_a"), OUTPUT, SECRET)
    inbox.close()
    assert len(inbox.take()) == 1  # committed, not taken: still acknowledged by the turn
    for _ in range(MAX_LATE):
        assert inbox.offer(raw("call_b"), OUTPUT, SECRET) is False
    with pytest.raises(InvalidParam):
        inbox.offer(raw("call_b"), OUTPUT, SECRET)
    assert len(inbox.late) == MAX_LATE


async def test_a_wait_ends_with_a_commit_a_wake_or_its_bound() -> None:
    inbox = Inbox()
    waiter = asyncio.create_task(inbox.wait(None))
    await asyncio.sleep(0.01)
    inbox.offer(raw("call_a"), OUTPUT, SECRET)
    await asyncio.wait_for(waiter, 1)
    inbox.take()
    waiter = asyncio.create_task(inbox.wait(None))
    inbox.steer(Steer(id="steer_1", target="resp_1", input="stop", entries=[]))  # a steer ends a wait too
    await asyncio.wait_for(waiter, 1)
    assert inbox.steered.is_set() and [steer.id for steer in inbox.late_steers()] == ["steer_1"]
    assert inbox.late_steers() == []  # taken once
    inbox.take()
    await asyncio.wait_for(inbox.wait(0.01), 1)  # its bound
