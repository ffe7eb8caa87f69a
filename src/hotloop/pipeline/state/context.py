"""The state a chain carries from one turn to the next (protocol.md §4): context items and what was resolved."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from hotloop.tools.registry import call_ids
from hotloop.wire.items import ContextItem
from hotloop.wire.request import CreateRequest
from hotloop.wire.response import Response

if TYPE_CHECKING:
    from hotloop.chat.incremental import Rendered
    from hotloop.models import Model
    from hotloop.pipeline.tools import ToolSet


# Python objects of an item beyond its JSON bytes (the Struct, its content list and parts, the str headers).
ITEM_OVERHEAD = 256
_encode = msgspec.json.Encoder().encode


def item_nbytes(item: ContextItem) -> int:
    """An item's estimated memory: its JSON size plus a fixed overhead (cheap: one msgspec encode)."""
    return len(_encode(item)) + ITEM_OVERHEAD


class Context(Sequence[ContextItem]):
    """An append-only view of a chain's items.

    Continuing the newest turn of a chain appends to the shared list, so a turn costs its new items only; a
    fork from an older turn (the list has grown past this view) copies first. Byte sizes are kept the same
    way: a running total per item (`_sizes[i]` = bytes of the first i items), shared with the list and
    measured lazily, each item once, when a cache asks (`nbytes`, `storage_bytes`).
    """

    __slots__ = ("_items", "_length", "_sizes", "_start")

    def __init__(
        self,
        items: list[ContextItem] | None = None,
        length: int | None = None,
        *,
        sizes: list[int] | None = None,
        start: int | None = None,
    ) -> None:
        self._items = items if items is not None else []
        self._length = len(self._items) if length is None else length
        self._sizes = sizes if sizes is not None else [0]
        self._start = self._length if start is None else start  # where this view's own turn begins

    def extend(self, new: Sequence[ContextItem]) -> Context:
        if len(self._items) == self._length:
            items, sizes = self._items, self._sizes
        else:
            items, sizes = self._items[: self._length], self._sizes[: self._length + 1]
        items.extend(new)
        return Context(items, len(items), sizes=sizes, start=self._length)

    @property
    def storage(self) -> object:
        """The list this view shares along its chain (identity: cached states sharing it are charged once)."""
        return self._items

    @property
    def nbytes(self) -> int:
        """Estimated bytes of the items in this view."""
        return self._measure(self._length)

    @property
    def storage_bytes(self) -> int:
        """Estimated bytes of the whole shared list, which stays alive while any view of it does."""
        return self._measure(len(self._items))

    @property
    def added_bytes(self) -> int:
        """Estimated bytes of the items this view's turn added (its new input and output)."""
        return self._measure(self._length) - self._measure(self._start)

    def _measure(self, upto: int) -> int:
        sizes, items = self._sizes, self._items
        while len(sizes) <= upto:
            sizes.append(sizes[-1] + item_nbytes(items[len(sizes) - 1]))
        return sizes[upto]

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[ContextItem]:
        items = self._items
        for index in range(self._length):
            yield items[index]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self._items[: self._length][index]
        if index >= self._length or index < -self._length:
            raise IndexError(index)
        return self._items[index if index >= 0 else self._length + index]


def call_ids_of(items: Sequence[ContextItem]) -> frozenset[str]:
    """The call ids that an output item (`function_call_output`, `shell_call_output`, …) may answer."""
    return frozenset(call_ids(items))


class ChainState(msgspec.Struct, kw_only=True):
    """A finished response as a continuation point: what the next turn inherits and reuses."""

    response: Response
    context: Context  # context(R) = context(P) ⊕ N(R.input) ⊕ R.output
    call_ids: frozenset[str]
    model: Model
    request: CreateRequest  # copied by `response.append` (protocol.md §3.6)
    owner: str
    calls_in_context: int = 0
    # Every response along the chain is stored: only such a state may be seen outside its connection.
    stored_chain: bool = False
    rendered: Rendered | None = None  # token ids of context(P) ⊕ N(R.input), for an incremental next render
    rendered_output: int = 0  # ⊕ the first this-many items of R.output (a compaction's; before an MCP step)
    tools: ToolSet | None = None  # the request's validated tools, reused while a continuation sends the same
    safety_states: tuple[Any, ...] | None = None  # each classifier's state after this response (safety/stage.py)
