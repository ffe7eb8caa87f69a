"""What a response store is: stored responses with their input and output items, owned by one API key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

import msgspec

from hotloop.metering.records import UsageRecord
from hotloop.stores.containers import ContainerStore
from hotloop.stores.conversations import ConversationStore
from hotloop.stores.files import FileStore
from hotloop.stores.pages import ItemPage, UsagePage
from hotloop.stores.retention import Sweepable
from hotloop.stores.skills import SkillStore
from hotloop.stores.vector_stores import VectorStoreStore
from hotloop.wire.items import ContextItem
from hotloop.wire.response import Response


class Chain(msgspec.Struct):
    """A stored response and context(R): every ancestor's input and output items, oldest first."""

    response: Response
    context: list[ContextItem]


class Store(Sweepable, ConversationStore, FileStore, VectorStoreStore, ContainerStore, SkillStore, Protocol):
    """Every method raises `StoreUnavailable` (503) when the store cannot be reached; a failed `save` leaves
    nothing readable (a response and its items are written in one atomic step)."""

    def start(self, on_deleted: Callable[[str], None], on_gap: Callable[[], None]) -> None:
        """Start the background work once the event loop runs: the retention sweeper and the feed of deletions
        from every replica (this one included), each handed to `on_deleted`. A store works without it.

        A feed that can miss deletions (its connection dropped, then came back) calls `on_gap()` once it is
        subscribed again, so the caller drops whatever a missed deletion could have left stale."""
        ...

    async def ensure_available(self) -> None:
        """Raise `StoreUnavailable` when the store was seen down and still is; free while it is up. Called before a
        `store: true` create, so that it fails before generating."""
        ...

    async def ping(self) -> None:
        """Reach the store once, whatever was seen before (`/readyz`); raise `StoreUnavailable` when it cannot."""
        ...

    async def save(self, owner: str, response: Response, input_items: list[ContextItem]) -> None:
        """Insert or replace a response with its own input items (the output is in `response.output`)."""
        ...

    async def get(self, owner: str, response_id: str) -> Response | None: ...

    async def delete(self, owner: str, response_id: str) -> bool:
        """Delete it and its items; other replicas hear of it through `on_deleted` (docs/stores.md)."""
        ...

    async def input_items(
        self, owner: str, response_id: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> ItemPage | None:
        """None when the response is unknown to `owner`."""
        ...

    async def load_chain(self, owner: str, response_id: str) -> Chain | None:
        """The response and its whole context in one round trip; None if it or any ancestor is missing."""
        ...

    async def find_item(self, owner: str, item_id: str) -> ContextItem | None: ...

    async def append_usage(self, records: list[UsageRecord]) -> None:
        """Write a batch of usage records in one transaction; a record whose response_id is already there is kept
        as it was (a retried batch writes nothing twice)."""
        ...

    async def usage(self, owner: str, *, after: str | None, limit: int, model: str | None) -> UsagePage:
        """`owner`'s records ordered by created_at, after the record of response `after` (an unknown one: an empty
        page); `model` filters the page and the totals."""
        ...

    async def close(self) -> None: ...
