"""A response's own stream (protocol.md §2; no I/O): its sequence numbers, its output list, and the order in
which items end there. An item writer (wire/builder.py) writes through one: the response's for its root, a
subagent's branch for a subagent's (pipeline/agents/branch.py), which posts each finished item to the response.

**Reserved slots.** An item may take its place in the output before it is finished (`reserve`: an `mcp_call`
whose arguments are written, which the server runs next), other items following it; `settle` later puts the
finished item there and sends its `output_item.done` at that index. An item that ends while a slot before it is
still reserved has its `output_item.done` held until that slot is settled: the done events come in output order,
and in that order they are the terminal output (§2.3).

**What a client sees.** The output holds every item whole (what is stored and read back into the context); an
`output_item.done` shows a server-run call without its results or outputs unless the request included them
(`shown`: wire/included.py).
"""

from __future__ import annotations

import msgspec

from hotloop.wire import events as ev
from hotloop.wire.events import Event, encode_event
from hotloop.wire.included import EVERYTHING, Shown, hide
from hotloop.wire.items import ResponseItem
from hotloop.wire.response import Response


class Output:
    def __init__(self, response: Response, stream_id: str | None = None) -> None:
        self.response = response
        self.stream_id = stream_id
        self._seq = 0
        self._reserved: list[int] = []  # output indexes of items placed but not finished, in order
        self._held: list[int] = []  # indexes of items ended after a reserved one: their `output_item.done` waits
        self.shown: Shown = EVERYTHING  # what of the server-run calls events show (wire/included.py)

    def emit(self, cls: type[ev._Event], terminal: bool = False, **fields: object) -> Event:
        """An event, numbered and encoded once (every transport sends these bytes)."""
        event = cls(sequence_number=self._seq, stream_id=self.stream_id, **fields)
        self._seq += 1
        return encode_event(event, terminal)

    @property
    def index(self) -> int:
        """The output index of the next item."""
        return len(self.response.output)

    def end(self, index: int, item: ResponseItem) -> list[Event]:
        """The item ended at `index`: its `output_item.done`, or nothing while a slot before it is reserved (held
        for `release`)."""
        output = self.response.output
        if index == len(output):
            output.append(item)
        else:
            output[index] = item
        if self._reserved and self._reserved[0] < index:
            self._held.append(index)
            return []
        return [self.done(index, item)]

    def done(self, index: int, item: ResponseItem) -> Event:
        """`output_item.done` for the item at `index`, as the client sees it."""
        return self.emit(ev.OutputItemDone, output_index=index, item=hide(item, self.shown))

    def reserve(self, item: ResponseItem) -> int:
        """Place an unfinished item next in the output; its index."""
        index = self.index
        self.response.output.append(item)
        self._reserved.append(index)
        return index

    def reserved(self) -> list[int]:
        return list(self._reserved)

    def reserved_item(self, index: int) -> ResponseItem | None:
        return self.response.output[index] if index in self._reserved else None

    def settle(self, index: int, item: ResponseItem) -> list[Event]:
        """The reserved slot at `index` gets its finished item: its `output_item.done`, then the held ones no
        reserved slot precedes any more."""
        self._reserved.remove(index)
        return [*self.end(index, item), *self.release()]

    def release(self) -> list[Event]:
        """The held `output_item.done` events no reserved slot precedes any more, in output order."""
        first = self._reserved[0] if self._reserved else len(self.response.output)
        ready = sorted(index for index in self._held if index < first)
        self._held = [index for index in self._held if index >= first]
        output = self.response.output
        return [self.done(index, output[index]) for index in ready]

    def end_reserved(self) -> list[Event]:
        """At the response's end, the slots never settled hold their items `incomplete` (each with its
        `output_item.done`), so none is left `in_progress` in the final output."""
        reserved, self._reserved = self._reserved, []
        self._held = sorted([*self._held, *reserved])
        output = self.response.output
        for index in reserved:
            output[index] = msgspec.structs.replace(output[index], status="incomplete")
        return self.release()
