"""Compaction inside a create (`context_management: [{"type": "compaction", "compact_threshold": N}]`; OpenAI's
compaction guide, issue 14).

When the turn's rendered prompt has at least N tokens (`start_turn` decides, `plan`), the turn compacts before it
generates (`run`, from `Turn.events` after `response.in_progress`):

1. The model summarizes the context, the new input included (`SUMMARY_INSTRUCTIONS`, at most
   `SUMMARY_MAX_TOKENS` and `SUMMARY_SHARE` of N, no tools; the oldest items are left out of this one prompt if it
   would not fit the window).
2. A `compaction` output item streams first (`output_item.added` / `.done`): sealed, it carries the summary, the
   user messages verbatim (newest first, within about N characters) and the new input with the calls it answers
   (chat/compacted.py), less the largest of these while the compacted context is not below `COMPACTED_SHARE` of
   N (the summary covers them: they were in its prompt), so the next turn does not compact again.
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
from hotloop.tools.registry import pair
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import Event
from hotloop.wire.items import (
    Compaction,
    ContextItem,
    Message,
    OutputItem,
    OutputText,
)
from hotloop.wire.request import CreateRequest
from hotloop.wire.response import ErrorInfo, Response, Usage

SUMMARY_INSTRUCTIONS = (
    "Summarize the conversation so far for your own later use: the goal, what was done, tool results that "
    "matter, decisions and open questions. Be concise and factual."
)
SUMMARY_MAX_TOKENS = 1024
DEFAULT_SHARE = 0.8
# The compacted context's bound, of the threshold: below it, the context has room to grow before it compacts again.
COMPACTED_SHARE = 0.5
SUMMARY_SHARE = 0.25  # the summary's bound, of the threshold (a small threshold's compacted context fits below it)
_encode = msgspec.json.Encoder().encode


class Plan(msgspec.Struct, frozen=True):
    """A turn that compacts: the context before its new input (as the model reads it) and that input."""

    threshold: int
    history: Sequence[ContextItem]
    new_items: Sequence[ContextItem]
    calls: int  # tool calls in the context it replaces
    item_id: str = msgspec.field(default_factory=lambda: new_id("cmp"))  # the compaction item's
    triggered: bool = False  # a `compaction_trigger` asked for it: `response.compaction.compacting` goes first


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


# A `compaction_trigger` item holds its type and perhaps an id: a last input item longer than this is not one, and
# is left for the normalize stage without being read twice.
_TRIGGER_MAX_BYTES = 512


def triggered(request: CreateRequest) -> bool:
    """Whether the create ends with a `compaction_trigger` (protocol.md §1.12; Codex's `remote_compaction_v2`): it
    asks for compaction now, whatever the prompt's size, and is taken out of `request.input` (an instruction, not
    context: neither rendered nor stored). One anywhere else is refused by the normalize stage, naming it."""
    items = request.input
    if not isinstance(items, list) or not items:
        return False
    view = memoryview(items[-1])
    raw = bytes(view) if len(view) <= _TRIGGER_MAX_BYTES else b""
    if b"compaction_trigger" not in raw:
        return False
    try:
        decoded = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return False  # the normalize stage reports it
    if not isinstance(decoded, dict) or decoded.get("type") != "compaction_trigger":
        return False
    request.input = items[:-1]
    return True


def forced(request: CreateRequest, model: Model) -> int:
    """The threshold a triggered compaction is planned with: the request's, or the default share of the window."""
    return threshold(request, model) or int(model.context_window * DEFAULT_SHARE)


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
        size = parent_tokens + _estimated_tokens(own[_new_input(own) :])
    return limit if size >= limit else None


def _estimated_tokens(items: Sequence[ContextItem]) -> int:
    """The tokens of items an engine behind a chat API will render (hotloop does not tokenize for it): their
    JSON's characters / 4."""
    return sum(len(_encode(item)) for item in items) // 4


def plan(limit: int, context: Sequence[ContextItem], calls: int, triggered: bool = False) -> Plan:
    """The compaction of a turn that crosses `limit` (or was `triggered`). `context`: every item the turn reads,
    its new input last (whether it continues a chain or resends the history)."""
    items = effective(context)
    split = _new_input(items)
    return Plan(threshold=limit, history=items[:split], new_items=items[split:], calls=calls, triggered=triggered)


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
    """Summarize, seal, and render the compacted context; raises `CompactionFailed` (the turn then fails).

    The compacted context lands below `COMPACTED_SHARE` of the threshold in this one step, or the next turn would
    compact again: while it does not, the largest of what it keeps verbatim (`_Verbatim.shed`) is left to the
    summary, which was made from all of it; at the end the summary alone."""
    summary, usage = await _summarize(service, model, request, plan, f"{response_id}_compaction", transport)
    kept = _Verbatim(kept_users(plan.history, budget_chars=plan.threshold), kept_tail(plan.history, plan.new_items))
    bound = int(plan.threshold * COMPACTED_SHARE)
    item_id = plan.item_id
    while True:
        users, tail = kept.items()
        item = Compaction(encrypted_content=seal(carried(summary, users, tail, plan.calls), service.secret), id=item_id)
        try:
            prompt = await render_prompt(service.renderer, model, request, tools, None, [item])
        except HotloopError as exc:  # past the window
            if not kept.pieces:  # the summary alone does not fit
                error = ErrorInfo(code=exc.code or "context_length_exceeded", message=str(exc))
                raise CompactionFailed(error) from None
            kept.shed(model.context_window - bound)
            continue
        items = list(prompt.items)
        compacted = Compacted(item=item, prompt=prompt.tokens, rendered=prompt.state, items=items, usage=usage)
        # A model behind a chat API is measured as `crosses` measures a turn's new input.
        size = _estimated_tokens(items) if model.takes_messages else len(prompt.tokens)
        if size < bound or not kept.pieces:
            return compacted
        kept.shed(size - bound)


class _Verbatim:
    """What a compaction keeps verbatim (its user messages, then its tail), in pieces it may leave to the summary:
    a user message, a call with the outputs that answer it, any other item of the tail."""

    def __init__(self, users: Sequence[ContextItem], tail: Sequence[ContextItem]) -> None:
        self.users, self.tail = list(users), list(tail)
        every = [*self.users, *self.tail]
        groups: dict[str | int, list[int]] = {}
        for index, item in enumerate(every):
            key: str | int = index
            paired = pair(item) if index >= len(self.users) else None
            if paired is not None:
                key = f"call:{paired[1]}"
            groups.setdefault(key, []).append(index)
        # (the indices of a piece's items in `every`, its size in characters)
        self.pieces = [(group, sum(len(_encode(every[n])) for n in group)) for group in groups.values()]

    def items(self) -> tuple[list[ContextItem], list[ContextItem]]:
        """The user messages and the tail still kept, in their order."""
        left = {n for group, _ in self.pieces for n in group}
        users = [item for n, item in enumerate(self.users) if n in left]
        tail = [item for n, item in enumerate(self.tail, len(self.users)) if n in left]
        return users, tail

    def shed(self, excess: int) -> None:
        """Leave the largest pieces to the summary: at least one, and of `excess` characters or more together (a
        token is about a character or more, so fewer would seldom do; the caller measures again)."""
        order = sorted(range(len(self.pieces)), key=lambda n: self.pieces[n][1], reverse=True)
        dropped: set[int] = set()
        chars = 0
        for n in order:
            dropped.add(n)
            chars += self.pieces[n][1]
            if chars >= excess:
                break
        self.pieces = [piece for n, piece in enumerate(self.pieces) if n not in dropped]


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
        max_output_tokens=min(SUMMARY_MAX_TOKENS, int(plan.threshold * SUMMARY_SHARE)),
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
    builder = ResponseBuilder(scratch)
    run = Generation(
        model,
        generation,
        builder,
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
    builder.close(outcome.status, outcome.usage)  # the open message joins the scratch output
    text = "".join(
        part.text
        for item in scratch.output
        if isinstance(item, Message)
        for part in item.content
        if isinstance(part, OutputText)
    )
    return text.strip(), outcome.usage
