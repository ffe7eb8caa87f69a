"""A tool call's payload read as the model writes it, so that its arguments stream as deltas (toolcalls/streaming.py).

`ObjectStream` passes a JSON object's text through unchanged until its braces balance (strings and escapes
respected); `StringStream` passes a JSON string's decoded characters until its closing quote (a freeform tool's
`input`), holding an escape sequence until it is whole. Each `take` returns what is ready and how much of the text
it consumed; what follows the value (the call's closing brace) is left to the caller.
"""

from __future__ import annotations

import re

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_UNICODE = re.compile(r"\\u([0-9a-fA-F]{4})")
_PARTIAL_UNICODE = re.compile(r"(\\(u[0-9a-fA-F]{0,3})?)?")


class ObjectStream:
    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.escaped = False
        self.done = False

    def take(self, text: str) -> tuple[str, int]:
        for index, char in enumerate(text):
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif char == "\\":
                    self.escaped = True
                elif char == '"':
                    self.in_string = False
            elif char == '"':
                self.in_string = True
            elif char in "{[":
                self.depth += 1
            elif char in "}]":
                self.depth -= 1
                if self.depth == 0:
                    self.done = True
                    return text[: index + 1], index + 1
        return text, len(text)


class StringStream:
    """The text of a JSON string, from its opening quote."""

    def __init__(self) -> None:
        self.opened = False
        self.done = False

    def take(self, text: str) -> tuple[str, int]:
        out: list[str] = []
        index = 0
        if not self.opened and text:
            self.opened, index = True, 1  # the opening quote
        while index < len(text):
            char = text[index]
            if char == '"':
                self.done = True
                return "".join(out), index + 1
            if char != "\\":
                out.append(char)
                index += 1
                continue
            decoded, size = _escape(text, index)
            if size == 0:
                break  # a partial escape: held for the next piece
            out.append(decoded)
            index += size
        return "".join(out), index


def _escape(text: str, at: int) -> tuple[str, int]:
    """The escape sequence at `at` decoded and its length; (“”, 0) while it is incomplete."""
    if at + 1 >= len(text):
        return "", 0
    kind = text[at + 1]
    if kind != "u":
        return _ESCAPES.get(kind, kind), 2
    first = _UNICODE.match(text, at)
    if first is None:
        return ("", 0) if len(text) - at < 6 else (text[at : at + 2], 2)
    code = int(first.group(1), 16)
    if not 0xD800 <= code < 0xE000:
        return chr(code), 6
    # A surrogate pair is one character; a lone surrogate (not valid UTF-8 on the wire) becomes U+FFFD.
    second = _UNICODE.match(text, at + 6) if code < 0xDC00 else None
    if second is None and code < 0xDC00 and _PARTIAL_UNICODE.fullmatch(text, at + 6):
        return "", 0  # perhaps the start of the low surrogate
    if second is None or not 0xDC00 <= int(second.group(1), 16) < 0xE000:
        return "\ufffd", 6
    return chr(0x10000 + ((code - 0xD800) << 10) + int(second.group(1), 16) - 0xDC00), 12
