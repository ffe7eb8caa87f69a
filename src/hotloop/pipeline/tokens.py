"""Prompt token ids, computed in proportion to the new input (issue 2, stage 1).

A chat template that renders each message on its own (ChatML and most others) lets a conversation be tokenized
message by message: the text of messages m1…mk rendered after the conversation's first message m0 is
`render([m0, m1…mk])` minus `render([m0])`, and when that text starts with a special token (the template's
message marker), its token ids can be appended to those of the earlier messages without touching them.

- A chain keeps its `Rendered` state; a continuation renders and tokenizes only its new messages (plus the last
  message when a new assistant item merges into it).
- A request that resends the whole history (HTTP without `previous_response_id`) looks each message up in a
  bounded content-addressed `TokenCache` (hash of the message → its token ids).
- A template for which this does not hold is detected once (`ChatFormat` probe) and on every turn (the prefix
  check); such requests fall back to a full render, counted in `RenderStats.fallbacks`.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence

from hotloop.pipeline.render import Chat, ChatFormat

# Ids stored per cached token: array("i") uses 4 bytes; the entry overhead is counted on top.
_ENTRY_OVERHEAD = 96


class RenderStats:
    """Counters of the render stage (exported as metrics)."""

    __slots__ = ("cache_hits", "cache_misses", "chain_hits", "fallbacks", "full_renders")

    def __init__(self) -> None:
        self.chain_hits = 0  # continuations rendered from the chain's state
        self.full_renders = 0  # requests rendered without a chain state
        self.cache_hits = 0  # messages found in the token cache
        self.cache_misses = 0
        self.fallbacks = 0  # renders that could not be incremental (template not prefix-stable)


class TokenCache:
    """Content-addressed token ids of rendered messages, LRU, bounded in bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.evictions = 0  # entries dropped for space (the metric hotloop_cache_evictions_total)
        self._entries: OrderedDict[bytes, array[int]] = OrderedDict()

    @staticmethod
    def key(fmt: ChatFormat, message: Chat) -> bytes:
        digest = hashlib.blake2b(digest_size=16, key=fmt.cache_salt)
        digest.update(message["role"].encode())
        digest.update(b"\0")
        digest.update(message["content"].encode())
        return digest.digest()

    def get(self, key: bytes) -> array[int] | None:
        tokens = self._entries.get(key)
        if tokens is not None:
            self._entries.move_to_end(key)
        return tokens

    def put(self, key: bytes, tokens: array[int]) -> None:
        size = len(tokens) * 4 + _ENTRY_OVERHEAD
        if size > self.max_bytes or key in self._entries:
            return
        self._entries[key] = tokens
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.bytes -= len(evicted) * 4 + _ENTRY_OVERHEAD
            self.evictions += 1

    def __len__(self) -> int:
        return len(self._entries)


class Rendered:
    """A conversation's token ids without the generation prompt; shared append-only along a chain.

    `tokens` may be longer than this view (`length`) when a sibling turn already appended to it; extending
    such a view copies first, as `Context` does.
    """

    __slots__ = ("base", "base_text", "last", "last_start", "length", "source", "system", "tokens")

    def __init__(
        self,
        *,
        system: Chat | None,
        base: Chat,
        base_text: str,
        tokens: array[int],
        length: int,
        last: Chat,
        last_start: int,
        source: object = None,
    ) -> None:
        self.system = system
        self.source = source  # what the system message was built from (instructions, offered tools)
        self.base = base  # the conversation's first message, rendered before every segment
        self.base_text = base_text
        self.tokens = tokens
        self.length = length
        self.last = last  # the last message, which a following assistant item may merge into
        self.last_start = last_start


class NotIncremental(Exception):
    """The template did not render a segment as a suffix starting at a special token."""


class PromptRenderer:
    def __init__(self, cache: TokenCache, stats: RenderStats | None = None) -> None:
        self.cache = cache
        self.stats = stats or RenderStats()

    def _segment(self, fmt: ChatFormat, base: Chat, base_text: str, messages: Sequence[Chat]) -> array[int]:
        text = fmt.render_text([base, *messages], add_generation_prompt=False)
        if not text.startswith(base_text):
            raise NotIncremental
        tokens = array("i", fmt.tokenizer.encode(text[len(base_text) :]))
        if tokens and tokens[0] not in fmt.boundary_ids:
            raise NotIncremental
        return tokens

    def _message(self, fmt: ChatFormat, base: Chat, base_text: str, message: Chat) -> array[int]:
        key = TokenCache.key(fmt, message)
        tokens = self.cache.get(key)
        if tokens is None:
            self.stats.cache_misses += 1
            tokens = self._segment(fmt, base, base_text, [message])
            self.cache.put(key, tokens)
        else:
            self.stats.cache_hits += 1
        return tokens

    def full(
        self, fmt: ChatFormat, system: Chat | None, messages: list[Chat], source: object = None
    ) -> tuple[array[int], Rendered | None]:
        """Token ids of the whole prompt, from cached messages where possible; the state for continuations."""
        self.stats.full_renders += 1
        every = ([system] if system else []) + messages
        if not every:
            return array("i", fmt.tokens(every)), None
        if not fmt.incremental:
            return self._fallback(fmt, every)
        base = every[0]
        base_text = fmt.render_text([base], add_generation_prompt=False)
        tokens = array("i", fmt.tokenizer.encode(base_text))
        last_start = 0
        try:
            for message in every[1:]:
                last_start = len(tokens)
                tokens.extend(self._message(fmt, base, base_text, message))
        except NotIncremental:
            return self._fallback(fmt, every)
        state = Rendered(
            system=system,
            base=base,
            base_text=base_text,
            tokens=tokens,
            length=len(tokens),
            last=every[-1],
            last_start=last_start,
            source=source,
        )
        return self._prompt(fmt, state), state

    def extend(
        self, fmt: ChatFormat, state: Rendered, replaced: Chat | None, messages: list[Chat]
    ) -> tuple[array[int], Rendered] | None:
        """Continue `state` with new messages, rendering only them; `replaced` is the state's last message when
        the first new message merged into it (that message is then rendered again). None: not incremental."""
        if not messages:
            self.stats.chain_hits += 1
            return self._prompt(fmt, state), state
        if replaced is not None and state.last is state.base:
            return None  # the merge changes the base message itself: only a full render can redo it
        keep = state.last_start if replaced is not None else state.length
        tokens = state.tokens if len(state.tokens) == keep else state.tokens[:keep]
        try:
            last_start = keep
            if len(messages) > 1:
                tokens.extend(self._segment(fmt, state.base, state.base_text, messages[:-1]))
                last_start = len(tokens)
            tokens.extend(self._segment(fmt, state.base, state.base_text, messages[-1:]))
        except NotIncremental:
            del tokens[keep:]
            return None
        self.stats.chain_hits += 1
        new = Rendered(
            system=state.system,
            base=state.base,
            base_text=state.base_text,
            tokens=tokens,
            length=len(tokens),
            last=messages[-1],
            last_start=last_start,
            source=state.source,
        )
        return self._prompt(fmt, new), new

    def _prompt(self, fmt: ChatFormat, state: Rendered) -> array[int]:
        prompt = state.tokens[: state.length]  # one memcpy, no per-token objects
        prompt.extend(fmt.generation_ids)
        return prompt

    def _fallback(self, fmt: ChatFormat, messages: list[Chat]) -> tuple[array[int], None]:
        self.stats.fallbacks += 1
        return array("i", fmt.tokens(messages)), None


PROBE: list[Chat] = [
    {"role": "system", "content": "You are a probe.\n\nTools: none."},
    {"role": "user", "content": "Hello  there,\n  how are you?"},
    {"role": "assistant", "content": 'Fine.\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'},
    {"role": "tool", "content": "  42\n"},
    {"role": "user", "content": "Thanks. ünïcode ✓"},
]


def probe_incremental(fmt: ChatFormat) -> bool:
    """Whether message-by-message rendering gives exactly the full render's ids for this template (checked once)."""
    if not fmt.boundary_ids or not fmt.generation_ids:
        return False
    fmt.incremental = True
    renderer = PromptRenderer(TokenCache(1 << 20))
    try:
        expected = fmt.tokens(PROBE)
        prompt, state = renderer.full(fmt, PROBE[0], PROBE[1:3])
        extended = renderer.extend(fmt, state, None, PROBE[3:]) if state is not None else None
        fmt.incremental = renderer.stats.fallbacks == 0 and extended is not None and extended[0].tolist() == expected
        fmt.incremental = fmt.incremental and prompt.tolist() == fmt.tokens(PROBE[:3])
    except Exception:
        fmt.incremental = False
    return fmt.incremental
