"""What a turn starts from: its parent chain or conversation, its input items, and the part of them an earlier
request already prepared (a resent history, pipeline/resend.py). Built by the resolve stage; every later stage
works on `fresh` (what no earlier turn has seen) and takes the rest from `parent` or `resent`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import msgspec

from hotloop.chat.format import ChatFormat
from hotloop.chat.incremental import Rendered
from hotloop.pipeline.objects import conversations
from hotloop.pipeline.prompt import PromptBase, base_of
from hotloop.pipeline.resend import MIN_ITEMS, Resent, input_items, raw_bytes_of
from hotloop.pipeline.resolve import count_calls, expand_references, resolve_parent
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.context import ChainState
from hotloop.pipeline.state.session import Session
from hotloop.pipeline.tools import ToolSet
from hotloop.safety.stage import SafetyResult
from hotloop.wire.items import ContextItem, ItemReference
from hotloop.wire.request import CreateRequest


@dataclass(slots=True)
class Inputs:
    parent: ChainState | None  # the chain `previous_response_id` continues
    history: list[ContextItem]  # a conversation's items, before the input
    items: list[ContextItem]  # the request's input items, normalized, references expanded
    resent: Resent | None  # the earlier request whose input `items` starts with
    generated: tuple[int, ...]  # positions in `items` whose id hotloop generated
    fresh_references: bool  # whether `fresh` held an `item_reference` (expanded from the store)
    resendable: bool  # a whole history (`resendable`): neither a continuation nor a conversation

    @property
    def skip(self) -> int:
        """How many of `items` the earlier request of a resent history prepared."""
        return len(self.resent.raw) if self.resent is not None else 0

    @property
    def fresh(self) -> list[ContextItem]:
        return self.items[self.skip :] if self.resent is not None else self.items

    @property
    def prompted(self) -> list[ContextItem]:
        """What the model reads after the parent's context: a conversation's items, then the input."""
        return [*self.history, *self.items] if self.history else self.items

    def prompt_base(self) -> PromptBase | None:
        if self.resent is None:
            return base_of(self.parent)
        return PromptBase(self.items[: self.skip], self.resent.rendered, self.resent.chat)

    def calls_in_context(self) -> int:
        """The tool calls the model's context holds (the count `max_tool_calls` limits)."""
        before = self.parent.calls_in_context if self.parent is not None else count_calls(self.history)
        known = self.resent.call_count if self.resent is not None else 0
        return count_calls(self.fresh, before + known)

    def rememberable(self, request: CreateRequest) -> bool:
        """Whether a later request may start from this one's input: not a continuation nor a conversation, and
        nothing in it copied from the store."""
        if not self.resendable or not isinstance(request.input, list):
            return False
        return len(request.input) >= MIN_ITEMS and not self.fresh_references


async def gather(
    service: Service, session: Session, request: CreateRequest, conversation_id: str | None, resent: Resent | None
) -> Inputs:
    """The resolve stage: the parent, the conversation's items, and the input with its references expanded."""
    parent = await resolve_parent(service, session, request.previous_response_id)
    # A conversation's items come first, read whole every turn (it can be edited between turns).
    history = await conversations.context_of(service, session, conversation_id) if conversation_id else []
    items, generated = input_items(request, resent)
    skip = len(resent.raw) if resent is not None else 0
    fresh = items[skip:] if skip else items
    references = any(isinstance(item, ItemReference) for item in fresh)
    expanded = await expand_references(service, session, fresh, parent) if references else fresh
    whole = [*items[:skip], *expanded] if skip else expanded
    whole_history = resendable(request, conversation_id)
    return Inputs(parent, history, cast(list[ContextItem], whole), resent, generated, references, whole_history)


def resendable(request: CreateRequest, conversation: str | None) -> bool:
    """Whether the request's input is a whole history, as a client that resends it sends one: a list of items,
    neither continuing a chain nor a conversation."""
    return not request.previous_response_id and not conversation and isinstance(request.input, list)


def match_resent(service: Service, session: Session, request: CreateRequest, conversation: str | None) -> Resent | None:
    """The earlier request whose input this one's starts with (`resendable` requests only)."""
    if not resendable(request, conversation) or not isinstance(request.input, list):
        return None
    return service.resent.match(session.owner, request.input)


def remember(
    service: Service,
    session: Session,
    request: CreateRequest,
    inputs: Inputs,
    *,
    calls: frozenset[str],
    safety: SafetyResult,
    rendered: Rendered | None,
    chat: ChatFormat,
    tools: ToolSet,
) -> None:
    """Keep what this request computed from its input, for a later request that resends it."""
    if not inputs.rememberable(request):
        return
    raw = cast(list[msgspec.Raw], request.input)
    known = inputs.resent.call_count if inputs.resent is not None else 0
    entry = Resent(
        raw=raw,
        items=inputs.items,
        generated=inputs.generated,
        calls=calls,
        call_count=count_calls(inputs.fresh, known),
        safety=safety,
        rendered=rendered,
        chat=chat,
        tools=request.tools,
        resolved_tools=tools,
        raw_bytes=raw_bytes_of(raw, inputs.resent),
    )
    service.resent.remember(session.owner, entry, extends=inputs.resent)
