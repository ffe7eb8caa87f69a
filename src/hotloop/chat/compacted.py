"""A compaction made inside a create (`context_management`, pipeline/compaction.py) carries the context it replaces.

Its sealed content is `MARK` and a JSON body: the model's summary of the conversation, the user messages kept
verbatim (the task, as `/responses/compact` keeps them), and the tail the model must act on now (the turn's new
input and the calls its outputs answer). A context that holds such an item is read from the latest one on
(`effective`): the item stands for everything before it, so a client may drop those items or resend them, and a
chain continues from it. It is read as its kept user messages, the summary as a user message, then its tail.
A compaction from `POST /responses/compact` (no mark) keeps its place and reads as its summary (chat/messages.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from hotloop import sealing
from hotloop.chat.messages import other_item_text
from hotloop.tools.registry import CALL_TYPES, pair
from hotloop.tools.registry import answered as answered_calls
from hotloop.wire.agent_items import MultiAgentCall
from hotloop.wire.items import (
    Compaction,
    ContextItem,
    InputText,
    McpApprovalRequest,
    McpApprovalResponse,
    McpCall,
    Message,
    OtherItem,
    TypedContextItem,
)
from hotloop.wire.tool_items import FileSearchCall

MARK = "\x1ehotloop-context\x1e"  # a control character no summary keeps (`carried` strips it from the text)
SUMMARY_HEADER = "[earlier conversation, compacted]"
# Every item type a context holds: what a compaction keeps verbatim stays what it was (an earlier compaction
# aside). An item of a type hotloop has no Struct for (OtherItem) is kept as the user message it renders as
# (chat/messages.py `other_item_text`).
Kept = TypedContextItem


_CALLS: tuple[type[Any], ...] = (*CALL_TYPES, McpApprovalRequest, MultiAgentCall, FileSearchCall)


class Carried(msgspec.Struct, frozen=True):
    summary: str
    users: list[Kept]
    tail: list[Kept]
    calls: int = 0  # tool calls in the context it replaced: a context's call count goes on from it


def carried(summary: str, users: Sequence[ContextItem], tail: Sequence[ContextItem], calls: int) -> str:
    """The sealed text of a context-carrying compaction: the kept items as they are (an item of a type hotloop has no
    Struct for, as the message it renders as)."""
    body = Carried(
        summary=summary.replace("\x1e", ""),
        users=[kept for item in users if (kept := _kept(item)) is not None],
        tail=[kept for item in tail if (kept := _kept(item)) is not None],
        calls=calls,
    )
    return MARK + msgspec.json.encode(body).decode()


def _kept(item: ContextItem) -> TypedContextItem | None:
    """What a compaction keeps of an item: itself; a compaction is not carried by another."""
    if isinstance(item, Compaction):
        return None
    if isinstance(item, OtherItem):
        return Message(role="user", content=[InputText(text=other_item_text(item))])
    return item


def carries(item: ContextItem) -> Carried | None:
    """What a context-carrying compaction holds; None for any other item. Its seal was verified when it came in."""
    if not isinstance(item, Compaction):
        return None
    text = sealing.peek(item.encrypted_content)
    if not text.startswith(MARK):
        return None
    try:
        return msgspec.json.decode(text[len(MARK) :], type=Carried)
    except msgspec.DecodeError:
        return None


def latest(items: Sequence[ContextItem]) -> int:
    """The index of the latest context-carrying compaction; -1 when there is none."""
    return _latest(items)[0]


def _latest(items: Sequence[ContextItem]) -> tuple[int, Carried | None]:
    """The latest context-carrying compaction's index and what it carries (decoded once); (-1, None) if none."""
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        if isinstance(item, Compaction) and (body := carries(item)) is not None:
            return index, body
    return -1, None


def effective(items: Sequence[ContextItem]) -> Sequence[ContextItem]:
    """The items a model reads: from the latest context-carrying compaction on, that one read as what it carries."""
    at, body = _latest(items)
    if body is None:
        return items
    summary = Message(role="user", content=[InputText(text=f"{SUMMARY_HEADER}\n{body.summary}")])
    return [*body.users, summary, *body.tail, *items[at + 1 :]]


def count_calls(items: Sequence[ContextItem], before: int = 0) -> int:
    """The tool calls in a context of `before` calls extended by `items`: a context-carrying compaction among them
    starts the count again from the calls it replaced. An MCP call is one, or its approval request is: the call
    an approval ran is the request's (it reads as the request's output, chat/hosted.py)."""
    at, body = _latest(items)
    if body is not None:
        before, items = body.calls, items[at + 1 :]
    return before + sum(
        1
        for item in items
        if isinstance(item, _CALLS) or (isinstance(item, McpCall) and item.approval_request_id is None)
    )


def kept_tail(history: Sequence[ContextItem], new_items: Sequence[ContextItem]) -> list[ContextItem]:
    """The items a compaction keeps verbatim after its summary: the new input, after the calls its outputs answer
    (an engine's chat API refuses a tool message without the call before it); an MCP approval's answer, after the
    request it answers (the request is the call its refusal or the approved call's output answers, chat/hosted.py)."""
    answered = answered_calls(new_items)
    answered.update(item.approval_request_id for item in new_items if isinstance(item, McpApprovalResponse))
    calls = [
        item
        for item in history
        if ((found := pair(item)) is not None and found[0] == "call" and found[1] in answered)
        or (isinstance(item, McpApprovalRequest) and item.id in answered)
    ]
    return [*calls, *new_items]


def kept_users(items: Sequence[ContextItem], budget_chars: int) -> list[ContextItem]:
    """The user messages kept verbatim, the latest first within `budget_chars`, in their order; one larger than
    the whole budget, and an earlier compaction's summary, are left to the new summary."""
    kept: list[ContextItem] = []
    used = 0
    for item in reversed(items):
        if isinstance(item, Message) and item.role == "user" and not _is_summary(item):
            size = sum(len(getattr(part, "text", "")) for part in item.content)
            if size > budget_chars:
                continue
            if used + size > budget_chars:
                break
            kept.append(item)
            used += size
    return kept[::-1]


def _is_summary(item: Message) -> bool:
    first = item.content[0] if item.content else None
    return isinstance(first, InputText) and first.text.startswith(SUMMARY_HEADER + "\n")
