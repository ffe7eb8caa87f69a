"""What a turn starts from: what came before its input (`Prior`, pipeline/prior.py: a chain, a conversation, a
resent history or nothing) and its input items. Built by the resolve stage; every later stage works on `fresh`
(what no earlier turn has seen) and takes the rest from `prior`. `remember` keeps what a whole history computed,
for a later request that resends it (pipeline/resend.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import msgspec

from hotloop.chat.compacted import count_calls
from hotloop.chat.format import ChatFormat
from hotloop.chat.incremental import Rendered
from hotloop.pipeline.prior import NOTHING, Chain, Prior, ResentHistory, load_conversation
from hotloop.pipeline.resend import MIN_ITEMS, Resent, input_items, raw_bytes_of
from hotloop.pipeline.resolve import expand_references, resolve_parent
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.session import Session
from hotloop.pipeline.tools import ToolSet
from hotloop.safety.stage import SafetyResult
from hotloop.wire.items import ContextItem, ItemReference
from hotloop.wire.request import CreateRequest


@dataclass(slots=True)
class Inputs:
    prior: Prior  # what came before the fresh input
    items: list[ContextItem]  # the request's input items, normalized, references expanded
    generated: tuple[int, ...]  # positions in `items` whose id hotloop generated
    fresh_references: bool  # whether `fresh` held an `item_reference` (expanded from the store)
    resent: Resent | None  # the earlier request whose input `items` starts with (what `remember` extends)
    resendable: bool  # a whole history (`resendable`): neither a continuation nor a conversation

    @property
    def fresh(self) -> list[ContextItem]:
        """What no earlier turn has seen: the input after the part a resent history's request prepared."""
        skip = self.prior.skip
        return self.items[skip:] if skip else self.items

    def calls_in_context(self) -> int:
        """The tool calls the model's context holds (the count `max_tool_calls` limits)."""
        return count_calls(self.fresh, self.prior.call_count)


async def gather(
    service: Service, session: Session, request: CreateRequest, conversation_id: str | None, resent: Resent | None
) -> Inputs:
    """The resolve stage: what came before, and the input with its references expanded."""
    parent = await resolve_parent(service, session, request.previous_response_id)
    items, generated = input_items(request, resent)
    skip = len(resent.raw) if resent is not None else 0
    fresh = items[skip:] if skip else items
    references = any(isinstance(item, ItemReference) for item in fresh)
    expanded = await expand_references(service, session, fresh, parent) if references else fresh
    whole = cast(list[ContextItem], [*items[:skip], *expanded] if skip else expanded)
    prior: Prior = NOTHING
    if parent is not None:
        prior = Chain(parent)
    elif conversation_id is not None:
        prior = await load_conversation(service, session, conversation_id)
    elif resent is not None:
        prior = ResentHistory(resent, whole)
    return Inputs(prior, whole, generated, references, resent, resendable(request, conversation_id))


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
    """Keep what this request computed from its input, for a later request that resends it: a whole history of
    at least `MIN_ITEMS` items, nothing in it copied from the store."""
    if not inputs.resendable or not isinstance(request.input, list):
        return
    if len(request.input) < MIN_ITEMS or inputs.fresh_references:
        return
    raw = cast(list[msgspec.Raw], request.input)
    entry = Resent(
        raw=raw,
        items=inputs.items,
        generated=inputs.generated,
        calls=calls,
        call_count=inputs.calls_in_context(),
        safety=safety,
        rendered=rendered,
        chat=chat,
        tools=request.tools,
        resolved_tools=tools,
        raw_bytes=raw_bytes_of(raw, inputs.resent),
    )
    service.resent.remember(session.owner, entry, extends=inputs.resent)
