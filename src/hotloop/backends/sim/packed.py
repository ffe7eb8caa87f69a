"""Prompts as packed token ids (4 bytes a token) and the longest prefix they share: the simulated prefix caches
of hotloop-sim and `hotloop sim-engine` (one memcmp per prompt compared)."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence

TOKEN_BYTES = array("i").itemsize


def pack(tokens: Sequence[int]) -> bytes:
    """Token ids as bytes (4 per token): a memcpy for the renderer's array("i"), a conversion for a list."""
    return tokens.tobytes() if isinstance(tokens, array) and tokens.typecode == "i" else array("i", tokens).tobytes()


def shared_prefix(a: bytes, b: bytes, at_least: int) -> int:
    """Tokens two packed prompts share from the start; 0 when not more than `at_least` (binary search on memcmp)."""
    size = TOKEN_BYTES
    limit = min(len(a), len(b)) // size
    view = memoryview(a)
    if limit <= at_least or not b.startswith(view[: (at_least + 1) * size]):
        return 0
    low, high = at_least + 1, limit  # invariant: the first `low` tokens match
    while low < high:
        mid = (low + high + 1) // 2
        if b.startswith(view[: mid * size]):
            low = mid
        else:
            high = mid - 1
    return low


def longest_prefix(packed: bytes, recent: Iterable[bytes]) -> int:
    """Tokens of `packed` that one of the `recent` prompts (newest first) holds from the start.

    Newest first: in an agent loop the parent's whole prompt is a prefix (one memcmp), and older, shorter prompts
    of the chain are then skipped without comparing.
    """
    best = 0
    whole = len(packed) // TOKEN_BYTES
    for seen in recent:
        size = len(seen) // TOKEN_BYTES
        if size <= best:
            continue
        best = size if packed.startswith(seen) else max(best, shared_prefix(seen, packed, best))
        if best == whole:
            break
    return best
