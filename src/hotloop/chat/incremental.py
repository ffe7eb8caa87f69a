"""Prompt token ids, computed in proportion to the new input (issue 2, stage 1).

A chat template that renders each message on its own (ChatML and most others) lets a conversation be tokenized
message by message: the text of messages m1…mk rendered after the conversation's first message m0 is
`render([m0, m1…mk])` minus `render([m0])`, and when that text starts with a special token (the template's
message marker), its token ids can be appended to those of the earlier messages without touching them.

- A chain keeps its `Rendered` state; a continuation renders and tokenizes only its new messages (plus the last
  message when a new assistant item merges into it).
- A request that resends the whole history (HTTP without `previous_response_id`) looks each message up in a
  bounded content-addressed `TokenCache` (hash of the message → its token ids), the first message included.
- Long texts are encoded on a worker thread (`Encoder`), and a prompt that cannot fit the context window is
  refused from its length alone (`token_floor`) before any of it is tokenized.
- A template for which this does not hold is detected once (`ChatFormat` probe) and on every turn (the prefix
  check); such requests fall back to a full render, counted in `RenderStats.fallbacks`.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from array import array
from collections.abc import Coroutine, Sequence
from concurrent.futures import Executor
from typing import Any, TypeVar, cast

from hotloop.chat.format import Chat, ChatFormat
from hotloop.lru import ByteLRU

T = TypeVar("T")
# Texts at least this long (characters, all of a render's texts together) are encoded on a worker thread: about
# 2 ms of fastokens' time on one core, the most one render may hold the event loop for tokenizing.
OFFLOAD_CHARS = 16_384
# Messages longer than this (characters) are not cached: always encoded, off the event loop (`Encoder`).
CACHED_CHARS = 256 * 1024
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


class TokenCache(ByteLRU[bytes, "array[int]"]):
    """Content-addressed token ids of rendered messages, LRU, bounded in bytes; `evictions` counts the entries
    dropped for space (the metric hotloop_cache_evictions_total)."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(max_bytes, _cached_bytes)

    @staticmethod
    def key(fmt: ChatFormat, message: Chat, first: bool = False) -> bytes | None:
        """The key of a message's ids; `first`: as the conversation's first message, rendered alone (other ids).
        None for a message too long to cache: hashing megabytes would hold the event loop, and its ids would
        crowd out hundreds of ordinary messages."""
        if len(message["content"]) > CACHED_CHARS:
            return None
        digest = hashlib.blake2b(digest_size=16, key=fmt.cache_salt)
        digest.update(b"first\0" if first else b"after\0")
        digest.update(message["role"].encode())
        digest.update(b"\0")
        digest.update(message["content"].encode())
        return digest.digest()

    def put(self, key: bytes, value: array[int]) -> None:
        """A message's ids never change: a key already held keeps its entry (and its place)."""
        self.add(key, value)


def _cached_bytes(tokens: array[int]) -> int:
    return len(tokens) * 4 + _ENTRY_OVERHEAD


class Rendered:
    """A conversation's token ids without the generation prompt; shared append-only along a chain.

    `tokens` may be longer than this view (`length`) when a sibling turn already appended to it; extending
    such a view copies first, as `Context` does.
    """

    __slots__ = ("base", "base_text", "last", "last_start", "length", "reasoning", "source", "system", "tokens")

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
        reasoning: bool = False,
    ) -> None:
        self.system = system
        self.source = source  # what the system message was built from (instructions, offered tools)
        self.base = base  # the conversation's first message, rendered before every segment
        self.base_text = base_text
        self.tokens = tokens
        self.length = length
        self.last = last  # the last message, which a following assistant item may merge into
        self.last_start = last_start
        # Reasoning items are rendered in it (chat/reasoning.py): a `chain` policy drops them at the next user
        # message, which then renders in full.
        self.reasoning = reasoning


class Encoder:
    """Token ids of texts: on the event loop while they are short, on a worker thread once they are long.

    Every tokenizer hotloop uses releases the GIL while it encodes a long text (`encode_array` of the Rust ones,
    llama.cpp through ctypes), so a 1 MB tool output costs the other sessions on this loop nothing; a short
    text stays inline, where a thread hop would cost more than the encode itself.
    """

    def __init__(self, offload_chars: float = OFFLOAD_CHARS, executor: Executor | None = None) -> None:
        self.offload_chars = offload_chars
        self.executor = executor
        self.offloaded = 0  # encodes sent to the worker thread (tests and metrics read it)

    async def encode(self, fmt: ChatFormat, texts: list[str]) -> list[array[int]]:
        if sum(map(len, texts)) < self.offload_chars:
            return _encode_all(fmt, texts)
        self.offloaded += 1
        return await asyncio.get_running_loop().run_in_executor(self.executor, _encode_all, fmt, texts)


def _encode_all(fmt: ChatFormat, texts: list[str]) -> list[array[int]]:
    tokenizer = fmt.tokenizer
    encode_array = getattr(tokenizer, "encode_array", None)  # the Rust tokenizers': a long text without the GIL
    if encode_array is not None:
        return [encode_array(text) for text in texts]
    return [array("i", tokenizer.encode(text)) for text in texts]


INLINE = Encoder(offload_chars=math.inf)


def token_floor(fmt: ChatFormat, messages: Sequence[Chat]) -> int:
    """A lower bound on the tokens of these messages, from their lengths alone (no tokenizing): every token
    stands for at most `max_token_chars` characters, and a message of a per-message template starts with its own
    special token."""
    per_token = getattr(fmt.tokenizer, "max_token_chars", 0)
    floor = sum(len(message["content"]) for message in messages) // per_token if per_token else 0
    return max(floor, len(messages) if fmt.incremental else 0)


class PromptRenderer:
    """Renders a prompt from the token cache and a chain's state; texts are rendered here, encoded by `encoder`,
    and the results checked and assembled here, so shared state is only touched on the event loop."""

    def __init__(self, cache: TokenCache, stats: RenderStats | None = None, encoder: Encoder | None = None) -> None:
        self.cache = cache
        self.stats = stats or RenderStats()
        self.encoder = encoder or Encoder()

    async def full(
        self, fmt: ChatFormat, system: Chat | None, messages: list[Chat], source: object = None, reasoning: bool = False
    ) -> tuple[array[int], Rendered | None]:
        """Token ids of the whole prompt, from cached messages where possible; the state for continuations
        (`reasoning`: reasoning items are rendered in the messages).

        The first message is rendered alone and every later one after it; each is cached by content, the first
        one under its own key, so a client that resends its whole history tokenizes none of it again."""
        self.stats.full_renders += 1
        every = ([system] if system else []) + messages
        if not every or not fmt.incremental:
            return await self._fallback(fmt, every, count=bool(every)), None
        base = every[0]
        base_text = fmt.render_text([base], add_generation_prompt=False)
        keys = [TokenCache.key(fmt, message, first=index == 0) for index, message in enumerate(every)]
        parts = [self.cache.get(key) if key is not None else None for key in keys]
        missing = [index for index, part in enumerate(parts) if part is None]
        self.stats.cache_hits += len(parts) - len(missing)
        self.stats.cache_misses += len(missing)
        texts = [base_text if index == 0 else fmt.segment_text(base, base_text, [every[index]]) for index in missing]
        if None in texts:
            return await self._fallback(fmt, every), None
        encoded = await self.encoder.encode(fmt, cast(list[str], texts))
        if not all(_starts_at_boundary(fmt, part) for index, part in zip(missing, encoded, strict=True) if index):
            return await self._fallback(fmt, every), None
        for index, ids in zip(missing, encoded, strict=True):
            parts[index] = ids
            key = keys[index]
            if key is not None:
                self.cache.put(key, ids)
        tokens: array[int] = array("i")
        for done in parts[:-1]:
            tokens.extend(cast("array[int]", done))
        last_start = len(tokens) if len(parts) > 1 else 0
        tokens.extend(cast("array[int]", parts[-1]))
        state = Rendered(
            system=system,
            base=base,
            base_text=base_text,
            tokens=tokens,
            length=len(tokens),
            last=every[-1],
            last_start=last_start,
            source=source,
            reasoning=reasoning,
        )
        return self._prompt(fmt, state), state

    async def extend(
        self, fmt: ChatFormat, state: Rendered, replaced: Chat | None, messages: list[Chat], reasoning: bool = False
    ) -> tuple[array[int], Rendered] | None:
        """Continue `state` with new messages, rendering only them; `replaced` is the state's last message when
        the first new message merged into it (that message is then rendered again); `reasoning`: the new
        messages render reasoning items. None: not incremental."""
        if not messages:
            self.stats.chain_hits += 1
            return self._prompt(fmt, state), state
        if replaced is not None and state.last is state.base:
            return None  # the merge changes the base message itself: only a full render can redo it
        groups = [messages[:-1], messages[-1:]] if len(messages) > 1 else [messages]
        texts = [fmt.segment_text(state.base, state.base_text, group) for group in groups]
        if None in texts:
            return None
        encoded = await self.encoder.encode(fmt, cast(list[str], texts))
        if not all(_starts_at_boundary(fmt, part) for part in encoded):
            return None
        keep = state.last_start if replaced is not None else state.length
        # Checked after the encode: a sibling turn of the same parent may have appended meanwhile.
        tokens = state.tokens if len(state.tokens) == keep else state.tokens[:keep]
        last_start = keep + (len(encoded[0]) if len(encoded) > 1 else 0)
        for part in encoded:
            tokens.extend(part)
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
            reasoning=state.reasoning or reasoning,
        )
        return self._prompt(fmt, new), new

    async def tokens(self, fmt: ChatFormat, messages: list[Chat]) -> array[int]:
        """The whole prompt rendered and tokenized at once (truncation, templates that are not per-message)."""
        return (await self.encoder.encode(fmt, [fmt.render_text(messages)]))[0]

    def _prompt(self, fmt: ChatFormat, state: Rendered) -> array[int]:
        prompt = state.tokens[: state.length]  # one memcpy, no per-token objects
        prompt.extend(fmt.generation_ids)
        return prompt

    async def _fallback(self, fmt: ChatFormat, messages: list[Chat], count: bool = True) -> array[int]:
        if count:
            self.stats.fallbacks += 1
        return await self.tokens(fmt, messages)


def _starts_at_boundary(fmt: ChatFormat, tokens: array[int]) -> bool:
    return not tokens or tokens[0] in fmt.boundary_ids


def run_inline(step: Coroutine[Any, Any, T]) -> T:
    """Run a render coroutine whose encoder never offloads (`INLINE`): it finishes without suspending."""
    try:
        step.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    step.close()
    raise RuntimeError("an inline render suspended")


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
    renderer = PromptRenderer(TokenCache(1 << 20), encoder=INLINE)
    try:
        expected = fmt.tokens(PROBE)
        prompt, state = run_inline(renderer.full(fmt, PROBE[0], PROBE[1:3]))
        extended = run_inline(renderer.extend(fmt, state, None, PROBE[3:])) if state is not None else None
        fmt.incremental = renderer.stats.fallbacks == 0 and extended is not None and extended[0].tolist() == expected
        fmt.incremental = fmt.incremental and prompt.tolist() == fmt.tokens(PROBE[:3])
    except Exception:
        fmt.incremental = False
    if fmt.incremental:
        fmt.learn_wrappers()
    return fmt.incremental
