"""backends/upstream/sse.py: an engine's SSE bytes, however the socket cuts them, give the same `data:` payloads."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hotloop.backends.base import BackendError
from hotloop.backends.upstream import sse
from hotloop.backends.upstream.sse import ErrorLine, SSEPayloads

pytestmark = pytest.mark.fast

STREAM = (
    b': a comment\n\nevent: message\ndata: {"a": 1}\n\ndata:{"b": "x\\ny"}\r\n\r\n'
    b'data: {"c": [1, 2]}\n\ndata: [DONE]'  # the last line has no newline: the stream's end completes it
)
PAYLOADS = [b'{"a": 1}', b'{"b": "x\\ny"}', b'{"c": [1, 2]}', b"[DONE]"]


def read(chunks: list[bytes]) -> list[bytes]:
    stream = SSEPayloads()
    return [data for chunk in [*chunks, b""] for data in stream.feed(chunk)]


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_cut_of_the_stream_gives_the_same_payloads(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM)]
    chunks = [STREAM[a:b] for a, b in itertools.pairwise(bounds)]
    assert read([chunk for chunk in chunks if chunk]) == PAYLOADS  # a read gives b"" only at the end


def test_an_error_line_comes_in_its_place_after_the_payloads_before_it() -> None:
    # One read holding output and then llama.cpp's error line: the output is the client's (it was sent first).
    got = read([b'data: {"a": 1}\n\nerror: {"message": "boom"}\n\ndata: {"b": 2}\n'])
    assert got == [b'{"a": 1}', ErrorLine(b'{"message": "boom"}'), b'{"b": 2}']


def test_a_line_past_the_limit_fails_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sse, "MAX_LINE", 1000)
    stream = SSEPayloads()
    assert stream.feed(b"data: " + b"x" * 600) == []
    with pytest.raises(BackendError, match="longer than 1000 bytes"):
        stream.feed(b"y" * 600)
