"""What a token-ID prompt offers and has done: its tools and the tool calls in it, read from the decoded text.

A model reading the ids sees the same. Decoding a 100k-token prompt every turn would be the engine's own
per-turn cost, so recent prompts' findings are kept and a continuation decodes only the ids past the longest
remembered prefix (an agent loop's prompt extends the previous one).
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence

from hotloop.chat.specs import ToolSpec
from hotloop.simengine.requests import calls_in, tools_in_prompt

_TOKEN = array("i").itemsize
Found = tuple[list[ToolSpec], int]  # offered tools, calls so far


class PromptScans:
    def __init__(self, decode: Callable[[list[int]], str], entries: int = 64) -> None:
        self._decode = decode
        self._entries = entries
        self._seen: OrderedDict[bytes, Found] = OrderedDict()
        self._lock = threading.Lock()  # scans run on worker threads

    def scan(self, tokens: Sequence[int]) -> Found:
        """The prompt's tools and calls so far (blocking: run it off the event loop)."""
        packed = tokens.tobytes() if isinstance(tokens, array) else array("i", tokens).tobytes()
        prefix, found = b"", None
        with self._lock:
            for seen, result in reversed(self._seen.items()):  # newest first: usually the parent's prompt
                if len(seen) > len(prefix) and packed.startswith(seen):
                    prefix, found = seen, result
        if found is None:
            found = tools_in_prompt(self._decode(_ids(tokens)))
        elif found[0]:  # past the system message only new calls can appear (and no tools when it offered none)
            rest = self._decode(_ids(tokens[len(prefix) // _TOKEN :]))
            found = (found[0], found[1] + calls_in(rest))
        with self._lock:
            self._seen[packed] = found
            self._seen.move_to_end(packed)
            while len(self._seen) > self._entries:
                self._seen.popitem(last=False)
        return found


def _ids(tokens: Sequence[int]) -> list[int]:
    return tokens.tolist() if isinstance(tokens, array) else list(tokens)
