"""Where `hotloop bench load`'s two sides run: the server and the load generator on different cores when the
machine has two or more, so that the generator (about 1 ms of CPU a turn) does not compete with the server it
measures; and which side was the limit.

A quarter of the cores (at least one) go to the generator, the rest to the server, which sizes its default
`workers` from them (one per core it may run on). On a 2-core machine that is one core each: the server then runs
one worker.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import NamedTuple

BUSY_SHARE = 0.9  # a side that used this much of its cores' time was the limit


class Split(NamedTuple):
    server: frozenset[int]
    client: frozenset[int]


def split() -> Split | None:
    """The cores this process may use, shared out; None on a single core (nothing to split)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    client = max(1, round(len(cores) / 4))
    return Split(frozenset(cores[:-client]), frozenset(cores[-client:]))


@contextlib.contextmanager
def pinned(cores: frozenset[int] | None) -> Iterator[None]:
    """Run this process (the load generator) on `cores` for the block; nothing when None."""
    if cores is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def cores_of(pid: int) -> list[int] | None:
    try:
        return sorted(os.sched_getaffinity(pid))
    except OSError:  # gone, or not ours to read
        return None


def limit(server_share: float | None, client_share: float) -> str:
    """Which side held the run back: the one that kept its cores busy (shares are of the side's own cores)."""
    if client_share >= BUSY_SHARE:
        return "load generator"
    if server_share is not None and server_share >= BUSY_SHARE:
        return "server"
    return "neither"
