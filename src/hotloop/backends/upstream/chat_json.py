"""The JSON of a conversation's chat messages, built in proportion to its new items (issue 11).

A chat API keeps no state, so `openai-chat` sends the whole conversation every turn: converting ~120 items to
messages and encoding ~300 KB of them cost ~0.7 ms a turn at 80 000 tokens. A continuation's items start with its
parent's (the chain's `Context` is shared, so they are the very same objects), so the parent's messages are kept
as JSON (recent chains, LRU, bounded in bytes) with the last message still open, because the next items may merge
into it (parallel calls, one assistant turn); only the new items are converted and encoded.
"""

from __future__ import annotations

import msgspec

from hotloop.backends.base import GenerationRequest
from hotloop.backends.upstream import chat_messages as chat
from hotloop.lru import ByteLRU
from hotloop.wire.items import ContextItem, Message, Reasoning

_encode = msgspec.json.encode


class _State(msgspec.Struct):
    instructions: str | None
    count: int  # items converted
    first: ContextItem | None
    last_item: ContextItem | None
    closed: bytes  # every message but the last, as JSON, comma-joined
    last: chat.ChatMessage | None
    reasoning: bool = False  # some message carries reasoning

    @property
    def size(self) -> int:
        return len(self.closed) + 256


class MessagesJSON:
    def __init__(self, max_bytes: int = 32 << 20, replay: chat.Replay = chat.DEFAULT_REPLAY) -> None:
        self.reused = 0  # conversations built on a parent's messages (tests read it)
        self.replay = replay
        self._entries: ByteLRU[str, _State] = ByteLRU(max_bytes, lambda state: state.size)

    def encode(self, request: GenerationRequest) -> msgspec.Raw:
        """`chat.messages(request)` as JSON, remembered under the request's response id for its continuations."""
        state = self._extend(request) or _build(request, self.replay)
        if request.response_id:
            self._entries.put(request.response_id, state)
        last = state.last if state.last is not None and chat.PENDING not in state.last else None
        # Joined, not added up: each `+` copied the whole conversation again (~0.3 MB at 80 000 tokens).
        if last is None:
            return msgspec.Raw(b"".join((b"[", state.closed, b"]")))
        joiner = b"," if state.closed else b""
        return msgspec.Raw(b"".join((b"[", state.closed, joiner, _encode(last), b"]")))

    def _extend(self, request: GenerationRequest) -> _State | None:
        # peek: the parent is superseded by the conversation remembered next, so a lookup does not keep it longer.
        previous = request.previous_response_id
        parent = self._entries.peek(previous) if previous else None
        items = request.items
        if (
            parent is None
            or parent.instructions != request.instructions
            or not parent.count
            or len(items) < parent.count
            or items[0] is not parent.first
            or items[parent.count - 1] is not parent.last_item
        ):
            return None
        new = items[parent.count :]
        reasoning = parent.reasoning or any(isinstance(item, Reasoning) for item in new)
        if self.replay.policy == "chain" and reasoning and any(_is_user(item) for item in new):
            return None  # a new user message ends the chain: its reasoning leaves the earlier messages
        self.reused += 1
        out = [_open_copy(parent.last)] if parent.last is not None else []
        for index in range(parent.count, len(items)):
            if self.replay.policy != "none" or not isinstance(items[index], Reasoning):
                chat.append(out, items[index], f"input[{index}]", self.replay.field)
        return _state(request, parent.closed, out, reasoning)


def _is_user(item: ContextItem) -> bool:
    return isinstance(item, Message) and item.role == "user"


def _build(request: GenerationRequest, replay: chat.Replay) -> _State:
    out = chat.messages(request, replay)
    return _state(request, b"", out, any(replay.field in message for message in out))


def _state(request: GenerationRequest, closed: bytes, out: list[chat.ChatMessage], reasoning: bool) -> _State:
    """`closed` plus the messages of `out` but its last, which stays open."""
    if len(out) > 1:
        more = b",".join(_encode(message) for message in out[:-1])
        closed = b"".join((closed, b",", more)) if closed else more
    items = request.items
    return _State(
        instructions=request.instructions,
        count=len(items),
        first=items[0] if items else None,
        last_item=items[-1] if items else None,
        closed=closed,
        last=out[-1] if out else None,
        reasoning=reasoning,
    )


def _open_copy(message: chat.ChatMessage) -> chat.ChatMessage:
    """A copy the next items may merge into without changing the parent's state (its calls list included)."""
    copy = dict(message)
    if "tool_calls" in copy:
        copy["tool_calls"] = list(copy["tool_calls"])
    return copy
