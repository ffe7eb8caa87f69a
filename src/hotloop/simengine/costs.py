"""The engine's cost model: an LRU of prompt prefixes (what a prefix-caching engine keeps) and prefill time."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from hotloop.backends.sim.packed import longest_prefix, pack


class PrefixCache:
    """Recent prompts as packed token ids, least recently used first; `match` is the longest shared prefix."""

    def __init__(self, entries: int) -> None:
        self.entries = max(0, entries)
        self._prompts: OrderedDict[bytes, None] = OrderedDict()

    def match(self, tokens: Sequence[int]) -> int:
        """Tokens of `tokens` an earlier prompt covers from the start, and remember `tokens` (most recent)."""
        packed = pack(tokens)
        best = longest_prefix(packed, reversed(self._prompts))  # newest first: a continuation's parent covers most
        self._remember(packed)
        return best

    def remember(self, tokens: Sequence[int]) -> None:
        """Keep `tokens` as a cached prefix (a prompt and what it generated)."""
        self._remember(pack(tokens))

    def _remember(self, packed: bytes) -> None:
        if self.entries == 0:
            return
        self._prompts[packed] = None
        self._prompts.move_to_end(packed)
        while len(self._prompts) > self.entries:
            self._prompts.popitem(last=False)

    def __len__(self) -> int:
        return len(self._prompts)


def prefill_ms(prompt_tokens: int, cached_tokens: int, us_per_token: float) -> float:
    """Prefill time: only the tokens not shared with a cached prefix are computed."""
    return max(0, prompt_tokens - cached_tokens) * us_per_token / 1000.0
