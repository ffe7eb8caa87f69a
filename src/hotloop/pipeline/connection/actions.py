"""The vocabulary between a WebSocket connection's protocol (protocol.py) and its transport
(transports/websocket.py): the work that waits on a lane, and the actions the protocol returns. Plain values; the
transport performs each action in order and decides nothing itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hotloop.errors import HotloopError
from hotloop.pipeline.prepared import TurnOptions
from hotloop.pipeline.state.session import Lane
from hotloop.pipeline.steering import Steer
from hotloop.wire.request import CreateRequest

# Close codes (protocol.md §3.11).
CLOSE_GOING_AWAY, CLOSE_POLICY = 1001, 1008

# -- work waiting on a lane: handed back to `ConnectionProtocol.at_head` when it reaches the lane's head (§3.9) --


@dataclass(frozen=True, slots=True)
class QueuedCreate:
    """A `response.create`, validated and resolved only at the head of its lane."""

    create: CreateRequest
    lane: Lane


@dataclass(frozen=True, slots=True)
class QueuedAppend:
    """A legacy `response.append` (§3.6): continues the default lane's latest response, resolved at its turn."""

    input: Any


@dataclass(frozen=True, slots=True)
class QueuedError:
    """A create frame that did not decode: its error waits for its lane and evicts `parent` there (§3.8.3)."""

    error: HotloopError
    lane: Lane
    parent: str | None


Work = QueuedCreate | QueuedAppend | QueuedError

# -- actions ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    """Send these bytes now, as one text frame (an `error` event or a steer reply; a response's own events are the
    turn's, sent by the transport as it iterates them)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Enqueue:
    """Put `work` at the tail of the FIFO `queue` (a lane, or the shared one when lanes are off), starting that
    queue's worker if it has none; hand it to `at_head` when it comes out."""

    queue: Lane
    work: Work


@dataclass(frozen=True, slots=True)
class Run:
    """Admit `create` with `options` now and iterate its events (`started`, then `ended` or `abandoned`); a refusal
    goes to `refused`. `steers`: those it is the successor of (§3.6), which fail if it is refused."""

    create: CreateRequest
    options: TurnOptions
    steers: tuple[Steer, ...] = ()

    @property
    def lane(self) -> Lane:
        return self.options.lane


@dataclass(frozen=True, slots=True)
class Close:
    """Close the socket with `code` after what is queued; read nothing more."""

    code: int
    reason: str = ""


Action = Send | Enqueue | Run | Close
