"""A multi-agent response that waits for its client's tool outputs (protocol.md §1.12, `response.inject`).

With `multi_agent.enabled` on WebSocket, a client-owned call does not end the response: the call's items stream, the
response waits, and the client commits the outputs with `response.inject {response_id, input}`. The connection hands
each inject to the running turn synchronously, as a steer is handed (never through the lane, which the waiting
response holds); `Inbox.offer` checks the whole batch against the calls the response still waits for and commits it
or nothing. The turn's steps (pipeline/steps/) take the committed batches in their own event sequence:
`response.inject.created`, the outputs as output items, and once no call waits, the next generation on the extended
prompt. Pure but for one `asyncio.Event`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import cast

import msgspec

from hotloop.errors import InvalidParam
from hotloop.pipeline.normalize import normalize_item
from hotloop.pipeline.steering import Steer, check_room, required_input
from hotloop.pipeline.validate import check_new_items
from hotloop.tools.registry import answered, pair
from hotloop.wire.items import ResponseItem
from hotloop.wire.request import CreateRequest

# Injects kept for a failure reply once the response is ending (`Inbox.late`): past it they are refused at once.
MAX_LATE = 32


def multi_agent(request: CreateRequest) -> bool:
    """Whether the create asks for a multi-agent response (`multi_agent: {enabled: true}`)."""
    config = request.multi_agent
    return isinstance(config, dict) and config.get("enabled") is True


def checked(raw: Sequence[msgspec.Raw], waiting: dict[str, str], secret: bytes) -> list[ResponseItem]:
    """The batch as typed output items, each answering one of the `waiting` calls (call id → the output type it
    waits for) once; raises `InvalidParam` naming `input[i]…`, and then nothing of the batch is kept."""
    if not raw:
        raise InvalidParam("input must list the tool outputs to inject.", param="input", code="empty_array")
    items: list[ResponseItem] = []
    seen: set[str] = set()
    for index, value in enumerate(raw):
        param = f"input[{index}]"
        item = normalize_item(value, param)
        found = pair(item)
        if found is None or found[0] != "output":
            raise InvalidParam("response.inject takes only tool outputs.", param=f"{param}.type")
        call_id = found[1]
        expected = waiting.get(call_id)
        if expected is None or call_id in seen:
            raise InvalidParam(
                f"No call '{call_id}' of this response waits for an output.",
                param=f"{param}.call_id",
                code="function_call_not_found",
            )
        kind = item.__struct_config__.tag
        if kind != expected:
            raise InvalidParam(f"Call '{call_id}' waits for a {expected}, not a {kind}.", param=f"{param}.type")
        seen.add(call_id)
        items.append(cast(ResponseItem, item))  # a tool output (`pair` said so): an item a response may hold
    check_new_items(items, frozenset(waiting), secret)  # media and screenshots, as a create's input
    return items


class Inbox:
    """What reaches a running response from outside, in order: its steers (pipeline/steering.py), and, for a
    multi-agent response on WebSocket (`injects`), committed batches of tool outputs, taken by its steps in commit
    order, and the injects that came once it was ending (`late`, failed after its end)."""

    def __init__(self, wake: asyncio.Event | None = None, injects: bool = True) -> None:
        self.injects = injects
        # Steers accepted; the first `acked` were acknowledged in the response's own sequence. The generation reads
        # the list itself (pipeline/generate.py): once one is there, it stops at the next delta.
        self.steers: list[Steer] = []
        self.acked = 0
        self.steered = asyncio.Event()  # set with the first steer: stops the server's calls in flight
        self._batches: list[list[ResponseItem]] = []
        self._committed: set[str] = set()  # call ids answered by a committed batch, added to the output or not yet
        # Rung by a commit; shared with what else wakes the waiting response (its subagents: agents/roster.py).
        self._wake = wake if wake is not None else asyncio.Event()
        self.closed = False
        self.late: list[list[msgspec.Raw]] = []

    def waiting(self, output: Sequence[ResponseItem]) -> dict[str, str]:
        """The calls of `output` no committed output answers yet (one being added counts): call id → its output
        type."""
        return {
            stub["call_id"]: stub["type"] for stub in required_input(output) if stub["call_id"] not in self._committed
        }

    def offer(self, raw: list[msgspec.Raw], output: Sequence[ResponseItem], secret: bytes) -> bool:
        """Commit a batch (True: it is acknowledged in the response's own stream), or keep it for a failure reply
        once the response has ended (False); raises `InvalidParam` for a batch that answers no waiting call."""
        if self.closed:
            if len(self.late) >= MAX_LATE:
                raise InvalidParam("Too many injects for a response that is ending.", param="response_id")
            self.late.append(raw)
            return False
        batch = checked(raw, self.waiting(output), secret)
        self._batches.append(batch)
        self._committed |= answered(batch)
        self._wake.set()
        return True

    def pending(self) -> bool:
        return bool(self._batches)

    def take(self) -> list[list[ResponseItem]]:
        """The committed batches, in commit order, taken once."""
        batches, self._batches = self._batches, []
        self._wake.clear()
        return batches

    def steer(self, steer: Steer) -> None:
        """A steer: the generation stops at its next delta, a wait ends. Raises `SteerRefused` past `MAX_PENDING`."""
        check_room(self.steers)
        self.steers.append(steer)
        self.steered.set()
        self._wake.set()

    def late_steers(self) -> list[Steer]:
        """The steers not yet acknowledged in the response's own sequence, taken once."""
        late = self.steers[self.acked :]
        self.acked = len(self.steers)
        return late

    async def wait(self, seconds: float | None) -> None:
        """Until a batch is committed, `wake()` is called, or `seconds` pass (None: no bound)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    def close(self) -> None:
        """No more commits: later injects are `late`. What was committed and not yet taken stays for `take`."""
        self.closed = True
