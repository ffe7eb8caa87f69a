"""Reasoning items back into a model's input (issue 13): which of them the model reads again, and in what form.

`replay` (an upstream's `reasoning_replay`) picks the items: `chain` keeps the reasoning of the tool chain in
progress (after the last user message) and drops older reasoning, as the Qwen3 and gpt-oss templates do; `all`
keeps every one; `none` drops them (DeepSeek's API refuses reasoning in history). `form` is how the model writes
its reasoning in its output, so that a prompt rendered by hotloop repeats the generated text exactly and the
engine's prefix cache covers it: `think` is `<think>…</think>` before the answer (Qwen3, DeepSeek-R1, GLM);
`harmony` is gpt-oss's analysis channel (chat/harmony.py); `none` (a model that does not reason) renders no
reasoning at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

import msgspec

from hotloop import sealing
from hotloop.wire.items import ContextItem, Message, Reasoning

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ReplayPolicy = Literal["chain", "all", "none"]


class ReasoningPrompt(msgspec.Struct, frozen=True):
    """How a model's prompt carries reasoning items (a `tokens` upstream: `reasoning_parser`, `reasoning_replay`)."""

    form: Literal["think", "harmony", "none"] = "none"
    replay: ReplayPolicy = "chain"


NO_REASONING = ReasoningPrompt()


def reasoning_text(item: Reasoning) -> str:
    """The item's raw text, or, from a stateless client that kept only the sealed form, the text of its
    `encrypted_content` (verified by the validate stage before anything renders)."""
    text = "".join(part.text for part in item.content or ())
    if not text and item.encrypted_content:
        return sealing.peek(item.encrypted_content)
    return text


def last_user(items: Sequence[ContextItem]) -> int:
    """The index of the last user message; -1 when there is none."""
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        if isinstance(item, Message) and item.role == "user":
            return index
    return -1


def replay_from(replay: ReplayPolicy, items: Sequence[ContextItem]) -> int:
    """The index from which `items`' reasoning goes back to the model (len(items): none of it)."""
    if replay == "none":
        return len(items)
    return 0 if replay == "all" else last_user(items) + 1


def think_block(item: Reasoning) -> str | None:
    """The item as the model wrote it, `<think>…</think>`; None when it has no text to replay."""
    text = reasoning_text(item)
    return THINK_OPEN + text + THINK_CLOSE if text else None


def kept_any(items: Sequence[ContextItem], start: int) -> bool:
    """Whether any reasoning with text is at or after `start` (rendered into the prompt)."""
    return any(isinstance(item, Reasoning) and reasoning_text(item) for item in items[start:])


class Replay(NamedTuple):
    """Which reasoning of some items a prompt carries back."""

    start: int | None  # the first item whose reasoning is rendered back (None: the prompt carries none)
    kept: bool  # whether any reasoning with text is rendered back
    user: bool  # whether a user message is among the items (a `chain` policy then forgets earlier reasoning)


def replay(prompt: ReasoningPrompt, items: Sequence[ContextItem]) -> Replay:
    """The reasoning of `items` that goes back to the model, as `prompt` says."""
    user = last_user(items) >= 0
    if prompt.form == "none":
        return Replay(None, False, user)
    start = replay_from(prompt.replay, items)
    return Replay(start, kept_any(items, start), user)
