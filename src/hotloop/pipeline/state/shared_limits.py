"""Admission limits shared by the worker processes of one server (`workers > 1`): the same token buckets and
connection counts as limits.py, held in one memory-mapped file that every worker maps, so that a key limited to
K requests a minute gets K from the server as a whole, not K per worker.

Each operation takes an exclusive `flock` on the file for a few microseconds (a lookup, a little arithmetic and a
write into the map): requests from all workers are counted once each, in some order, with no lost update. Time is
`time.monotonic()`, one clock for every process on the machine (CLOCK_MONOTONIC).

The file holds a header, one open-connection count per worker, then `SLOTS` key slots found by open addressing on
a 64-bit hash of the key's owner tag. A slot holds the key's two buckets and its open connections per worker.
Connections are counted per worker so that the supervisor can give back the slots of a worker that died without
closing its sockets (`release_worker`). A key whose buckets are full and who holds no connection has nothing to
remember: its slot is taken over by the next new key that probes it. Should every slot a key probes be busy (more
than ~`SLOTS` keys active within a minute), that key is limited by this process alone, and a warning says so.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import mmap
import os
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hotloop.pipeline.state.limits import (
    Clock,
    ConnectionSlots,
    RateLimiter,
    key_refusal,
    rate_refusal,
    refilled,
    total_refusal,
)

log = logging.getLogger("hotloop.limits")

MAGIC = b"HLLT"
VERSION = 1
SLOTS = 16384
PROBES = 64  # slots a key may probe before it falls back to this process's own buckets
_HEADER = struct.Struct("<4sIII")  # magic, version, slots, workers
_KEY = struct.Struct("<Q")
_BUCKETS = struct.Struct("<ddd")  # requests, tokens, stamp
EMPTY, TOMBSTONE = 0, 1  # key hashes never used for a real key


def _key_hash(owner: str) -> int:
    value = int.from_bytes(hashlib.blake2b(owner.encode(), digest_size=8).digest(), "little")
    return value if value > TOMBSTONE else value + 2


class LimitTable:
    """The mapped file; `worker` is this process's index (its connection column), 0 ≤ worker < workers. `rpm` and
    `tpm` are the full buckets a new key starts with (the same settings in every worker)."""

    def __init__(self, path: Path, worker: int, rpm: int = 0, tpm: int = 0) -> None:
        self._fd = os.open(path, os.O_RDWR)
        self._map = mmap.mmap(self._fd, 0)
        magic, version, self.slots, self.workers = _HEADER.unpack_from(self._map, 0)
        if magic != MAGIC or version != VERSION:
            raise ValueError(f"{path} is not a hotloop limit table")
        if not 0 <= worker < self.workers:
            raise ValueError(f"worker {worker} is outside the table's {self.workers} workers")
        self.worker = worker
        self.rpm, self.tpm = max(0, rpm), max(0, tpm)
        self._counts = struct.Struct(f"<{self.workers}i")
        self._open_at = _HEADER.size
        self._slot_size = _KEY.size + _BUCKETS.size + self._counts.size
        self._slots_at = self._open_at + self._counts.size
        self._hashes: dict[str, int] = {}

    @staticmethod
    def create(path: Path, workers: int, slots: int = SLOTS) -> None:
        """A zeroed table for `workers` processes (the supervisor's, before any worker starts)."""
        size = _HEADER.size + 4 * workers + slots * (_KEY.size + _BUCKETS.size + 4 * workers)
        with open(path, "wb") as file:
            file.write(_HEADER.pack(MAGIC, VERSION, slots, workers))
            file.truncate(size)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)

    @contextmanager
    def locked(self) -> Iterator[None]:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    # --- under the lock -------------------------------------------------------------------------------------------

    def find(self, owner: str, now: float | None) -> int | None:
        """The offset of `owner`'s slot. With `now`, a key that has none gets one holding full buckets, taking over
        a free or forgettable slot; None when it has none and none could be found."""
        key = self._hashes.get(owner)
        if key is None:
            key = self._hashes[owner] = _key_hash(owner)
        free: int | None = None
        for probe in range(PROBES):
            offset = self._slots_at + ((key + probe) % self.slots) * self._slot_size
            (found,) = _KEY.unpack_from(self._map, offset)
            if found == key:
                return offset
            if free is None and now is not None and (found <= TOMBSTONE or self._forgettable(offset, now)):
                free = offset
            if found == EMPTY:
                break  # the key would have been placed here or earlier
        if free is not None and now is not None:
            _KEY.pack_into(self._map, free, key)
            _BUCKETS.pack_into(self._map, free + _KEY.size, self.rpm, self.tpm, now)
            self._counts.pack_into(self._map, free + _KEY.size + _BUCKETS.size, *([0] * self.workers))
        return free

    def buckets(self, offset: int) -> tuple[float, float, float]:
        requests, tokens, stamp = _BUCKETS.unpack_from(self._map, offset + _KEY.size)
        return requests, tokens, stamp

    def set_buckets(self, offset: int, requests: float, tokens: float, stamp: float) -> None:
        _BUCKETS.pack_into(self._map, offset + _KEY.size, requests, tokens, stamp)

    def connections(self, offset: int | None) -> list[int]:
        """Open connections per worker: of the server (None) or of a key's slot."""
        at = self._open_at if offset is None else offset + _KEY.size + _BUCKETS.size
        return list(self._counts.unpack_from(self._map, at))

    def add_connection(self, offset: int | None, delta: int) -> None:
        at = (self._open_at if offset is None else offset + _KEY.size + _BUCKETS.size) + 4 * self.worker
        (count,) = struct.unpack_from("<i", self._map, at)
        struct.pack_into("<i", self._map, at, max(0, count + delta))

    def _forgettable(self, offset: int, now: float) -> bool:
        """A slot whose buckets have refilled by `now` and that holds no connection: it remembers nothing."""
        requests, tokens, stamp = self.buckets(offset)
        full = (
            refilled(requests, self.rpm, now - stamp) >= self.rpm
            and refilled(tokens, self.tpm, now - stamp) >= self.tpm
        )
        return full and not any(self.connections(offset))

    # --- the supervisor's ---------------------------------------------------------------------------------------

    def release_worker(self, worker: int) -> None:
        """Zero a dead worker's connection counts, the server's and every key's."""
        with self.locked():
            struct.pack_into("<i", self._map, self._open_at + 4 * worker, 0)
            first = self._slots_at + _KEY.size + _BUCKETS.size + 4 * worker
            for slot in range(self.slots):
                struct.pack_into("<i", self._map, first + slot * self._slot_size, 0)


class SharedRateLimiter(RateLimiter):
    """RateLimiter's buckets, kept in the table; a key the table has no room for falls back to this process's."""

    def __init__(self, table: LimitTable, rpm: int, tpm: int, clock: Clock = time.monotonic) -> None:
        super().__init__(rpm, tpm, clock)
        self.table = table
        self._warned = False

    def admit(self, owner: str) -> None:
        if not self.enabled:
            return
        with self.table.locked():
            now = self.clock()
            offset = self.table.find(owner, now)
            if offset is None:
                self._fall_back()
                super().admit(owner)
                return
            requests, tokens = self._refill(offset, now)
            if self.rpm and requests < 1:
                raise rate_refusal("requests", self.rpm, requests)
            if self.tpm and tokens < 1:
                raise rate_refusal("tokens", self.tpm, tokens)
            self.table.set_buckets(offset, requests - 1, tokens, now)

    def charge(self, owner: str, tokens: int) -> None:
        if not self.tpm or tokens <= 0:
            return
        with self.table.locked():
            now = self.clock()
            offset = self.table.find(owner, now)
            if offset is None:
                super().charge(owner, tokens)
                return
            requests, left = self._refill(offset, now)
            self.table.set_buckets(offset, requests, left - tokens, now)

    def _refill(self, offset: int, now: float) -> tuple[float, float]:
        requests, tokens, stamp = self.table.buckets(offset)
        return refilled(requests, self.rpm, now - stamp), refilled(tokens, self.tpm, now - stamp)

    def _fall_back(self) -> None:
        if not self._warned:
            self._warned = True
            log.warning("the shared limit table is full: some keys are rate-limited per worker")


class SharedConnectionSlots(ConnectionSlots):
    """ConnectionSlots counted over every worker: the server's total and each key's."""

    def __init__(self, table: LimitTable, total: int, per_key: int) -> None:
        super().__init__(total, per_key)
        self.table = table

    def acquire(self, owner: str) -> None:
        with self.table.locked():
            if self.total and sum(self.table.connections(None)) >= self.total:
                raise total_refusal(self.total)
            offset = self.table.find(owner, time.monotonic())  # kept while it holds a connection
            if offset is None:  # no room: this process's count alone
                super().acquire(owner)
                return
            if self.per_key and sum(self.table.connections(offset)) >= self.per_key:
                raise key_refusal(self.per_key)
            self.table.add_connection(None, 1)
            self.table.add_connection(offset, 1)
            self._by_key[owner] = self._by_key.get(owner, 0) + 1
            self.open += 1

    def release(self, owner: str) -> None:
        with self.table.locked():
            offset = self.table.find(owner, None)
            if offset is None:
                super().release(owner)
                return
            self.table.add_connection(None, -1)
            self.table.add_connection(offset, -1)
            super().release(owner)

    def held(self, owner: str) -> int:
        with self.table.locked():
            offset = self.table.find(owner, None)
            return sum(self.table.connections(offset)) if offset is not None else super().held(owner)
