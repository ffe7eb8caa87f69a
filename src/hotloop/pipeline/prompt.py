"""The render stage: the model input of a turn as token ids, from the chain's rendered state when it has one.

A continuation whose system message (instructions + offered tools) and chat format match its parent's renders
only the parent's output and the new input; anything else renders the whole context from the token cache.
`truncation: auto` drops the oldest items until the prompt fits (never the instructions). Without it, a prompt whose
length alone shows it cannot fit is refused before it is tokenized (`token_floor`).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import NamedTuple

from hotloop.chat import harmony as harmony_chat
from hotloop.chat.compacted import carries, effective, latest
from hotloop.chat.format import Chat, ChatFormat
from hotloop.chat.incremental import PromptRenderer, Rendered, token_floor
from hotloop.chat.messages import item_messages, system_message
from hotloop.chat.reasoning import ReasoningPrompt, kept_any, last_user, replay_from
from hotloop.chat.specs import ToolSpec
from hotloop.errors import InvalidParam
from hotloop.models import Model
from hotloop.pipeline.state.context import ChainState
from hotloop.wire.items import ContextItem
from hotloop.wire.request import CreateRequest


class PromptBase(NamedTuple):
    """What a prompt continues: the items before the new input, and how far they are already rendered."""

    context: Sequence[ContextItem]  # every item before the new input
    rendered: Rendered | None  # token ids of context minus `pending`
    chat: ChatFormat | None  # the format `rendered` was rendered with
    pending: Sequence[ContextItem] = ()  # the last items of context, not in `rendered` (a parent's output)


def base_of(parent: ChainState | None) -> PromptBase | None:
    if parent is None:
        return None
    pending: Sequence[ContextItem] = parent.response.output
    if parent.rendered is not None and pending and carries(pending[0]) is not None:
        # The parent compacted (pipeline/compaction.py): its rendered state is the compacted context, the
        # compaction included; its answer and the new input extend it.
        pending = pending[1:]
    return PromptBase(parent.context, parent.rendered, parent.model.chat, pending)


async def render_prompt(
    renderer: PromptRenderer,
    model: Model,
    request: CreateRequest,
    tools: Sequence[ToolSpec],
    base: PromptBase | None,
    new_items: list[ContextItem],
) -> tuple[array[int], Rendered | None]:
    """The prompt's token ids and the rendered state a continuation of this turn can extend.

    `base`: a parent's chain, or an earlier request's input that this one resends (pipeline/resend.py).
    A model whose backend takes messages (an upstream engine) gets no tokens: its engine renders and tokenizes.
    """
    if model.takes_messages:
        return array("i"), None
    # Every declared tool is in the prompt whatever `tool_choice` says (`none`, `allowed_tools`): as with OpenAI and
    # vLLM, the choice limits what may be called, not what the model reads, so a turn that changes it shares the
    # chain's prefix and the engine's prefix cache still hits.
    harmony = model.reasoning.form == "harmony"  # gpt-oss: the effort is in its system message
    effort = (request.reasoning or {}).get("effort") if harmony else None
    source = (request.instructions, tuple(tools), effort)
    reusable = base.rendered if base is not None else None
    # The tool list is rendered once per chain: again only when instructions or offered tools change.
    system = reusable.system if reusable is not None and reusable.source == source else _system(model, source)
    fmt = model.chat
    prompt: array[int] | None = None
    state: Rendered | None = None
    if base is not None and base.rendered is not None and base.chat is fmt:
        rendered = base.rendered
        batch = [*base.pending, *new_items]
        think_from = _think_from(model.reasoning, batch)
        # A `chain` policy forgets the reasoning already rendered once a user message starts a new chain.
        dropped = rendered.reasoning and model.reasoning.replay == "chain" and last_user(batch) >= 0
        # A compaction made by a create stands for everything before it: the context is read again from it.
        if rendered.system == system and not dropped and latest(batch) < 0:
            replaced, messages = _messages(model, batch, rendered.last, think_from, base.context)
            kept = rendered.last_start if replaced is not None else rendered.length
            _check_floor(model, request, kept + token_floor(fmt, messages))
            result = await renderer.extend(fmt, rendered, replaced, messages)
            if result is not None:
                prompt, state = result
                state.reasoning = rendered.reasoning or _rendered_any(batch, think_from)
    if prompt is None:
        items = effective([*(base.context if base is not None else ()), *new_items])
        think_from = _think_from(model.reasoning, items)
        messages = _messages(model, items, None, think_from)[1]
        _check_floor(model, request, token_floor(fmt, [system, *messages] if system else messages))
        prompt, state = await renderer.full(fmt, system, messages, source)
        if state is not None:
            state.reasoning = _rendered_any(items, think_from)
    if len(prompt) < model.context_window or compacts(request):
        return prompt, state  # a create that compacts is measured first (pipeline/compaction.py, prepare.py)
    items = list(effective([*(base.context if base else ()), *new_items]))
    return await _truncated(renderer, model, request, system, items, len(prompt)), None


def _system(model: Model, source: tuple[str | None, tuple[ToolSpec, ...], str | None]) -> Chat | None:
    if model.reasoning.form == "harmony":
        return harmony_chat.system_message(*source)
    return system_message(source[0], source[1])


def _messages(
    model: Model,
    items: Sequence[ContextItem],
    after: Chat | None,
    think_from: int | None,
    history: Sequence[ContextItem] = (),
) -> tuple[Chat | None, list[Chat]]:
    """The template messages of `items` in the model's format; `history`: the items before them."""
    if model.reasoning.form == "harmony":
        return harmony_chat.item_messages(items, after, think_from, history)
    return item_messages(items, after, think_from)


def _think_from(reasoning: ReasoningPrompt, items: Sequence[ContextItem]) -> int | None:
    """From which of `items` reasoning is rendered back (None: the model's prompts carry none)."""
    return None if reasoning.form == "none" else replay_from(reasoning.replay, items)


def _rendered_any(items: Sequence[ContextItem], think_from: int | None) -> bool:
    return think_from is not None and kept_any(items, think_from)


def _check_floor(model: Model, request: CreateRequest, floor: int) -> None:
    """Refuse a prompt that cannot fit from its length alone, before megabytes of it are tokenized."""
    if floor >= model.context_window and request.truncation != "auto" and not compacts(request):
        raise too_long(f"at least {floor}", model.context_window)


def compacts(request: CreateRequest) -> bool:
    """A create that may compact its context (`context_management`) and does not truncate it: a prompt past the
    window is compacted, not refused, when it crosses the threshold."""
    return bool(request.context_management) and request.truncation != "auto"


def too_long(size: int | str, window: int) -> InvalidParam:
    return InvalidParam(
        f"The input is {size} tokens; this model's context window is {window}.",
        param="input",
        code="context_length_exceeded",
    )


async def _truncated(
    renderer: PromptRenderer,
    model: Model,
    request: CreateRequest,
    system: Chat | None,
    items: list[ContextItem],
    size: int,
) -> array[int]:
    window = model.context_window
    while True:
        if request.truncation != "auto" or len(items) <= 1:
            raise too_long(size, window)
        items = items[max(1, len(items) // 8) :]
        messages = _messages(model, items, None, _think_from(model.reasoning, items))[1]
        prompt = await renderer.tokens(model.chat, ([system] if system else []) + messages)
        size = len(prompt)
        if size < window:
            return prompt
