"""Delta merging: while a turn's client reads slower than the model writes, consecutive deltas of one output item
(message text, reasoning, call arguments) become one delta, instead of one queued frame per token (issue 11).

It sits before the event builder, so the merged delta gets the next sequence number and every later event the
numbers after it: the stream stays gap-free (protocol.md §2.3, docs/protocol-notes.md). Nothing is dropped: the
held text leaves with the next delta read while the client keeps up again, before any other kind of event, or at
the end of generation. No I/O; the transport says whether it is congested.
"""

from __future__ import annotations

from hotloop.backends.base import Delta, ReasoningDelta, TextDelta, ToolCallDelta

Mergeable = TextDelta | ReasoningDelta | ToolCallDelta


class DeltaMerger:
    def __init__(self) -> None:
        self._kind: type[Mergeable] | None = None
        self._texts: list[str] = []
        self.merged = 0  # deltas folded into an earlier one (tests and metrics read it)

    def feed(self, delta: Delta, congested: bool) -> list[Delta]:
        """The deltas to build events from now, in order (none while it holds `delta`)."""
        if congested and isinstance(delta, Mergeable):
            if self._kind is type(delta):
                self._texts.append(delta.text)
                self.merged += 1
                return []
            out = self.flush()
            self._kind, self._texts = type(delta), [delta.text]
            return out
        return [*self.flush(), delta]

    def flush(self) -> list[Delta]:
        """The held text as one delta (empty when nothing is held)."""
        if self._kind is None:
            return []
        merged = self._kind("".join(self._texts))
        self._kind, self._texts = None, []
        return [merged]
