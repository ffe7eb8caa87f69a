"""What every safety classifier shares: verdicts and actions, a finding, the classifier protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, TypeVar

import msgspec

from hotloop.wire.items import ContextItem

Verdict = Literal["allow", "flag", "block"]
Action = Literal["off", "flag", "block"]

S = TypeVar("S")
R = TypeVar("R")


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One thing a classifier found in one item of the scanned batch.

    `index` is the item's position in the batch passed to `scan` (the turn's new items), not in the chain.
    `excerpt` is safe to log and store: a secret is never in it (see `redact`).
    """

    classifier: str
    rule: str
    index: int
    excerpt: str
    score: float = 1.0


class Classifier(Protocol[S, R]):
    """A classifier over the new items of a turn, threading an immutable state along the chain.

    Its work is split in two so that the expensive part can be cached by content (safety/cache.py):

    - `texts(item)`: what it reads of an item (None: it does not look at this item at all);
    - `analyze(texts)`: the expensive part, a pure function of those texts only (its result `R` is immutable and
      never holds a secret); `result_size` estimates the bytes it holds, for the cache's bound; `version` is part
      of the cache key, bump it when what `analyze` returns changes;
    - `fold(state, results)`: the cheap, stateful part over `(index, result)` of the items read, in order.

    `scan(state, items)` is `fold(state, [(i, analyze(texts(item))) …])`. Neither mutates `state` (a parent's
    state is shared by every turn forked from it): they return the state after `items`, which may be the same
    object when nothing changed.
    """

    name: str
    version: int

    def initial_state(self) -> S: ...

    def texts(self, item: ContextItem) -> tuple[str, ...] | None: ...

    def analyze(self, texts: tuple[str, ...]) -> R: ...

    def result_size(self, result: R) -> int: ...

    def fold(self, state: S, results: Sequence[tuple[int, R]]) -> tuple[S, list[Finding]]: ...

    def scan(self, state: S, items: Sequence[ContextItem]) -> tuple[S, list[Finding]]: ...


def scan_uncached(classifier: Classifier[S, R], state: S, items: Sequence[ContextItem]) -> tuple[S, list[Finding]]:
    """`classifier.scan` without a cache: analyze each item it reads, then fold."""
    results: list[tuple[int, R]] = []
    for index, item in enumerate(items):
        texts = classifier.texts(item)
        if texts is not None:
            results.append((index, classifier.analyze(texts)))
    return classifier.fold(state, results)


def redact(secret: str) -> str:
    """A secret as it may appear in a finding: at most its first 4 characters (a quarter of it) and its length."""
    keep = min(4, len(secret) // 4)
    return f"{secret[:keep]}…({len(secret)} chars)"


def clip(text: str, limit: int = 64) -> str:
    """A matched phrase for an excerpt: one line, invisible characters spelled out, at most `limit` characters."""
    out: list[str] = []
    for char in text:
        code = ord(char)
        if char in "\r\n\t":
            out.append(" ")
        elif code < 0x20 or 0x200B <= code <= 0x200F or 0x202A <= code <= 0x202E or 0x2060 <= code <= 0x2069:
            out.append(f"\\u{code:04x}")
        elif code == 0xFEFF or 0xE0000 <= code <= 0xE007F:
            out.append(f"\\U{code:08x}" if code > 0xFFFF else f"\\u{code:04x}")
        else:
            out.append(char)
    joined = "".join(out)
    return joined if len(joined) <= limit else joined[: limit - 1] + "…"


def worst(verdicts: Sequence[Verdict]) -> Verdict:
    """block > flag > allow."""
    if "block" in verdicts:
        return "block"
    if "flag" in verdicts:
        return "flag"
    return "allow"
