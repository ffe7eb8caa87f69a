"""`POST /v1/responses/compact` (protocol.md §1.8): a context window folded into user messages plus a summary.

The output is the context's user messages verbatim, then one `compaction` item whose sealed content is a
summary the model wrote of everything else. Nothing is stored and the id is not chainable; a client starts a new
chain with this output as its input, and the compaction item renders as its summary.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from hotloop.errors import MissingParam, ServerError
from hotloop.ids import new_id
from hotloop.pipeline.admission.entry import admit
from hotloop.pipeline.compaction import SUMMARY_INSTRUCTIONS, SUMMARY_MAX_TOKENS
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.session import Session
from hotloop.sealing import seal
from hotloop.wire.items import Compaction, ContextItem, Message, item_to_builtins, output_text
from hotloop.wire.request import CreateRequest
from hotloop.wire.response import Usage


class Compacted(msgspec.Struct):
    id: str
    created_at: int
    output: list[Any]
    usage: Usage
    object: str = "response.compaction"


async def compact(service: Service, session: Session, request: CreateRequest) -> Compacted:
    if not request.model:
        raise MissingParam("Missing required parameter: 'model'.", param="model")
    instructions = (
        SUMMARY_INSTRUCTIONS if not request.instructions else f"{request.instructions}\n\n{SUMMARY_INSTRUCTIONS}"
    )
    summary_request = msgspec.structs.replace(
        request,
        instructions=instructions,
        store=False,
        tools=None,
        tool_choice="none",
        max_output_tokens=SUMMARY_MAX_TOKENS,
    )
    turn = await admit(service, session, summary_request)  # it generates: the drain and the rate limit apply
    prepared = turn.prepared
    async for _ in turn.events():
        pass
    if turn.response.status not in ("completed", "incomplete"):
        raise ServerError("The model could not summarize the conversation.")
    context: list[ContextItem] = [*(prepared.parent.context if prepared.parent else ()), *prepared.new_items]
    users = [item_to_builtins(item) for item in context if isinstance(item, Message) and item.role == "user"]
    summary = Compaction(encrypted_content=seal(output_text(turn.response.output), service.secret), id=new_id("cmp"))
    usage = turn.response.usage or Usage.of(len(prepared.generation.prompt_tokens), 0, 0)
    return Compacted(
        id=new_id("cmp"), created_at=int(time.time()), output=[*users, item_to_builtins(summary)], usage=usage
    )
