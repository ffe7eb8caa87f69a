"""Text frames to one WebSocket: the event bytes as they are, every frame queued in one loop iteration sent in one
write (issue 11).

Through ASGI each event costs a `send` call through Starlette's and uvicorn's layers, a bytes → str → bytes round
trip (ASGI carries text frames as str) and a socket write of its own. With uvicorn's websockets-sansio protocol
(the one transports/server.py configures) the writer instead frames the bytes itself and writes all frames queued
in one iteration of the event loop together, after the producers of that iteration have run. Any other ASGI server
gets the plain ASGI path, frame by frame.

A delta frame may wait a few milliseconds more, to share its write with the deltas after it (pacing.py); any
other frame is written with this loop iteration's write, and takes the waiting deltas along.

The writer never makes a producer wait. While the client reads slower than the server writes (the transport has
paused writing), frames stay queued here and `congested` is true, so that a turn merges its deltas instead of
queueing a frame per token (pipeline/merge.py); the queue is written once the transport resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Any

from starlette.websockets import WebSocket

from hotloop.transports.pacing import FlushWindow

OP_TEXT_FIN = 0x81  # FIN + text opcode (RFC 6455 §5.2); server frames are never masked


class WriterClosed(OSError):
    """The connection is closing or gone: nothing more can be sent (the pump treats it as a disconnect)."""


def text_frame(data: bytes) -> bytes:
    """The RFC 6455 frame of an unfragmented, unmasked text message (no extension negotiated)."""
    size = len(data)
    if size < 126:
        return bytes((OP_TEXT_FIN, size)) + data
    if size < 1 << 16:
        return struct.pack("!BBH", OP_TEXT_FIN, 126, size) + data
    return struct.pack("!BBQ", OP_TEXT_FIN, 127, size) + data


class FrameWriter:
    def __init__(self, websocket: WebSocket, flush_window_s: float = 0.0) -> None:
        self.ws = websocket
        self._protocol = _sansio_protocol(websocket)
        self._queue: list[bytes] = []
        self._loop = asyncio.get_running_loop()
        self._flush_scheduled = False
        self._window = FlushWindow(flush_window_s)
        self._timer: asyncio.TimerHandle | None = None  # a delta waiting for the window's end
        self._queued_delta = False
        self._resume: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # the ASGI path only: one send at a time
        self.writes = 0  # transport writes (tests read it: fewer than frames when coalesced)

    @property
    def direct(self) -> bool:
        """Whether frames bypass ASGI (uvicorn's websockets-sansio protocol)."""
        return self._protocol is not None

    @property
    def congested(self) -> bool:
        """The client reads slower than the server writes: frames are waiting for the transport."""
        protocol = self._protocol
        return protocol is not None and not protocol.writable.is_set()

    async def send(self, data: bytes, delta: bool = False) -> None:
        """Queue one text frame; it leaves at the end of this loop iteration, or, a `delta`, at the end of the flush
        window (raises `WriterClosed` once closing)."""
        protocol = self._protocol
        if protocol is None:
            async with self._lock:
                # ASGI carries text frames as str; Codex rejects binary frames (protocol.md §3.2).
                await self.ws.send({"type": "websocket.send", "text": data.decode()})
            return
        if protocol.disconnected or protocol.close_sent:
            raise WriterClosed("the WebSocket is closing")
        self._queue.append(data)
        if delta:
            self._queued_delta = True  # the write that takes it moves the window on
        if self._flush_scheduled:
            return
        if delta:
            if self._timer is not None:
                return  # it leaves with the deltas already waiting
            wait = self._window.delay(self._loop.time())
            if wait > 0:
                self._timer = self._loop.call_later(wait, self._flush)
                return
        self._flush_scheduled = True
        self._loop.call_soon(self._flush)

    def _flush(self, force: bool = False) -> None:
        self._flush_scheduled = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        protocol = self._protocol
        if not self._queue or protocol is None:
            return
        if protocol.disconnected or protocol.close_sent:
            self._queue.clear()
            return
        if not force and not protocol.writable.is_set():
            if self._resume is None or self._resume.done():
                self._resume = asyncio.ensure_future(self._flush_when_writable())
            return
        queued, self._queue = self._queue, []
        conn = protocol.conn
        if conn.extensions:  # permessage-deflate: websockets compresses each frame
            for data in queued:
                conn.send_text(data)
            chunk = b"".join(conn.data_to_send())
        else:
            pending = conn.data_to_send()  # whatever the protocol queued itself (a pong) goes first
            chunk = b"".join([*pending, *map(text_frame, queued)])
        protocol.transport.write(chunk)
        self.writes += 1
        if self._queued_delta:
            self._queued_delta = False
            self._window.wrote(self._loop.time())

    async def _flush_when_writable(self) -> None:
        protocol = self._protocol
        assert protocol is not None
        await protocol.writable.wait()
        self._flush()

    async def close(self, code: int, reason: str = "") -> None:
        """Send what is queued (which also stops a window's timer), then the close frame."""
        self._flush(force=True)
        if self._resume is not None:
            self._resume.cancel()
        await self.ws.close(code, reason)


RAW_SEND = "hotloop.raw_send"


class RawSend:
    """ASGI middleware: keeps a WebSocket's `send` as the server passed it, before Starlette wraps it, in the
    scope, so that `FrameWriter` can find the protocol object behind it."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            scope[RAW_SEND] = send
        await self.app(scope, receive, send)


def _sansio_protocol(websocket: WebSocket) -> Any | None:
    """uvicorn's websockets-sansio protocol behind this WebSocket, when the app runs under it (its ASGI `send` is
    the protocol's bound method), with the attributes the writer uses; else None."""
    protocol: Any = getattr(websocket.scope.get(RAW_SEND), "__self__", None)
    if type(protocol).__name__ != "WebSocketsSansIOProtocol":
        return None
    needed = ("conn", "transport", "writable", "disconnected", "close_sent")
    if not all(hasattr(protocol, name) for name in needed):
        return None
    with contextlib.suppress(AttributeError):
        if hasattr(protocol.conn, "send_text") and hasattr(protocol.conn, "extensions"):
            return protocol
    return None
