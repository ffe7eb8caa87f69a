"""A latency-injecting TCP proxy for `hotloop bench agent-loop --client-rtt-ms R`: a far client (a laptop talking
to a GPU box) without netem. It listens on 127.0.0.1 and forwards each accepted connection to one target (hotloop);
every chunk read from one side is written to the other `delay` seconds after it was read (R/2 each way), in order,
neither merged nor split (TCP may still do either), and an end of stream (EOF) is delayed like the data before it.
It is plain TCP, so HTTP keep-alive, SSE and WebSocket upgrades pass through unchanged.

    python -m hotloop.bench.latency_proxy --port 9001 --target 127.0.0.1:8000 --delay-ms 10

It runs in its own process (`LatencyProxyProcess`) on asyncio's own event loop, not uvloop: asyncio runs a timer at
or after its deadline, while uvloop's millisecond timers may wake up to a millisecond early (hotloop/clock.py), and
an early chunk would shorten the RTT being measured. Not delayed: the TCP handshakes (the proxy accepts locally),
so a connection's opening costs no RTT; the bench opens its connections before a rollout's clock starts, except
the HTTP modes' first request (one handshake a rollout, not one a turn).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import selectors
import socket
import sys
from collections import deque
from collections.abc import Callable

from hotloop.bench.server_process import ChildServer

Chunk = bytes | None  # None: the end of the stream (the side read EOF)


class DelayLine:
    """One direction, sans I/O: `push` a chunk when it is read, `pop_due` what is due by now. The delay is fixed,
    so the queue's deadlines rise with it: a deque is the sorted queue, and order is kept."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self._queue: deque[tuple[float, Chunk]] = deque()

    def push(self, now: float, chunk: Chunk) -> None:
        self._queue.append((now + self.delay_s, chunk))

    def pop_due(self, now: float) -> list[Chunk]:
        due = []
        while self._queue and self._queue[0][0] <= now:
            due.append(self._queue.popleft()[1])
        return due

    @property
    def next_due(self) -> float | None:
        return self._queue[0][0] if self._queue else None


class Pump:
    """Drives one DelayLine on the event loop: one timer armed for its head; what is due goes to `sink`, and the
    end of the stream to `on_end` once the data before it is written."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay_s: float, on_end: Callable[[], None]) -> None:
        self.loop = loop
        self.line = DelayLine(delay_s)
        self.sink: asyncio.Transport | None = None  # None until hotloop's side is connected: chunks wait
        self.on_end = on_end
        self.ended = False  # the end of the stream has been passed on
        self._timer: asyncio.TimerHandle | None = None

    def feed(self, chunk: Chunk) -> None:
        self.line.push(self.loop.time(), chunk)
        self._schedule()

    def attach(self, sink: asyncio.Transport) -> None:
        self.sink = sink
        self._schedule()

    def cancel(self) -> None:
        """Stop: the connection is closing, nothing more is written."""
        self.sink = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self) -> None:
        due = self.line.next_due
        if self._timer is not None or due is None or self.sink is None:
            return
        if due <= self.loop.time():  # R = 0, or a sink that connected late: no timer round
            self._flush()
        else:
            self._timer = self.loop.call_at(due, self._flush)

    def _flush(self) -> None:
        self._timer = None
        for chunk in self.line.pop_due(self.loop.time()):
            if self.sink is None:  # the end of the stream closed the connection
                return
            if chunk is None:
                self.ended = True
                self.on_end()
            else:
                self.sink.write(chunk)
        self._schedule()


def _no_delay(transport: asyncio.BaseTransport) -> None:
    """TCP_NODELAY (asyncio sets it on TCP sockets already; said here because every held chunk must go at once)."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Side(asyncio.Protocol):
    """One socket of a proxied connection: what it reads goes into `outgoing` (the other side's pump)."""

    def __init__(self, link: Link, outgoing: Pump) -> None:
        self.link = link
        self.outgoing = outgoing
        self.transport: asyncio.Transport | None = None
        self.read_eof = False
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        _no_delay(transport)
        self.link.connected(self)

    def data_received(self, data: bytes) -> None:
        self.outgoing.feed(bytes(data))

    def eof_received(self) -> bool:
        self.read_eof = True
        self.outgoing.feed(None)
        return True  # a half-close: the other direction may still write to this side

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if not self.read_eof and not self.link.closed:  # a reset: the other side ends after the delay too
            self.outgoing.feed(None)

    # Flow control: while this side's writes back up, the side feeding them stops reading.
    def pause_writing(self) -> None:
        self.link.feeding(self).pause_reading()

    def resume_writing(self) -> None:
        self.link.feeding(self).resume_reading()


class Link:
    """A proxied connection: the client's accepted socket and the one dialled to the target, a pump each way. A
    side's end of stream reaches the other as a half-close (write_eof); once both have ended, or one side is gone,
    both sockets close (their written data flushed first)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay_s: float) -> None:
        self.closed = False
        self.up = Pump(loop, delay_s, lambda: self._ended(self.client, self.server))  # client → target
        self.down = Pump(loop, delay_s, lambda: self._ended(self.server, self.client))  # target → client
        self.client = Side(self, self.up)
        self.server = Side(self, self.down)

    def connected(self, side: Side) -> None:
        """A side's socket is open: the pump towards it can write (the target's may open after data has come)."""
        assert side.transport is not None
        if self.closed:
            side.transport.close()
        else:
            (self.down if side is self.client else self.up).attach(side.transport)

    def feeding(self, side: Side) -> asyncio.Transport:
        """The transport whose reads are written to `side`."""
        other = self.server if side is self.client else self.client
        assert other.transport is not None
        return other.transport

    def _ended(self, source: Side, sink: Side) -> None:
        if (self.up.ended and self.down.ended) or source.lost or sink.lost:
            self.close()
        elif sink.transport is not None and sink.transport.can_write_eof():
            sink.transport.write_eof()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for pump in (self.up, self.down):
            pump.cancel()
        for side in (self.client, self.server):
            if side.transport is not None:
                side.transport.close()


async def _dial(link: Link, host: str, port: int) -> None:
    try:
        await asyncio.get_running_loop().create_connection(lambda: link.server, host, port)
    except OSError:
        link.close()


async def serve(port: int, target: tuple[str, int], delay_s: float) -> asyncio.Server:
    """Listen on 127.0.0.1:`port` (0: a free one), forwarding to `target` with `delay_s` each way."""
    loop = asyncio.get_running_loop()
    dialling: set[asyncio.Task[None]] = set()

    def accept() -> Side:
        link = Link(loop, delay_s)
        task = loop.create_task(_dial(link, *target))
        dialling.add(task)
        task.add_done_callback(dialling.discard)
        return link.client

    return await loop.create_server(accept, "127.0.0.1", port)


def precise_loop() -> asyncio.AbstractEventLoop:
    """asyncio's loop on select(2), whose timeout has microseconds: epoll's (asyncio's default selector) has
    milliseconds and rounds up, which would hold each chunk ~0.5 ms past its deadline; a proxy has a few sockets."""
    return asyncio.SelectorEventLoop(selectors.SelectSelector())


class LatencyProxyProcess(ChildServer):
    """This module's proxy in its own process, in front of 127.0.0.1:`target_port`, holding each chunk
    `one_way_ms` (R/2) in each direction; `base_url` is the target's API through it."""

    def __init__(self, target_port: int, one_way_ms: float, target_host: str = "127.0.0.1") -> None:
        super().__init__("hotloop-bench-proxy-")
        self.one_way_ms = one_way_ms
        target = f"{target_host}:{target_port}"
        command = [sys.executable, "-m", "hotloop.bench.latency_proxy", "--port", str(self.port)]
        self._spawn([*command, "--target", target, "--delay-ms", f"{one_way_ms:g}"], dict(os.environ))

    what = "the latency proxy"
    ready_s = 30.0
    poll_s = 0.02

    def answers(self) -> bool:
        """Ready once it accepts a connection (whatever the target is: an echo server in a test)."""
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m hotloop.bench.latency_proxy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True, help="the port to listen on, on 127.0.0.1")
    parser.add_argument("--target", required=True, metavar="HOST:PORT", help="where to forward each connection")
    parser.add_argument("--delay-ms", type=float, required=True, help="each chunk's delay in each direction (R/2)")
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")

    async def run() -> None:
        server = await serve(args.port, (host, int(port)), args.delay_ms / 1000.0)
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(loop_factory=precise_loop) as runner:
        runner.run(run())


if __name__ == "__main__":
    main()
