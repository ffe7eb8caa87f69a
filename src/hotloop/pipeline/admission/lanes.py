"""WebSocket lanes and a connection's limits (protocol.md §3.5, §3.9, §3.11), with no I/O: which lane a create
joins, the named-lane and queue caps, and the connection's age.

`LaneRouter` only answers; the connection's protocol (pipeline/connection/protocol.py) asks it as each create
joins a lane and turns its answers into actions. Time is injected (`clock`), so tests move it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from hotloop.errors import ConnectionLimit, HotloopError, InvalidParam
from hotloop.pipeline.state.session import Lane
from hotloop.pipeline.validate import check_stream_id

CONNECTION_LIMIT_MESSAGE = (
    "Responses websocket connection limit reached ({minutes} minutes). Create a new websocket connection to continue."
)
Clock = Callable[[], float]  # seconds, monotonic


class LaneLimits(msgspec.Struct, frozen=True):
    max_age_s: float = 3600.0
    max_named_lanes: int = 32
    max_queued: int = 256
    lanes: bool = True  # off: every lane shares the default lane's FIFO


class QueueFull(Exception):
    """Too many waiting creates on one connection: close with 1008 (§3.9)."""


class LaneRouter:
    """One connection's lanes: the named ids it used, the creates waiting, and its age."""

    def __init__(self, limits: LaneLimits, clock: Clock = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self.opened_at = clock()
        self.named: set[str] = set()
        self.waiting = 0  # creates admitted to a lane, not yet at its head

    def expired(self) -> bool:
        return self.remaining() <= 0

    def remaining(self) -> float:
        """Seconds until the age limit (§3.11); zero or less once reached."""
        return self.opened_at + self.limits.max_age_s - self.clock()

    def connection_limit_error(self) -> HotloopError:
        minutes = round(self.limits.max_age_s / 60)
        return ConnectionLimit(CONNECTION_LIMIT_MESSAGE.format(minutes=minutes))

    def admit(self, stream_id: str | None) -> Lane:
        """The lane a create joins (§3.5); raises `HotloopError` (answered with an `error` event at once, §3.9) or
        `QueueFull` (close 1008). The caller calls `started()` once the create leaves the queue."""
        if stream_id is not None:
            self._check_named(stream_id)
        if self.expired():
            raise self.connection_limit_error()
        if self.waiting >= self.limits.max_queued:
            raise QueueFull()
        self.waiting += 1
        return stream_id

    def queue_of(self, lane: Lane) -> Lane:
        """The FIFO a lane's work runs on: its own, or the default one when lanes are off."""
        return lane if self.limits.lanes else None

    def started(self) -> None:
        self.waiting -= 1

    def _check_named(self, stream_id: str) -> None:
        if not check_stream_id(stream_id):
            raise InvalidParam(
                "stream_id must be 1-256 characters of A-Z, a-z, 0-9, '_', '.' or '-'.",
                param="stream_id",
                code="invalid_stream_id",
            )
        if stream_id not in self.named:
            if len(self.named) >= self.limits.max_named_lanes:
                raise InvalidParam(
                    f"This connection already used {self.limits.max_named_lanes} stream ids.",
                    param="stream_id",
                    code="websocket_stream_limit_reached",
                )
            self.named.add(stream_id)
