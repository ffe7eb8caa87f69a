"""When a streamed delta leaves: the flush window that both streaming transports (ws_writer.py, sse.py) share.

A write costs the same whether it carries one event or ten: on loopback the syscall also runs the receiving side's
TCP work, ~25-45 µs each, the largest single part of a turn's CPU in front of a fast engine
(docs/benchmarks-history.md). At 1 000 tokens/s a delta arrives every millisecond, so a turn wrote once per token.
With the window, a delta that follows the last written delta by less than `stream_flush_ms` waits until that
interval is over, and every delta that arrives meanwhile leaves in the same write.

What never waits: the first delta after a quiet interval (time to first token is untouched), and every event that
is not a delta (an item's start and end, the terminal event), which takes the deltas queued before it along at
once, so a response ends exactly when it would have without the window. Events are neither merged nor reordered:
the client sees the same frames, only fewer writes. No I/O here: the transports ask and tell.
"""

from __future__ import annotations


class FlushWindow:
    """The loop time before which a new delta waits (`delay`), moved on by each write that carried one."""

    __slots__ = ("_until", "interval")

    def __init__(self, interval_s: float) -> None:
        self.interval = max(0.0, interval_s)
        self._until = 0.0

    def delay(self, now: float) -> float:
        """Seconds a delta queued at `now` waits; 0: it leaves with this loop iteration's write."""
        wait = self._until - now
        return wait if wait > 0 else 0.0

    def wrote(self, now: float) -> None:
        """A write that carried a delta went out at `now`."""
        self._until = now + self.interval
