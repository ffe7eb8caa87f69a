"""The pre-inference stages of a turn, the single entry point both transports call: `start_turn(...)` validates,
resolves the previous state (a chain or a conversation), normalizes, scans and renders, and raises a
`HotloopError` before anything is sent (nothing stored, nothing cached); then `turn.events()` (pipeline/turn.py).
"""

from __future__ import annotations

import time
from typing import Any, cast

import msgspec

from hotloop.backends.base import GenerationRequest
from hotloop.errors import HotloopError
from hotloop.ids import new_id
from hotloop.models import Model
from hotloop.observability.timings import StageTimings
from hotloop.pipeline import conversations
from hotloop.pipeline.context import ChainState, call_ids_of
from hotloop.pipeline.prompt import PromptBase, base_of, render_prompt
from hotloop.pipeline.resend import MIN_ITEMS, Resent, input_items, raw_bytes_of
from hotloop.pipeline.resolve import count_calls, expand_references, resolve_parent
from hotloop.pipeline.service import Service
from hotloop.pipeline.session import Session
from hotloop.pipeline.tools import ToolChoice, resolve_tool_choice, resolve_tools
from hotloop.pipeline.turn import DEFAULT_OPTIONS, Turn, TurnOptions
from hotloop.pipeline.validate import check_new_items, check_request
from hotloop.safety import SafetyStates
from hotloop.safety.stage import SafetyResult
from hotloop.wire.items import ContextItem, ItemReference
from hotloop.wire.request import CreateRequest
from hotloop.wire.response import Response

SAFETY_METADATA_KEY = "hotloop_safety"


async def start_turn(
    service: Service,
    session: Session,
    request: CreateRequest,
    options: TurnOptions = DEFAULT_OPTIONS,
    received_at: float | None = None,
) -> Turn:
    """Validate, resolve, normalize and render; raises `HotloopError` (nothing stored, nothing cached).

    `received_at` (time.perf_counter()) is when the request's last byte arrived; stage timings start there.
    """
    timings = StageTimings(received_at)
    try:
        return await _prepare(service, session, request, options, timings)
    except HotloopError:
        if request.previous_response_id:
            session.evict(options.lane, request.previous_response_id)
        raise


async def _prepare(
    service: Service, session: Session, request: CreateRequest, options: TurnOptions, timings: StageTimings
) -> Turn:
    with timings.stage("validate"):
        check_request(request, websocket=options.websocket)
        model = service.models.resolve(request.model)
        conversation_id = conversations.conversation_id_of(request)
        resent = _resent(service, session, request, conversation_id)
        skip = len(resent.raw) if resent is not None else 0
        raw_items, generated = input_items(request, resent)
    with timings.stage("resolve"):
        parent = await resolve_parent(service, session, request.previous_response_id)
        # A conversation's items come first, read whole every turn (it can be edited between turns).
        history = await conversations.context_of(service, session, conversation_id) if conversation_id else []
        new_items = await expand_references(service, session, raw_items, parent)
    with timings.stage("validate"):
        if parent is not None and parent.tools is not None and parent.request.tools == request.tools:
            tools = parent.tools  # validated once per chain, again only when a request changes them
        elif resent is not None and resent.tools == request.tools:
            tools = resent.resolved_tools
        else:
            tools = resolve_tools(request.tools)
        choice = resolve_tool_choice(request.tool_choice, tools)
        known = parent.call_ids if parent is not None else resent.calls if resent else call_ids_of(history)
        if history:
            conversations.check_new_ids(history, new_items)
        call_ids = check_new_items(new_items[skip:], known, service.secret)
    # Rendered before the safety scan: a prompt too long for the window is refused from its length (`token_floor`)
    # or once the tokenizer (off the event loop, GIL released) has counted it, before regexes run over megabytes
    # of it on the GIL.
    with timings.stage("render"):
        prompted = [*history, *new_items] if history else new_items
        base = base_of(parent) if resent is None else PromptBase(new_items[:skip], resent.rendered, resent.chat)
        prompt, rendered = await render_prompt(service.renderer, model, request, tools.specs, base, prompted[skip:])
    with timings.stage("safety"):
        safety = await _scan(service, parent, resent, new_items)
    if _rememberable(request, parent, conversation_id, raw_items[skip:]):
        raw = cast(list[msgspec.Raw], request.input)
        entry = Resent(
            raw=raw,
            items=cast(list[ContextItem], raw_items),
            generated=generated,
            calls=call_ids,
            safety=safety,
            rendered=rendered,
            chat=model.chat,
            tools=request.tools,
            resolved_tools=tools,
            raw_bytes=raw_bytes_of(raw, resent),
        )
        service.resent.remember(session.owner, entry)
    calls_so_far = (parent.calls_in_context if parent is not None else 0) + count_calls(prompted)
    response = _new_response(request, model, tools.echo, choice)
    if conversation_id is not None:
        response.conversation = {"id": conversation_id}
    if safety.verdict != "allow":
        response.metadata[SAFETY_METADATA_KEY] = safety.summary()
    generation = GenerationRequest(
        prompt_tokens=prompt,
        tools=list(choice.tools.specs) if choice.mode != "none" else [],
        tool_choice=choice.mode,
        forced_tool=choice.forced,
        parallel_tool_calls=response.parallel_tool_calls,
        max_output_tokens=request.max_output_tokens,
        temperature=response.temperature,
        top_p=response.top_p,
        presence_penalty=response.presence_penalty,
        frequency_penalty=response.frequency_penalty,
        text_format=response.text.get("format", {"type": "text"}),
        calls_so_far=calls_so_far,
        metadata=response.metadata,
        response_id=response.id,
        previous_response_id=parent.response.id if parent is not None else None,
    )
    if model.takes_messages:  # the engine gets the whole conversation (a chat API keeps no state)
        generation.items = [*(parent.context if parent is not None else ()), *prompted]
        generation.instructions = request.instructions
    return Turn(
        service,
        session,
        request,
        response,
        parent=parent,
        new_items=new_items,
        call_ids=call_ids,
        model=model,
        generation=generation,
        rendered=rendered,
        safety=safety,
        tools=tools,
        options=options,
        timings=timings,
    )


def _text_config(text: dict[str, Any] | None) -> dict[str, Any]:
    config = {"format": {"type": "text"}, "verbosity": "medium"}
    for key, value in (text or {}).items():
        if value is not None:
            config[key] = value
    fmt = config["format"]
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        # The echoed format always has `description` and `strict` (OR `JsonSchemaResponseFormat` requires them).
        config["format"] = {**fmt, "description": fmt.get("description"), "strict": fmt.get("strict") is True}
    return config


def _resent(service: Service, session: Session, request: CreateRequest, conversation: str | None) -> Resent | None:
    """The earlier request whose input this one's starts with (pipeline/resend.py): only for a request that
    neither continues a chain nor a conversation."""
    if request.previous_response_id or conversation or not isinstance(request.input, list):
        return None
    return service.resent.match(session.owner, request.input)


def _rememberable(
    request: CreateRequest, parent: ChainState | None, conversation: str | None, fresh: list[Any]
) -> bool:
    """Whether a later request may start from this one's input: neither a continuation nor a conversation, nor
    an item copied from the store (`fresh`: the items not taken from an earlier request)."""
    if parent is not None or conversation or not isinstance(request.input, list) or len(request.input) < MIN_ITEMS:
        return False
    return not any(isinstance(item, ItemReference) for item in fresh)


async def _scan(
    service: Service, parent: ChainState | None, resent: Resent | None, new_items: list[ContextItem]
) -> SafetyResult:
    """The safety scan of the new items; of a resent history, only what follows the earlier request's input."""
    if resent is None:
        return await service.safety.scan_async(_safety_states(service, parent), new_items, service.tokenize_pool)
    skip = len(resent.raw)
    later = await service.safety.scan_async(resent.safety.states, new_items[skip:], service.tokenize_pool)
    return resent.safety.then(later, skip)


def _safety_states(service: Service, parent: ChainState | None) -> SafetyStates | None:
    """The parent's classifier states; a chain loaded from the store has none in memory, so they are rebuilt once
    from its context (the same states as turn-by-turn scanning: a secret seen before is not reported again)."""
    if parent is None or parent.safety_states is not None or not service.safety.enabled:
        return parent.safety_states if parent is not None else None
    return service.safety.scan(None, parent.context).states


def _new_response(request: CreateRequest, model: Model, tools: list[Any], choice: ToolChoice) -> Response:
    reasoning = request.reasoning or {}
    tier = request.service_tier
    return Response(
        id=new_id("resp"),
        created_at=int(time.time()),
        model=model.id,
        previous_response_id=request.previous_response_id,
        instructions=request.instructions,
        tools=tools,
        tool_choice=choice.echo,
        parallel_tool_calls=request.parallel_tool_calls is not False,
        truncation=request.truncation or "disabled",
        text=_text_config(request.text),
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        top_logprobs=request.top_logprobs or 0,
        reasoning={"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        max_output_tokens=request.max_output_tokens,
        max_tool_calls=request.max_tool_calls,
        store=request.store is not False,
        background=request.background is True,
        service_tier="default" if tier in (None, "auto") else tier,
        metadata=dict(request.metadata or {}),
        safety_identifier=request.safety_identifier,
        prompt_cache_key=request.prompt_cache_key,
        user=request.user,
    )
