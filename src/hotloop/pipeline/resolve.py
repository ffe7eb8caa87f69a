"""Resolve previous state (protocol.md §3.8, §4): `previous_response_id` → the parent's chain, and
`item_reference` → a copy of the item.

Order: the connection's cache (any lane), then the store (same owner). A miss is `previous_response_not_found`,
which every known client recovers from by resending the full context.
"""

from __future__ import annotations

from hotloop.chat.compacted import count_calls
from hotloop.errors import InvalidParam, ModelNotFound, PreviousResponseNotFound
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.context import ChainState, Context, call_ids_of
from hotloop.pipeline.state.session import Session
from hotloop.wire.items import ContextItem, ItemReference
from hotloop.wire.request import CreateRequest

# Only these finished states can be continued; `failed` and `cancelled` never are (§3.8.4).
CONTINUABLE = frozenset({"completed", "incomplete"})


async def resolve_parent(service: Service, session: Session, response_id: str | None) -> ChainState | None:
    if response_id is None:
        return None
    state = session.cached(response_id)
    if session.caching:
        counter = service.connection_cache
        counter.hits, counter.misses = counter.hits + (state is not None), counter.misses + (state is None)
    state = state or service.chains.get(response_id, session.owner)
    if state is not None:
        return state
    chain = await service.store.load_chain(session.owner, response_id)
    if chain is None or chain.response.status not in CONTINUABLE:
        raise PreviousResponseNotFound(response_id)
    try:
        model = service.models.resolve(chain.response.model)
    except ModelNotFound:  # the parent's model is no longer served; the new request names its own
        model = service.models.resolve(None)
    return ChainState(
        response=chain.response,
        context=Context(chain.context),
        call_ids=call_ids_of(chain.context),
        model=model,
        request=CreateRequest(model=chain.response.model),
        owner=session.owner,
        calls_in_context=count_calls(chain.context),
        stored_chain=True,
    )


async def expand_references(
    service: Service,
    session: Session,
    items: list[ContextItem | ItemReference],
    parent: ChainState | None,
) -> list[ContextItem]:
    """Replace each `item_reference` by a copy of the item: chain context, this socket's cache, then the store."""
    if not any(isinstance(item, ItemReference) for item in items):
        return items  # type: ignore[return-value]
    local: dict[str, ContextItem] = {}
    for state in ([parent] if parent else []) + session.contexts():
        for item in state.context:
            item_id = getattr(item, "id", None)
            if item_id is not None:
                local.setdefault(item_id, item)
    out: list[ContextItem] = []
    for entry in items:
        if not isinstance(entry, ItemReference):
            out.append(entry)
            continue
        found = local.get(entry.id) or await service.store.find_item(session.owner, entry.id)
        if found is None:
            raise InvalidParam(f"Item with id '{entry.id}' not found.", param="input", code="item_not_found")
        out.append(found)
    return out
