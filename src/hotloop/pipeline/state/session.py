"""Who is asking and what their connection remembers: the connection-local cache of protocol.md §3.8."""

from __future__ import annotations

import hashlib
import itertools
import time
import weakref
from collections import OrderedDict
from collections.abc import Hashable

from hotloop.pipeline.state.context import ChainState
from hotloop.pipeline.state.state_lru import StateLRU

Lane = str | None  # None is the default lane
_SESSION_IDS = itertools.count()
# How many once-only log lines (`Session.first_notice`) a connection, and this process's HTTP requests together,
# remember; past that the oldest is forgotten, and logged again the next time it happens.
CONNECTION_NOTICES = 64
HTTP_NOTICES = 4096


class Notices:
    """What was logged once already: a bounded set, the oldest forgotten first."""

    def __init__(self, limit: int) -> None:
        self._seen: OrderedDict[Hashable, None] = OrderedDict()
        self._limit = limit

    def first(self, key: Hashable) -> bool:
        """Whether `key` is new here; it is remembered from now on."""
        if key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > self._limit:
            self._seen.popitem(last=False)
        return True


# An HTTP request is a Session of its own, so what HTTP callers were told is kept per process, by owner (the key's
# hash): one line per key and notice, not one per request. A connection keeps its own (`Session._notices`).
_HTTP_NOTICES = Notices(HTTP_NOTICES)


def owner_of(api_key: str | None, keys_configured: bool) -> str:
    """The store's owner tag: a hash of the key (never the key), or "" for a server without keys."""
    if not keys_configured or api_key is None:
        return ""
    return hashlib.sha256(api_key.encode()).hexdigest()[:32]


class Session:
    """One client context: an HTTP request (no cache) or a WebSocket connection (a cache entry per lane).

    With a `budget` (the process-wide `StateLRU` of every connection's lanes, `connection_cache_bytes`), a lane's
    entry may be evicted for space: its next continuation then resolves from the store, or gets
    `previous_response_not_found` for a `store: false` chain, as for any cache miss (§3.8.2).
    """

    def __init__(self, owner: str, *, caching: bool, budget: StateLRU[tuple[int, Lane]] | None = None) -> None:
        self.owner = owner
        self.caching = caching
        self.opened_at = time.time()
        self._lanes: dict[Lane, ChainState] = {}
        self._budget = budget if caching else None
        self._id = next(_SESSION_IDS)
        self._notices = Notices(CONNECTION_NOTICES) if caching else None

    def first_notice(self, key: Hashable) -> bool:
        """Whether a line worth logging once (the tool types `drop_tool_types` left out: pipeline/prepare.py) is new:
        to this WebSocket connection, or, for an HTTP request, to this process for the same owner."""
        if self._notices is not None:
            return self._notices.first(key)
        return _HTTP_NOTICES.first((self.owner, key))

    def cached(self, response_id: str) -> ChainState | None:
        """A lane's latest response by id, from any lane (a fork, §3.5)."""
        for lane, state in self._lanes.items():
            if state.response.id == response_id:
                self._touch(lane)
                return state
        return None

    def latest(self, lane: Lane) -> ChainState | None:
        state = self._lanes.get(lane)
        if state is not None:
            self._touch(lane)
        return state

    def remember(self, lane: Lane, state: ChainState) -> None:
        """A new response on a lane replaces that lane's entry (§3.8.4)."""
        if not self.caching:
            return
        self._lanes[lane] = state
        budget = self._budget
        if budget is not None and not budget.put((self._id, lane), state, weakref.WeakMethod(self._evicted)):
            self._lanes.pop(lane, None)  # bigger than the whole budget: not kept

    def evict(self, lane: Lane, response_id: str | None) -> None:
        """A failed continuation evicts its parent from the requesting lane only (§3.8.3): a client that retries
        resends the full context rather than continuing from a state it may no longer share with the server.
        Called for every failure: admission's (pipeline/admission/entry.py), a create frame that did not decode
        (pipeline/connection/protocol.py), a turn that failed generating (pipeline/turn.py)."""
        if not response_id:
            return
        state = self._lanes.get(lane)
        if state is not None and state.response.id == response_id:
            self._drop(lane)

    def forget(self, response_id: str) -> None:
        """A deleted response is no longer continuable anywhere (§1.8)."""
        for lane, state in list(self._lanes.items()):
            if state.response.id == response_id:
                self._drop(lane)

    def forget_stored(self) -> int:
        """Drop the lanes whose chain is fully stored (the deletion feed had a gap: any may have been deleted); how
        many. Their next continuation reloads the chain from the store, which refuses a deleted one. A lane whose
        chain is not fully stored (`store: false` somewhere in it) is kept: it cannot be reloaded, so dropping it
        would break a live chain; it stays continuable even if a stored ancestor was deleted during the gap."""
        stored = [lane for lane, state in self._lanes.items() if state.stored_chain]
        for lane in stored:
            self._drop(lane)
        return len(stored)

    def clear(self) -> None:
        for lane in list(self._lanes):
            self._drop(lane)

    def lanes(self) -> dict[Lane, ChainState]:
        """Each lane's latest response (a copy: the console reads it while turns run)."""
        return dict(self._lanes)

    def contexts(self) -> list[ChainState]:
        return list(self._lanes.values())

    def _drop(self, lane: Lane) -> None:
        del self._lanes[lane]
        if self._budget is not None:
            self._budget.pop((self._id, lane))

    def _touch(self, lane: Lane) -> None:
        if self._budget is not None:
            self._budget.touch((self._id, lane))

    def _evicted(self, key: Hashable) -> None:
        """The budget evicted one of this connection's lanes for space (least recently used in the process)."""
        if isinstance(key, tuple):
            self._lanes.pop(key[1], None)
