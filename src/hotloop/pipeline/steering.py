"""Steering (protocol.md §3.6, openai-python's `response.steer`; issue 14), the pure part: what a steer is, what it
may carry, and the creates it makes. Which reply a steer gets is decided by the connection's protocol
(pipeline/connection/protocol.py); the WebSocket transport sends it (transports/websocket.py).

- A steer naming a response generating on this connection is **accepted** (`response.steer.accepted`, in that
  response's own event sequence): the generation stops at the next token boundary, the response ends
  `response.incomplete` (reason `steered`) with its output so far, and a **successor** starts by itself on the
  same lane: the steered response's request with `previous_response_id` = the steered response and the steer's
  input. Several steers before the successor starts join its input, in their order (at most `MAX_PENDING`).
- A steer for a response that ended with tool calls still unanswered is **pending** (`response.steer.pending`,
  reason `waiting_for_required_input`, the outputs it waits for as `required_input` stubs): the next create that
  continues that response gets the steer's input after its own. A steered response that stopped with calls in its
  output waits the same way.
- Otherwise it **fails** (`response.steer.failed`): `invalid_input` (only user messages of text, image and file
  parts), `response_not_found` (not a response of this connection), `response_already_completed` (it ended and
  waits for nothing), `response_not_active` (it failed, was cancelled or was steered already),
  `too_many_pending_steers`, and `successor_creation_failed` (the successor was refused, with its reason).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from hotloop.errors import HotloopError
from hotloop.ids import new_id
from hotloop.pipeline.normalize import normalize_item
from hotloop.tools.registry import OUTPUT_OF, answered, pair
from hotloop.wire.items import ResponseItem
from hotloop.wire.request import CreateRequest

MAX_PENDING = 4  # steers waiting for one response
WAITING = "waiting_for_required_input"
_MESSAGE_KEYS = frozenset({"type", "role", "content"})
_PARTS = frozenset({"input_text", "input_image", "input_file"})


class Steer(msgspec.Struct, frozen=True):
    id: str
    target: str  # the steered response
    input: Any  # as the client sent it (echoed in a failure)
    entries: list[Any]  # the input as a list of user messages (checked and normalized once)

    def ref(self) -> dict[str, Any]:
        return {"id": self.id, "previous_response_id": self.target}

    def failed_ref(self) -> dict[str, Any]:
        """The steer as a failure returns it: its id, its target and its input, uncommitted."""
        return {**self.ref(), "input": self.input}


class SteerRefused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def new_steer(target: str | None, raw: Any) -> Steer:
    """A steer with its input checked and normalized; raises `SteerRefused` (`invalid_input`)."""
    if not isinstance(target, str) or not target:
        raise SteerRefused("invalid_input", "previous_response_id must name the response to steer.")
    entries = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw
    if not isinstance(entries, list) or not entries or (isinstance(raw, str) and not raw):
        raise SteerRefused("invalid_input", "input must be a non-empty string or a non-empty list of user messages.")
    for index, entry in enumerate(entries):
        _check_message(entry, index)
        try:
            normalize_item(entry, f"input[{index}]")
        except HotloopError as exc:
            raise SteerRefused("invalid_input", exc.message) from None
    return Steer(id=new_id("steer"), target=target, input=raw, entries=entries)


def successor(request: CreateRequest, target: str, steers: list[Steer]) -> CreateRequest:
    """The create of a steered response's successor: its request again, continuing it with the steers' input (a
    conversation's response: continuing the conversation)."""
    chain = {"previous_response_id": target} if request.conversation is None else {}
    return msgspec.structs.replace(request, input=_raw(steers), generate=None, **chain)


def with_steers(request: CreateRequest, steers: list[Steer]) -> CreateRequest:
    """A create continuing a response that steers waited for: their input after its own (after its tool
    outputs, where a chat template and an engine expect the outputs: right after the calls)."""
    if not steers:
        return request
    own = request.input
    first: list[msgspec.Raw] = (
        [_encode_raw({"role": "user", "content": own})] if isinstance(own, str) else list(own or [])
    )
    return msgspec.structs.replace(request, input=[*first, *_raw(steers)])


def _raw(steers: list[Steer]) -> list[msgspec.Raw]:
    return [_encode_raw(entry) for steer in steers for entry in steer.entries]


def _encode_raw(value: Any) -> msgspec.Raw:
    return msgspec.Raw(msgspec.json.encode(value))


def _check_message(entry: Any, index: int) -> None:
    where = f"input[{index}]"
    if not isinstance(entry, dict) or set(entry) - _MESSAGE_KEYS or entry.get("type", "message") != "message":
        raise SteerRefused("invalid_input", f"{where}: steering takes only messages with type, role and content.")
    if entry.get("role") != "user":
        raise SteerRefused("invalid_input", f"{where}: steering takes only messages with the user role.")
    content = entry.get("content")
    if isinstance(content, str):
        return
    if not isinstance(content, list) or not all(isinstance(p, dict) and p.get("type") in _PARTS for p in content):
        raise SteerRefused("invalid_input", f"{where}.content: only input_text, input_image and input_file parts.")


def check_room(waiting: list[Steer]) -> None:
    """Refuse one more steer for a response that `waiting` steers already wait for."""
    if len(waiting) >= MAX_PENDING:
        raise SteerRefused("too_many_pending_steers", f"{MAX_PENDING} steers already wait for this response.")


def required_input(output: Sequence[ResponseItem]) -> list[dict[str, Any]]:
    """Stubs of the tool outputs a response's calls wait for (the client fills in `output`)."""
    done = answered(output)  # a search the server ran is answered in the output itself
    stubs = []
    for item in output:
        answer = OUTPUT_OF.get(type(item))
        found = pair(item)
        if answer is not None and found is not None and found[1] not in done:
            stubs.append({"type": answer, "call_id": found[1]})
    return stubs
