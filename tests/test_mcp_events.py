"""hotloop.mcp.events without a socket: an event stream cut into its `message` events' data however the bytes are
chunked, with each line ending SSE allows, and one event bounded in size."""

from __future__ import annotations

import pytest

from hotloop.mcp.events import EventStream, EventTooLarge

pytestmark = pytest.mark.fast

STREAM = (
    b": a comment\r\n"
    b"event: message\r\n"
    b'data: {"jsonrpc":"2.0","method":"notifications/progress"}\r\n'
    b"\r\n"
    b"id: 7\r\n"
    b"retry: 1000\r\n"
    b'data: {"jsonrpc":"2.0",\r\n'
    b'data: "id":1,"result":{}}\r\n'
    b"\r\n"
    b"event: endpoint\r\n"
    b"data: /messages/\r\n"
    b"\r\n"
    b"event: message\r\n"
    b"id: 8\r\n"
    b"\r\n"
)
DATA = [
    b'{"jsonrpc":"2.0","method":"notifications/progress"}',
    b'{"jsonrpc":"2.0",\n"id":1,"result":{}}',  # two data lines, joined by LF
]  # the `endpoint` event is not a message; the last event has no data


def events_of(chunks: list[bytes], bound: int = 1 << 20) -> list[bytes]:
    stream = EventStream(bound)
    out: list[bytes] = []
    for chunk in [*chunks, b""]:
        out.extend(stream.feed(chunk))
    return out


@pytest.mark.parametrize("ending", [b"\r\n", b"\n", b"\r"])
def test_whole_events_and_every_line_ending(ending: bytes) -> None:
    assert events_of([STREAM.replace(b"\r\n", ending)]) == DATA


@pytest.mark.parametrize("ending", [b"\r\n", b"\r"])
def test_any_chunking(ending: bytes) -> None:
    """Cut anywhere, one byte at a time included, and a CR at a chunk's end that may start a CRLF."""
    stream = STREAM.replace(b"\r\n", ending)
    for size in (1, 2, 3, 7, 64):
        chunks = [stream[at : at + size] for at in range(0, len(stream), size)]
        assert events_of(chunks) == DATA, size
    for cut in range(len(stream)):
        assert events_of([stream[:cut], stream[cut:]]) == DATA, cut


def test_an_event_not_ended_is_not_delivered() -> None:
    assert events_of([b"data: one\n\ndata: two\n"]) == [b"one"]


def test_a_field_without_a_space_or_a_value() -> None:
    assert events_of([b"data:x\n\ndata\ndata: y\n\n"]) == [b"x", b"\ny"]


def test_one_event_is_bounded() -> None:
    stream = EventStream(10)
    assert stream.feed(b"data: 123456789\n\n") == [b"123456789"]  # nine bytes and a line end
    with pytest.raises(EventTooLarge):
        stream.feed(b"data: 12345\ndata: 67890\n")
    with pytest.raises(EventTooLarge):  # a line that never ends is bounded too
        EventStream(10).feed(b"data: " + b"x" * 20)
