"""WebSocket lane rules (protocol.md §3.5, §3.9, §3.11) with no I/O: which lane a create joins, and the limits.

The transport asks `admit()` for each create and runs what it admits; everything here is plain state.
"""

from __future__ import annotations

import time

import msgspec

from hotloop.errors import ConnectionLimit, HotloopError, InvalidParam
from hotloop.pipeline.session import Lane
from hotloop.pipeline.validate import check_stream_id

CONNECTION_LIMIT_MESSAGE = (
    "Responses websocket connection limit reached ({minutes} minutes). Create a new websocket connection to continue."
)


class LaneLimits(msgspec.Struct, frozen=True):
    max_age_s: float = 3600.0
    max_named_lanes: int = 32
    max_queued: int = 256
    lanes: bool = True  # off: every lane shares the default lane's FIFO


class QueueFull(Exception):
    """Too many waiting creates on one connection: close with 1008 (§3.9)."""


class LaneRouter:
    def __init__(self, limits: LaneLimits, now: float | None = None) -> None:
        self.limits = limits
        self.opened_at = time.monotonic() if now is None else now
        self.named: set[str] = set()
        self.waiting = 0

    def expired(self, now: float | None = None) -> bool:
        return self.remaining(now) <= 0

    def remaining(self, now: float | None = None) -> float:
        """Seconds until the age limit (§3.11); zero or less once reached."""
        return self.opened_at + self.limits.max_age_s - (time.monotonic() if now is None else now)

    def connection_limit_error(self) -> HotloopError:
        minutes = round(self.limits.max_age_s / 60)
        return ConnectionLimit(CONNECTION_LIMIT_MESSAGE.format(minutes=minutes))

    def admit(self, stream_id: str | None, now: float | None = None) -> Lane:
        """The queue a create runs on; raises `HotloopError` (sent as an `error` event) or `QueueFull`."""
        if stream_id is not None:
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
        if self.expired(now):
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
