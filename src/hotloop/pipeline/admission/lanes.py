"""WebSocket mode's protocol state (protocol.md §3.5, §3.6, §3.9, §3.11) with no I/O: which lane a create joins,
the limits, the work a connection holds, the responses a steer reply may name, and when the connection closes.

The transport (transports/websocket.py) asks `ConnectionState` for each decision and does the I/O; everything
here is plain state, tested without a socket (tests/test_lanes.py).
"""

from __future__ import annotations

import time
from collections import OrderedDict

import msgspec

from hotloop.errors import ConnectionLimit, HotloopError, InvalidParam
from hotloop.pipeline.state.session import Lane
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


SEEN_RESPONSES = 256  # responses per connection whose lane and sequence a steer reply can name


class Close(msgspec.Struct, frozen=True):
    """Close the connection with 1001; `limit_error`: send the age limit's error first (§3.11)."""

    limit_error: bool


class ConnectionState:
    """One WebSocket connection: its lanes (`router`), the creates it holds (queued or running), the responses it
    ran, and whether it is closing."""

    def __init__(self, limits: LaneLimits, now: float | None = None) -> None:
        self.router = LaneRouter(limits, now)
        self.busy = 0  # creates queued or running
        self.limit_sent = False  # the age limit's error went out (it is sent once)
        self.closing = False
        # Responses run on this connection: id → (lane, next sequence_number), for steer replies (§3.6).
        self.seen: OrderedDict[str, tuple[Lane, int]] = OrderedDict()

    def queued(self) -> None:
        self.busy += 1

    def done(self) -> None:
        self.busy -= 1

    def sent(self, response_id: str, lane: Lane, count: int) -> None:
        """`count` events of this response went out on `lane`."""
        self.seen[response_id] = (lane, count)

    def finished(self, response_id: str) -> None:
        self.seen.move_to_end(response_id)
        while len(self.seen) > SEEN_RESPONSES:
            self.seen.popitem(last=False)

    def steer_target(self, response_id: str | None) -> tuple[Lane, int]:
        """The lane and the next sequence number of a response a steer names ((None, 0) if unknown)."""
        return self.seen.get(response_id or "", (None, 0))

    def replied(self, response_id: str | None) -> None:
        """A steer reply took the response's next number: the one after is the next reply's."""
        if response_id is not None and response_id in self.seen:
            lane, seq = self.seen[response_id]
            self.seen[response_id] = (lane, seq + 1)

    def error_sent(self, code: str | None) -> None:
        if code == ConnectionLimit.code:
            self.limit_sent = True

    def close_now(self, draining: bool, now: float | None = None) -> Close | None:
        """Past the age limit, or draining for a shutdown, with no work left: close (once). The age limit sends
        its error first, unless it went out already; a drain closes without one."""
        if not (draining or self.router.expired(now)) or self.busy or self.closing:
            return None
        self.closing = True
        first = not draining and not self.limit_sent
        self.limit_sent = self.limit_sent or first
        return Close(limit_error=first)
