"""What a WebSocket connection remembers of its responses (protocol.md §3.6): those streaming now and the last
`KEPT` that ended, so that a steer can name them; the lane and `sequence_number` a reply outside a response's own
stream takes; what an ended response waits for, and the steers queued for it meanwhile."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from hotloop.pipeline.resolve import CONTINUABLE
from hotloop.pipeline.state.session import Lane
from hotloop.pipeline.steering import Steer, required_input
from hotloop.wire.request import CreateRequest
from hotloop.wire.response import Response

KEPT = 256  # ended responses per connection a steer may still name


class Steerable(Protocol):
    """A turn as the connection sees it (pipeline/turn.py's `Turn`)."""

    @property
    def response(self) -> Response: ...

    @property
    def steers(self) -> tuple[Steer, ...]: ...

    def steer(self, steer: Steer) -> None: ...

    def late_steers(self) -> list[Steer]: ...

    def inject(self, raw: list[msgspec.Raw]) -> bool: ...

    def late_injects(self) -> list[list[msgspec.Raw]]: ...


class Stream:
    """A response whose events are going out on `lane` now. The transport adds one to `sent` for each event it has
    sent, its only work per event; everything else here runs per steer reply."""

    __slots__ = ("_extra", "_mark", "create", "lane", "sent", "turn")

    def __init__(self, turn: Steerable, create: CreateRequest, lane: Lane) -> None:
        self.turn = turn
        self.create = create  # the request it runs (a successor copies it)
        self.lane = lane
        self.sent = 0
        self._mark = 0  # `sent` when a reply outside the stream was last numbered
        self._extra = 0  # replies numbered since the stream's last event

    def reply_number(self) -> int:
        """The `sequence_number` of a reply sent now outside the stream: the one after the last event sent, then
        one more per reply until the stream sends again (§3.6)."""
        if self._mark != self.sent:
            self._mark, self._extra = self.sent, 0
        number = self.sent + self._extra
        self._extra += 1
        return number

    def next_number(self) -> int:
        """The number the next reply would take, without taking it."""
        return self.sent + (self._extra if self._mark == self.sent else 0)


@dataclass(slots=True)
class Ended:
    """A response that ended on this connection."""

    lane: Lane
    next_number: int  # the `sequence_number` of the next reply about it
    status: str
    waiting: list[dict[str, Any]]  # required_input: the calls it ended with, until a create continues it
    steered: bool
    queued: list[Steer] = field(default_factory=list)  # steers for the create that continues it

    def reply_number(self) -> int:
        number = self.next_number
        self.next_number += 1
        return number


class Responses:
    def __init__(self) -> None:
        self.running: dict[str, Stream] = {}
        self.ended: OrderedDict[str, Ended] = OrderedDict()

    def start(self, turn: Steerable, create: CreateRequest, lane: Lane) -> Stream:
        stream = self.running[turn.response.id] = Stream(turn, create, lane)
        return stream

    def stop(self, stream: Stream) -> None:
        """The stream ended or broke off: a steer no longer reaches its turn."""
        self.running.pop(stream.turn.response.id, None)

    def end(self, stream: Stream) -> Ended:
        """The stream's response ended: remember how (the oldest beyond `KEPT` are forgotten, queued steers too)."""
        self.stop(stream)
        response = stream.turn.response
        details = response.incomplete_details
        record = Ended(
            lane=stream.lane,
            next_number=stream.next_number(),
            status=response.status,
            waiting=required_input(response.output) if response.status in CONTINUABLE else [],
            steered=details is not None and details.reason == "steered",
        )
        self.ended[response.id] = record
        while len(self.ended) > KEPT:
            self.ended.popitem(last=False)
        return record

    def reply_to(self, response_id: str | None) -> tuple[Lane, int]:
        """The lane and `sequence_number` of a reply about `response_id` sent now outside its stream; (None, 0)
        for a response this connection does not know."""
        if response_id is None:
            return None, 0
        stream = self.running.get(response_id)
        if stream is not None:
            return stream.lane, stream.reply_number()
        record = self.ended.get(response_id)
        if record is not None:
            return record.lane, record.reply_number()
        return None, 0
