"""What came before a request's fresh input (protocol.md §3.8, §4; pipeline/resend.py): one interface, `Prior`,
with one implementation per shape, so that no stage asks which shape it has.

- `Chain`: the parent chain `previous_response_id` continues (its context, call ids, safety states, rendered
  tokens and tools, from the connection's cache or the store);
- `Conversation`: a conversation's items, read whole every turn (it can be edited between turns);
- `Resent`: an earlier request whose input this one's starts with, byte for byte (pipeline/resend.py): those
  items are the request's own, but already normalized, validated, scanned and rendered;
- `NOTHING`: a request that starts from nothing.

Every stage works on the request's fresh input (what no earlier turn saw, `Inputs.fresh`) and takes the rest from
its `Prior`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from hotloop.chat.compacted import count_calls
from hotloop.chat.render import PromptBase
from hotloop.errors import InvalidParam, NotFound
from hotloop.pipeline.resend import Resent
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.context import ChainState, call_ids_of
from hotloop.pipeline.state.session import Session
from hotloop.pipeline.tools import ToolSet
from hotloop.safety import SafetyStage, SafetyStates
from hotloop.safety.stage import SafetyResult
from hotloop.tools.multi_agent import foreign
from hotloop.wire.items import ContextItem
from hotloop.wire.request import CreateRequest


class Prior(Protocol):
    """What came before the fresh input of a request."""

    parent: ChainState | None  # the chain the response continues (finishing caches after it, or evicts it)
    skip: int  # how many of the request's own input items came before (a resent history's)
    context: Sequence[ContextItem]  # every item the model read before the fresh input
    call_ids: frozenset[str]  # the call ids a fresh tool output may answer
    call_count: int  # the tool calls in `context` (the count `max_tool_calls` limits)
    used_tokens: int  # the parent's input plus output tokens (0 without a parent)

    def tools(self, declared: list[dict[str, Any]] | None) -> ToolSet | None:
        """The tools as validated before, when the request declares the same ones again."""

    def check(self, fresh: Sequence[ContextItem]) -> None:
        """Refuse fresh items that clash with what came before (raises `InvalidParam`)."""

    def prompt_base(self) -> PromptBase | None:
        """What the prompt continues (chat/render.py)."""

    def safety_states(self, safety: SafetyStage) -> SafetyStates | None:
        """The classifiers' states after what came before (None: a new chain)."""

    def scanned(self, fresh: SafetyResult) -> SafetyResult:
        """The request's safety result, from the fresh items' one."""


class Nothing:
    """A request that starts from nothing; the others differ from it where they say."""

    __slots__ = ("call_count", "call_ids", "context", "parent", "skip", "used_tokens")

    def __init__(self) -> None:
        self.parent: ChainState | None = None
        self.skip = 0
        self.context: Sequence[ContextItem] = ()
        self.call_ids: frozenset[str] = frozenset()
        self.call_count = 0
        self.used_tokens = 0

    def tools(self, declared: list[dict[str, Any]] | None) -> ToolSet | None:
        return None

    def check(self, fresh: Sequence[ContextItem]) -> None:
        return None

    def prompt_base(self) -> PromptBase | None:
        return None

    def safety_states(self, safety: SafetyStage) -> SafetyStates | None:
        return None

    def scanned(self, fresh: SafetyResult) -> SafetyResult:
        return fresh


NOTHING = Nothing()


class Chain(Nothing):
    """The parent chain `previous_response_id` continues."""

    __slots__ = ("chain",)

    def __init__(self, chain: ChainState) -> None:
        super().__init__()
        self.chain = chain
        self.parent = chain
        self.context = chain.context
        self.call_ids = chain.call_ids
        self.call_count = chain.calls_in_context
        usage = chain.response.usage
        self.used_tokens = usage.total_tokens if usage is not None else 0

    def tools(self, declared: list[dict[str, Any]] | None) -> ToolSet | None:
        """Validated once per chain: again only when a request changes them."""
        chain = self.chain
        return chain.tools if chain.tools is not None and chain.request.tools == declared else None

    def prompt_base(self) -> PromptBase | None:
        chain = self.chain
        # The parent's rendered state may hold the first of its output items: a compaction (pipeline/compaction.py:
        # the compacted context, the compaction included), the output before its last in-server step
        # (pipeline/steps/loop.py). The rest of its output and the new input extend it; a multi-agent response's
        # subagents' items are not the root's (tools/multi_agent.py).
        pending: Sequence[ContextItem] = [
            item for item in chain.response.output[chain.rendered_output :] if not foreign(item)
        ]
        return PromptBase(chain.context, chain.rendered, chain.model.chat, pending)

    def safety_states(self, safety: SafetyStage) -> SafetyStates | None:
        """The parent's states; a chain loaded from the store has none in memory, so they are rebuilt once from
        its context (the same states as turn-by-turn scanning: a secret seen before is not reported again)."""
        chain = self.chain
        if chain.safety_states is not None or not safety.enabled:
            return chain.safety_states
        return safety.scan(None, chain.context).states


class Conversation(Nothing):
    """A conversation's items, before the input (read whole every turn: it can be edited between turns)."""

    __slots__ = ()

    def __init__(self, history: list[ContextItem]) -> None:
        super().__init__()
        self.context = history
        self.call_ids = call_ids_of(history)
        self.call_count = count_calls(history)

    def check(self, fresh: Sequence[ContextItem]) -> None:
        """An input item may not reuse an id already in the conversation: checked before generating, since the
        items are appended only once the response has finished."""
        ids = {item_id for item in self.context if (item_id := getattr(item, "id", None)) is not None}
        for index, item in enumerate(fresh):
            if getattr(item, "id", None) in ids:
                raise InvalidParam(
                    f"An item with id '{item.id}' is already in the conversation.",
                    param=f"input[{index}].id",
                    code="duplicate_item",
                )

    def prompt_base(self) -> PromptBase | None:
        return PromptBase(self.context, None, None)


class ResentHistory(Nothing):
    """The earlier request whose input this one's starts with: its items are this request's first `skip`."""

    __slots__ = ("resent",)

    def __init__(self, resent: Resent, items: Sequence[ContextItem]) -> None:
        super().__init__()
        self.resent = resent
        self.skip = len(resent.raw)
        self.context = items[: self.skip]
        self.call_ids = resent.calls
        self.call_count = resent.call_count

    def tools(self, declared: list[dict[str, Any]] | None) -> ToolSet | None:
        return self.resent.resolved_tools if self.resent.tools == declared else None

    def prompt_base(self) -> PromptBase | None:
        return PromptBase(self.context, self.resent.rendered, self.resent.chat)

    def safety_states(self, safety: SafetyStage) -> SafetyStates | None:
        return self.resent.safety.states

    def scanned(self, fresh: SafetyResult) -> SafetyResult:
        return self.resent.safety.then(fresh, self.skip)


def conversation_id_of(request: CreateRequest) -> str | None:
    """`conversation` as a string id or `{"id": …}`; raises `InvalidParam` for anything else."""
    value = request.conversation
    if value is None:
        return None
    if isinstance(value, dict):
        value = value.get("id")
    if not isinstance(value, str) or not value:
        raise InvalidParam("conversation must be a conversation id or an object with an 'id'.", param="conversation")
    return value


async def load_conversation(service: Service, session: Session, conversation_id: str) -> Conversation:
    """Every item of the conversation, oldest first, in one store round trip; 404 names `conversation`."""
    items = await service.store.load_conversation(session.owner, conversation_id)
    if items is None:
        raise NotFound(
            f"Conversation with id '{conversation_id}' not found.", param="conversation", code="conversation_not_found"
        )
    return Conversation(items)
