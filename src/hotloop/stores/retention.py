"""Retention: a TTL and a byte budget, enforced by a background sweeper in small batches (never a long lock).

Every replica runs the sweeper; they may race for the same rows, which is harmless: each batch is one short
atomic step (a transaction, a Lua script) that deletes only what is still there and counts only what it deleted.
Deletions are announced like a DELETE, so other replicas drop the response from their caches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import msgspec

log = logging.getLogger("hotloop.store")

SWEEP_INTERVAL_S = 1.0
SWEEP_BATCH = 100  # responses deleted per step: a step holds a lock for well under a millisecond per response
DeletionHandler = Callable[[str], None]
GapHandler = Callable[[], None]  # the deletion feed is back after a gap: deletions may have been missed


class Retention(msgspec.Struct, frozen=True, kw_only=True):
    ttl_s: float = 0.0  # 0: kept until deleted
    max_bytes: int = 0  # 0: no budget
    interval_s: float = SWEEP_INTERVAL_S
    batch: int = SWEEP_BATCH

    @property
    def active(self) -> bool:
        return self.ttl_s > 0 or self.max_bytes > 0


class Sweepable(Protocol):
    async def expire(self, before: int, limit: int) -> list[str]:
        """Delete up to `limit` responses created before `before` (epoch seconds), oldest first; their ids."""
        ...

    async def trim(self, max_bytes: int, limit: int) -> list[str]:
        """Delete up to `limit` of the oldest responses while the stored bytes exceed `max_bytes`; their ids."""
        ...

    async def stored_bytes(self) -> int:
        """The bytes the stored responses count against the budget (a counter kept with every save and delete)."""
        ...


async def sweep(store: Sweepable, retention: Retention, now: float | None = None) -> int:
    """One pass: expire, then trim, batch after batch until nothing is left to do; the number deleted."""
    deleted = 0
    if retention.ttl_s > 0:
        before = int((time.time() if now is None else now) - retention.ttl_s)
        while len(ids := await store.expire(before, retention.batch)) > 0:
            deleted += len(ids)
            await asyncio.sleep(0)  # let requests in between batches
    if retention.max_bytes > 0:
        while len(ids := await store.trim(retention.max_bytes, retention.batch)) > 0:
            deleted += len(ids)
            await asyncio.sleep(0)
    return deleted


async def sweep_forever(store: Sweepable, retention: Retention) -> None:
    failing = False
    while True:
        try:
            await sweep(store, retention)
            failing = False
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a store that is down now is retried on the next tick, logged once
            if not failing:
                log.warning("retention sweep failed (retrying every %.1fs): %s", retention.interval_s, exc)
            failing = True
        await asyncio.sleep(retention.interval_s)


async def retry_forever(
    name: str, connect_and_listen: Callable[[Callable[[], None]], Awaitable[None]], on_gap: GapHandler
) -> None:
    """Keep a deletion feed subscribed: reconnect with backoff after it drops.

    `connect_and_listen(subscribed)` connects, subscribes, calls `subscribed()` each time its subscription is
    confirmed active (a client that resubscribes by itself after a drop calls it again), then listens until the
    connection fails. Deletions sent while no subscription was active are missed, so every subscription after the
    first calls `on_gap()`, which drops what a missed deletion could have left stale (docs/stores.md). It runs
    once the new subscription is active, so a deletion sent after it is heard, not missed.
    """
    subscriptions = 0
    delay = 0.1

    def subscribed() -> None:
        nonlocal subscriptions, delay
        subscriptions += 1
        delay = 0.1  # the next drop retries quickly again
        if subscriptions > 1:
            on_gap()

    while True:
        try:
            await connect_and_listen(subscribed)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("%s deletion feed lost (%s); reconnecting in %.1fs", name, exc, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 5.0)


class Background:
    """A store's background tasks: the sweeper and the deletion feed; started with the service, cancelled on close."""

    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[None]] = []

    def spawn(self, coro: Awaitable[None], name: str) -> None:
        self._tasks.append(asyncio.ensure_future(coro))
        self._tasks[-1].set_name(name)

    def start(self, store: Sweepable, retention: Retention, feed: Awaitable[None]) -> None:
        """A store's `start`: the sweeper when retention is on, and its deletion feed."""
        if retention.active:
            self.spawn(sweep_forever(store, retention), "hotloop-retention")
        self.spawn(feed, "hotloop-deletions")

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
