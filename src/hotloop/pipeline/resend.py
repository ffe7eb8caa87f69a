"""A resent history, recognized: most HTTP clients send their whole conversation on every request, with no
`previous_response_id`. When the first items of a request are, byte for byte, the input of an earlier request of
the same key, what that request computed from them is taken over: their normalized items, the call ids they
declare, the safety classifiers' states and findings, and the rendered token ids. Only the rest (the previous
output the client echoes back, and its new input) is decoded, normalized, validated, scanned and rendered, as a
continuation over `previous_response_id` would be. The outcome is the same as starting from nothing; only the
work is not.

Entries are kept per key (never shared between keys), under one byte bound, least recently used first out; each
is keyed by the raw bytes of its first two items and holds a few of the latest histories that start with them,
for the sessions that share an opening (the same instructions file, the same task).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from hotloop.chat.format import ChatFormat
from hotloop.chat.incremental import Rendered
from hotloop.lru import ByteLRU, Figures
from hotloop.pipeline.normalize import assign_ids, normalize_input, reissue_ids
from hotloop.pipeline.tools import ToolSet
from hotloop.safety.stage import SafetyResult
from hotloop.wire.items import ContextItem, ItemReference
from hotloop.wire.request import CreateRequest

KEY_BYTES = 4096  # of each of the first two items, in the key: a longer item is told apart by its whole bytes
PER_KEY = 4  # histories kept per opening
MIN_ITEMS = 2  # a request with fewer input items costs too little to be worth remembering
_ENTRY_OVERHEAD = 512


class Resent:
    """What one request computed from its input items, for a later request that resends them."""

    __slots__ = (
        "call_count",
        "calls",
        "chat",
        "generated",
        "items",
        "raw",
        "raw_bytes",
        "rendered",
        "resolved_tools",
        "safety",
        "size",
        "tools",
    )

    def __init__(
        self,
        *,
        raw: list[msgspec.Raw],
        items: list[ContextItem],
        generated: tuple[int, ...],
        calls: frozenset[str],
        call_count: int,
        safety: SafetyResult,
        rendered: Rendered | None,
        chat: ChatFormat | None,
        tools: list[dict[str, Any]] | None,
        resolved_tools: ToolSet,
        raw_bytes: int,
    ) -> None:
        self.raw = raw  # the input items as received
        self.items = items  # normalized, with the ids they were given then
        self.generated = generated  # the positions of the items whose id hotloop generated
        self.calls = calls  # the call ids declared up to the last of them
        self.call_count = call_count  # the tool calls among them
        self.safety = safety  # the scan of these items from a new chain's states
        self.rendered = rendered  # their token ids after the system message (None: not incremental, truncated)
        self.chat = chat  # the format `rendered` was rendered with
        self.tools = tools  # the request's `tools` as received, and what they resolved to
        self.resolved_tools = resolved_tools
        self.raw_bytes = raw_bytes
        # The raw bytes, about as much again decoded, and 4 bytes per token id.
        self.size = 2 * raw_bytes + (4 * len(rendered.tokens) if rendered is not None else 0) + _ENTRY_OVERHEAD

    def starts(self, raw: list[msgspec.Raw]) -> bool:
        """Whether `raw` begins with this entry's items (the last one compared first: it tells sessions apart)."""
        count = len(self.raw)
        return len(raw) >= count and raw[count - 1] == self.raw[-1] and raw[:count] == self.raw


def input_items(
    request: CreateRequest, resent: Resent | None
) -> tuple[list[ContextItem | ItemReference], tuple[int, ...]]:
    """The request's items, and the positions of those whose id hotloop generated: a resent history's first items
    as the earlier request normalized them (with new ids where it generated them, when this request is stored:
    stored input items have ids of their own; otherwise no one sees them), the rest normalized now."""
    if request.previous_response_id:  # a continuation is never remembered: no positions to keep
        return normalize_input(request.input), ()
    skip = len(resent.raw) if resent is not None else 0
    fresh = normalize_input(request.input, skip, ids=False)
    items = assign_ids(fresh)
    generated = tuple(skip + index for index, (old, new) in enumerate(zip(fresh, items, strict=True)) if old is not new)
    if resent is None:
        return items, generated
    prefix = resent.items if request.store is False else reissue_ids(resent.items, resent.generated)
    return [*prefix, *items], resent.generated + generated


def raw_bytes_of(raw: Sequence[msgspec.Raw], resent: Resent | None) -> int:
    skip = len(resent.raw) if resent is not None else 0
    return (resent.raw_bytes if resent is not None else 0) + sum(len(memoryview(item)) for item in raw[skip:])


def _key(owner: str, raw: Sequence[msgspec.Raw]) -> str | None:
    if len(raw) < MIN_ITEMS:
        return None
    first, second = (memoryview(item) for item in raw[:2])
    return "\0".join(
        (owner, str(len(first)), bytes(first[:KEY_BYTES]).hex(), str(len(second)), bytes(second[:KEY_BYTES]).hex())
    )


def _size(entries: list[Resent]) -> int:
    return sum(entry.size for entry in entries)


class ResendCache(Figures):
    """The recent histories of each key, under one byte bound (`resend_cache_bytes`; 0 keeps none)."""

    def __init__(self, max_bytes: int) -> None:
        self._lru: ByteLRU[str, list[Resent]] = ByteLRU(max_bytes, _size)
        self.hits = 0  # requests that took over an earlier request's work
        self.misses = 0  # requests that could have (a list input of at least MIN_ITEMS items) but found none

    def match(self, owner: str, raw: list[msgspec.Raw]) -> Resent | None:
        """The longest remembered history of `owner` that `raw` starts with."""
        key = _key(owner, raw) if self._lru.max_bytes else None
        if key is None:
            return None
        # peek: the turn that matched is remembered after it ends, which makes its key the most recent then.
        found = max((entry for entry in self._lru.peek(key) or () if entry.starts(raw)), key=_length, default=None)
        self.hits, self.misses = self.hits + (found is not None), self.misses + (found is None)
        return found

    def remember(self, owner: str, entry: Resent, extends: Resent | None = None) -> None:
        """Keep `entry`; `extends` is the entry it was matched to (known to be a prefix of it)."""
        key = _key(owner, entry.raw) if self._lru.max_bytes else None
        if key is None:
            return
        # A history this one extends is the same session's earlier turn: superseded.
        kept = [old for old in self._lru.peek(key) or () if old is not extends and not old.starts(entry.raw)]
        self._lru.put(key, [entry, *kept[: PER_KEY - 1]])


def _length(entry: Resent) -> int:
    return len(entry.raw)
