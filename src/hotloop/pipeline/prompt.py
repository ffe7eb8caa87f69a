"""The render stage's window policy around the render door (chat/render.py): the prompt of a turn must fit its
model's context window.

Without `truncation: auto`, a prompt whose length alone shows it cannot fit is refused before it is tokenized
(`TooLong` from the door), and one that does not fit once tokenized is refused after; `truncation: auto` drops the
oldest items until the prompt fits (never the instructions). A create that compacts (`context_management`) is
measured first, not refused: past its threshold it is compacted (pipeline/compaction.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from hotloop.chat.compacted import effective
from hotloop.chat.incremental import PromptRenderer
from hotloop.chat.render import Prompt, PromptBase, TooLong, render, tokens_of
from hotloop.chat.specs import ToolSpec
from hotloop.errors import InvalidParam
from hotloop.models import Model
from hotloop.wire.items import ContextItem
from hotloop.wire.request import CreateRequest


async def render_prompt(
    renderer: PromptRenderer,
    model: Model,
    request: CreateRequest,
    tools: Sequence[ToolSpec],
    base: PromptBase | None,
    new_items: Sequence[ContextItem],
) -> Prompt:
    """The prompt of `new_items` after `base` (a parent's chain, a resent history, a conversation), within the
    window; raises `InvalidParam` (`context_length_exceeded`) for one that cannot fit."""
    # Every declared tool is in the prompt whatever `tool_choice` says (`none`, `allowed_tools`): as with OpenAI and
    # vLLM, the choice limits what may be called, not what the model reads, so a turn that changes it shares the
    # chain's prefix and the engine's prefix cache still hits.
    style, window = model.style, model.context_window
    source = style.source(request.instructions, tools, (request.reasoning or {}).get("effort"))
    refuse_at = window if request.truncation != "auto" and not compacts(request) else None
    try:
        prompt = await render(renderer, style, source, base, new_items, refuse_at)
    except TooLong as exc:
        raise too_long(f"at least {exc.floor}", window) from None
    if len(prompt.tokens) < window or compacts(request):
        return prompt  # a create that compacts is measured first (pipeline/compaction.py, prepare.py)
    if request.truncation != "auto":
        raise too_long(len(prompt.tokens), window)
    items = list(effective([*(base.context if base is not None else ()), *new_items]))
    return await _truncated(renderer, model, prompt, items)


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


async def _truncated(renderer: PromptRenderer, model: Model, prompt: Prompt, items: list[ContextItem]) -> Prompt:
    """Drop the oldest eighth of the items until the prompt fits; a truncated prompt has no state to extend."""
    window, size = model.context_window, len(prompt.tokens)
    while len(items) > 1:
        items = items[max(1, len(items) // 8) :]
        tokens = await tokens_of(renderer, model.style, prompt.system, items)
        size = len(tokens)
        if size < window:
            return Prompt(tokens, None, (), prompt.system)
    raise too_long(size, window)
