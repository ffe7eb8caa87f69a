"""The render door: a turn's prompt as token ids, in its model's dialect, extending what came before when it can.

`render(...)` is the one call the pipeline makes (pipeline/prompt.py adds the window policy around it):

- A continuation whose system message (instructions + offered tools, and the effort where the dialect writes it)
  and chat format match its base's renders only the base's pending output and the new input (`extend`).
- Anything else renders the whole context from the token cache (`full`): the items read from their latest
  compaction on (chat/compacted.py), reasoning replayed as the model's `ReasoningPrompt` says (chat/reasoning.py).
- A model behind a chat API (an upstream engine) is not rendered: its prompt is the context's items.
- MCP items read as the function calls and outputs they stand for (chat/hosted.py), so no dialect knows them:
  expanded here for the token dialects (the whole context where it is walked anyway, only the batch when
  extending), item by item by the chat-API messages (backends/upstream/chat_messages.py), which keeps the
  context's items the very objects a continuation's cached messages were built from.

The dialect (hermes/ChatML templates, or gpt-oss's harmony, which hotloop renders itself) is chosen once, when the
model is built (`Style.of`).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from hotloop.chat import harmony, messages
from hotloop.chat.compacted import effective, latest
from hotloop.chat.format import Chat, ChatFormat
from hotloop.chat.hosted import as_calls
from hotloop.chat.incremental import PromptRenderer, Rendered, token_floor
from hotloop.chat.reasoning import NO_REASONING, ReasoningPrompt, replay
from hotloop.chat.specs import ToolSpec
from hotloop.wire.items import ContextItem

Source = tuple[str | None, tuple[ToolSpec, ...], str | None]  # what a system message is built from


class Dialect(Protocol):
    """How items read as template messages for one family of models."""

    writes_effort: bool  # the reasoning effort is part of the system message (gpt-oss)

    def system(self, source: Source) -> Chat | None: ...

    def messages(
        self, items: Sequence[ContextItem], after: Chat | None, think_from: int | None, history: Sequence[ContextItem]
    ) -> tuple[Chat | None, list[Chat]]: ...


class TemplateDialect:
    """A model's own chat template (hermes tool calls, `<think>` reasoning): chat/messages.py."""

    writes_effort = False

    def system(self, source: Source) -> Chat | None:
        return messages.system_message(source[0], source[1])

    def messages(
        self, items: Sequence[ContextItem], after: Chat | None, think_from: int | None, history: Sequence[ContextItem]
    ) -> tuple[Chat | None, list[Chat]]:
        return messages.item_messages(items, after, think_from)


class HarmonyDialect:
    """gpt-oss's harmony, rendered by hotloop (chat/harmony.py): the effort is in its system message."""

    writes_effort = True

    def system(self, source: Source) -> Chat | None:
        return harmony.system_message(*source)

    def messages(
        self, items: Sequence[ContextItem], after: Chat | None, think_from: int | None, history: Sequence[ContextItem]
    ) -> tuple[Chat | None, list[Chat]]:
        return harmony.item_messages(items, after, think_from, history)


@dataclass(frozen=True, slots=True)
class Style:
    """How one model's prompts are written, fixed when the model is built."""

    fmt: ChatFormat
    reasoning: ReasoningPrompt
    dialect: Dialect
    tokens: bool  # False: a chat API's engine renders and tokenizes; hotloop hands it items

    @classmethod
    def of(cls, fmt: ChatFormat, reasoning: ReasoningPrompt = NO_REASONING, *, tokens: bool = True) -> Style:
        dialect: Dialect = HarmonyDialect() if reasoning.form == "harmony" else TemplateDialect()
        return cls(fmt, reasoning, dialect, tokens)

    def source(self, instructions: str | None, tools: Sequence[ToolSpec], effort: str | None) -> Source:
        return (instructions, tuple(tools), effort if self.dialect.writes_effort else None)


class PromptBase(NamedTuple):
    """What a prompt continues: the items before the new input, and how far they are already rendered."""

    context: Sequence[ContextItem]  # every item before the new input
    rendered: Rendered | None  # token ids of context minus `pending`
    chat: ChatFormat | None  # the format `rendered` was rendered with
    pending: Sequence[ContextItem] = ()  # the last items of context, not in `rendered` (a parent's output)


class Prompt(NamedTuple):
    tokens: array[int]  # the prompt (empty for a model behind a chat API)
    state: Rendered | None  # what a continuation of this turn extends
    items: Sequence[ContextItem]  # the context as a chat API's engine reads it (empty for token models)
    system: Chat | None  # the system message the prompt starts with


class TooLong(Exception):
    """The prompt has at least `floor` tokens, counted from its length before it was tokenized."""

    def __init__(self, floor: int) -> None:
        super().__init__(f"at least {floor} tokens")
        self.floor = floor


async def render(
    renderer: PromptRenderer,
    style: Style,
    source: Source,
    base: PromptBase | None,
    new_items: Sequence[ContextItem],
    refuse_at: int | None = None,
) -> Prompt:
    """The prompt of `new_items` after `base`; raises `TooLong` when its length alone shows it has at least
    `refuse_at` tokens (before megabytes of it are tokenized)."""
    if not style.tokens:
        context = base.context if base is not None else ()
        return Prompt(array("i"), None, list(effective([*context, *new_items])), None)
    reusable = base.rendered if base is not None else None
    # The tool list is rendered once per chain: again only when instructions or offered tools change.
    system = reusable.system if reusable is not None and reusable.source == source else style.dialect.system(source)
    if base is not None and base.rendered is not None and base.chat is style.fmt:
        prompt = await _extend(renderer, style, system, base, base.rendered, new_items, refuse_at)
        if prompt is not None:
            return prompt
    items = as_calls(effective([*(base.context if base is not None else ()), *new_items]))
    reasoning = replay(style.reasoning, items)
    chats = style.dialect.messages(items, None, reasoning.start, ())[1]
    _check_floor(token_floor(style.fmt, [system, *chats] if system else chats), refuse_at)
    tokens, state = await renderer.full(style.fmt, system, chats, source, reasoning.kept)
    return Prompt(tokens, state, (), system)


async def _extend(
    renderer: PromptRenderer,
    style: Style,
    system: Chat | None,
    base: PromptBase,
    rendered: Rendered,
    new_items: Sequence[ContextItem],
    refuse_at: int | None,
) -> Prompt | None:
    """The prompt as the base's rendered state plus its pending items and the new input; None when only a full
    render can make it (other instructions or tools, reasoning a `chain` policy drops, a compaction, a merge the
    template cannot extend)."""
    batch = as_calls([*base.pending, *new_items])
    reasoning = replay(style.reasoning, batch)
    # A `chain` policy forgets the reasoning already rendered once a user message starts a new chain.
    dropped = rendered.reasoning and style.reasoning.replay == "chain" and reasoning.user
    # A compaction made by a create stands for everything before it: the context is read again from it.
    if rendered.system != system or dropped or latest(batch) >= 0:
        return None
    replaced, chats = style.dialect.messages(batch, rendered.last, reasoning.start, base.context)
    kept = rendered.last_start if replaced is not None else rendered.length
    _check_floor(kept + token_floor(style.fmt, chats), refuse_at)
    result = await renderer.extend(style.fmt, rendered, replaced, chats, reasoning.kept)
    if result is None:
        return None
    return Prompt(result[0], result[1], (), system)


async def tokens_of(
    renderer: PromptRenderer, style: Style, system: Chat | None, items: Sequence[ContextItem]
) -> array[int]:
    """The token ids of `system` and `items`, rendered whole (a truncated prompt: nothing to extend)."""
    items = as_calls(items)
    chats = style.dialect.messages(items, None, replay(style.reasoning, items).start, ())[1]
    return await renderer.tokens(style.fmt, ([system] if system else []) + chats)


def _check_floor(floor: int, refuse_at: int | None) -> None:
    if refuse_at is not None and floor >= refuse_at:
        raise TooLong(floor)
