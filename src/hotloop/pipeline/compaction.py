"""Compaction inside a create (`context_management: [{"type": "compaction", "compact_threshold": N}]`; OpenAI's
compaction guide, issue 14).

When the turn's rendered prompt has at least N tokens (`start_turn` decides, `plan`), the turn compacts before it
generates (`run`, from `Turn.events` after `response.in_progress`):

1. The model summarizes the context, the new input included (`SUMMARY_INSTRUCTIONS`, at most
   `SUMMARY_MAX_TOKENS`, no tools; the oldest items are left out of this one prompt if it would not fit the window).
2. A `compaction` output item streams first (`output_item.added` / `.done`): sealed, it carries the summary, the
   user messages verbatim (newest first, within about N characters) and the new input with the calls it answers
   (chat/compacted.py).
3. The turn generates on the compacted context: the kept user messages, the summary, the new input. That prompt
   is the chain's rendered state, which its next turn extends (pipeline/prior.py `Chain.prompt_base`), so an engine's
   prefix cache misses once.

Usage counts both generations. Without `compact_threshold` the threshold is `DEFAULT_SHARE` of the model's context
window. An engine behind the chat API (which hotloop does not tokenize for) is measured by the parent's usage plus
the new input's characters / 4.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import msgspec

from hotloop.backends.base import GenerationRequest
from hotloop.chat.compacted import carried, effective, kept_tail, kept_users
from hotloop.chat.incremental import Rendered
from hotloop.chat.specs import ToolSpec
from hotloop.errors import HotloopError
from hotloop.ids import new_id
from hotloop.models import Model
from hotloop.observability.timings import StageTimings
from hotloop.pipeline.generate import Generation, Outcome
from hotloop.pipeline.prompt import render_prompt
from hotloop.pipeline.service import Service
from hotloop.sealing import seal
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import Event
from hotloop.wire.items import Compaction, ContextItem, Message, OutputItem, OutputText
from hotloop.wire.request import CreateRequest
from hotloop.wire.response import ErrorInfo, Response, Usage

SUMMARY_INSTRUCTIONS = (
    "Summarize the conversation so far for your own later use: the goal, what was done, tool results that "
    "matter, decisions and open questions. Be concise and factual."
)
SUMMARY_MAX_TOKENS = 1024
DEFAULT_SHARE = 0.8
_encode = msgspec.json.Encoder().encode


class Plan(msgspec.Struct, frozen=True):
    """A turn that compacts: the context before its new input (as the model reads it) and that input."""

    threshold: int
    history: Sequence[ContextItem]
    new_items: Sequence[ContextItem]
    calls: int  # tool calls in the context it replaces


class Compacted(msgspec.Struct, frozen=True):
    item: Compaction
    prompt: array[int]  # the compacted context's prompt (token models)
    rendered: Rendered | None
    items: list[ContextItem]  # the compacted context (models that take messages)
    usage: Usage  # the summary's generation


class Step(msgspec.Struct, frozen=True):
    """What compacting first leaves a turn: the compaction item's events and the summary's usage, or the failure
    the turn ends with."""

    events: list[Event] = msgspec.field(default_factory=list)
    usage: Usage | None = None
    failure: Outcome | None = None

    def counted(self, outcome: Outcome) -> Outcome:
        """The turn's outcome with the summary's generation counted: it is this response's work too."""
        if self.usage is None:
            return outcome
        return msgspec.structs.replace(outcome, usage=self.usage.plus(outcome.usage))


NO_STEP = Step()  # a turn that does not compact


class CompactionFailed(Exception):
    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(error.message)
        self.error = error


def threshold(request: CreateRequest, model: Model) -> int | None:
    for entry in request.context_management or ():
        value = entry.get("compact_threshold")
        return value if isinstance(value, int) else int(model.context_window * DEFAULT_SHARE)
    return None


def crosses(
    request: CreateRequest, model: Model, prompt_tokens: int, own: Sequence[ContextItem], parent_tokens: int
) -> int | None:
    """The threshold this turn's prompt crosses, if it does; None when it does not compact. `own`: the request's
    own input items; `parent_tokens`: the parent's input plus output tokens (a model that takes messages has no
    prompt here to count). Costs nothing in proportion to the history: it runs every turn."""
    limit = threshold(request, model)
    if limit is None:
        return None
    size = prompt_tokens
    if model.takes_messages:
        size = parent_tokens + sum(len(_encode(item)) for item in own[_new_input(own) :]) // 4
    return limit if size >= limit else None


def plan(limit: int, context: Sequence[ContextItem], calls: int) -> Plan:
    """The compaction of a turn that crosses `limit`. `context`: every item the turn reads, its new input last
    (whether it continues a chain or resends the history)."""
    items = effective(context)
    split = _new_input(items)
    return Plan(threshold=limit, history=items[:split], new_items=items[split:], calls=calls)


def _new_input(items: Sequence[ContextItem]) -> int:
    """Where the turn's new input starts: after the model's last output item (a resent history holds both)."""
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        if isinstance(item, OutputItem) and not (isinstance(item, Message) and item.role != "assistant"):
            return index + 1
    return 0


async def run(
    service: Service,
    model: Model,
    request: CreateRequest,
    tools: Sequence[ToolSpec],
    plan: Plan,
    response_id: str,
    transport: str,
) -> Compacted:
    """Summarize, seal, and render the compacted context; raises `CompactionFailed` (the turn then fails)."""
    summary, usage = await _summarize(service, model, request, plan, f"{response_id}_compaction", transport)
    users = kept_users(plan.history, budget_chars=plan.threshold)
    tail = kept_tail(plan.history, plan.new_items)
    sealed = seal(carried(summary, users, tail, plan.calls), service.secret)
    item = Compaction(encrypted_content=sealed, id=new_id("cmp"))
    try:
        prompt = await render_prompt(service.renderer, model, request, tools, None, [item])
    except HotloopError as exc:  # the compacted context itself does not fit the window
        raise CompactionFailed(ErrorInfo(code=exc.code or "context_length_exceeded", message=str(exc))) from None
    return Compacted(item=item, prompt=prompt.tokens, rendered=prompt.state, items=list(prompt.items), usage=usage)


async def _summarize(
    service: Service, model: Model, request: CreateRequest, plan: Plan, generation_id: str, transport: str
) -> tuple[str, Usage]:
    instructions = (
        SUMMARY_INSTRUCTIONS if not request.instructions else f"{request.instructions}\n\n{SUMMARY_INSTRUCTIONS}"
    )
    summary_request = msgspec.structs.replace(request, instructions=instructions, truncation="auto", tools=None)
    context = [*plan.history, *plan.new_items]
    generation = GenerationRequest(
        prompt_tokens=array("i"),
        tool_choice="none",
        max_output_tokens=SUMMARY_MAX_TOKENS,
        metadata=dict(request.metadata or {}),
        response_id=generation_id,
    )
    try:
        prompt = await render_prompt(service.renderer, model, summary_request, (), None, context)
    except HotloopError as exc:
        raise CompactionFailed(ErrorInfo(code="server_error", message=f"Could not compact: {exc}")) from None
    generation.prompt_tokens, generation.items, generation.instructions = prompt.tokens, prompt.items, instructions
    return await _generate(service, model, generation, transport)


async def _generate(service: Service, model: Model, generation: GenerationRequest, transport: str) -> tuple[str, Usage]:
    """The summary's generation: the same stall-bounded loop as the answer's (generate.py), its events dropped
    and its text read back from a scratch response."""
    scratch = Response(id=generation.response_id or "compaction", created_at=0, model=model.id)
    run = Generation(
        model,
        generation,
        ResponseBuilder(scratch),
        StageTimings(),
        service.metrics,
        service.settings.backend_timeout_s,
        transport,
    )
    async for _ in run.events(None):
        pass
    outcome = run.result()
    if outcome.status == "failed" or outcome.usage is None:
        message = outcome.error.message if outcome.error is not None else "the model ended early."
        raise CompactionFailed(ErrorInfo(code="server_error", message=f"Could not compact: {message}"))
    text = "".join(
        part.text
        for item in scratch.output
        if isinstance(item, Message)
        for part in item.content
        if isinstance(part, OutputText)
    )
    return text.strip(), outcome.usage
