"""A long text cut into pieces that tokenize apart to exactly its own ids, so that the pieces can be encoded on
several cores at once (backends/rust_tokenizer.py).

A BPE tokenizer merges only inside pre-tokens, so a text cut where a pre-token ends tokenizes to the same ids in
pieces. Which places those are depends on the pre-tokenizer; this module knows the common byte-level ones: the GPT-2
split (ByteLevel's own regex: SmolLM2, GPT-2, StarCoder) and the Split patterns of Llama 3 and Qwen 2 before a
byte-level mapping, with or without a digit splitter. For all of them a cut is safe after a newline that follows a
printable non-space ASCII character and precedes an ASCII letter or digit:

- no alternative of theirs matches across such a newline (those that take a prefix character never take a newline;
  Llama's run of punctuation takes the newlines after it, but not a letter or digit);
- the newline is a pre-token, or ends one, the same way whether text follows it or not. After whitespace it would
  not be: `\\s+(?!\\S)` splits a run of whitespace differently at the end of a piece, hence the character before.

Anything else (a normalizer, a prefix space, SentencePiece's Metaspace, an unknown pattern, an added token with a
newline in it) keeps the text whole; the tokenizer also checks the rule on probe texts before it uses it.
"""

from __future__ import annotations

import re
from typing import Any

# The Split patterns (tokenizer.json's `pattern.Regex`) the cut rule holds for.
LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
SPLIT_PATTERNS = frozenset({LLAMA3, QWEN2})
CUT = re.compile(r"(?<=[!-~])\n(?=[0-9A-Za-z])")
# A piece per this many characters at most (~1.5-3 ms of fastokens' time): waking a thread costs 0.1-0.2 ms.
PIECE_CHARS = 16_384


def cuttable(config: dict[str, Any]) -> bool:
    """Whether the cut rule holds for this tokenizer.json (parsed)."""
    model = config.get("model") or {}
    if config.get("normalizer") is not None or model.get("type") != "BPE":
        return False
    if any("\n" in str(token.get("content", "")) for token in config.get("added_tokens") or ()):
        return False
    pre = config.get("pre_tokenizer") or {}
    steps = (pre.get("pretokenizers") or []) if pre.get("type") == "Sequence" else [pre]
    splits = False
    for step in steps:
        kind = step.get("type")
        if kind == "ByteLevel" and not step.get("add_prefix_space", True):
            splits = splits or bool(step.get("use_regex", True))
        elif kind == "Split" and _known_split(step):
            splits = True
        elif kind != "Digits":
            return False
    return splits


def _known_split(step: dict[str, Any]) -> bool:
    pattern = step.get("pattern") or {}
    return pattern.get("Regex") in SPLIT_PATTERNS and step.get("behavior") == "Isolated" and not step.get("invert")


def pieces(text: str, count: int) -> list[str]:
    """`text` in at most `count` pieces of about equal length, cut at safe places only (fewer where there are none)."""
    cuts: list[str] = []
    start = 0
    for k in range(1, count):
        found = CUT.search(text, max(start, len(text) * k // count))
        if found is None:
            break
        cuts.append(text[start : found.end()])
        start = found.end()
    cuts.append(text[start:])
    return cuts


def cut_points(text: str) -> list[int]:
    """Every safe place to cut `text` (for probes and tests)."""
    return [found.end() for found in CUT.finditer(text)]
