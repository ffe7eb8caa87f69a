"""The pre-inference stages of a turn: `start_turn(...)` validates, resolves the previous state (a chain, a
conversation or a resent history), normalizes, renders and scans, and raises a `HotloopError` before anything is
sent (nothing stored, nothing cached); then `turn.events()` (pipeline/turn.py). Every transport reaches it through
admission (pipeline/admission/entry.py), which runs the drain, rate-limit and store checks first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from hotloop.backends.base import GenerationRequest
from hotloop.chat.render import Prompt
from hotloop.chat.specs import ToolSpec
from hotloop.errors import InvalidParam
from hotloop.ids import new_id
from hotloop.models import Model
from hotloop.observability.timings import StageTimings
from hotloop.observability.tracing import ResponseTrace
from hotloop.pipeline import compaction
from hotloop.pipeline.containers.skills import described
from hotloop.pipeline.grammars import check_grammars
from hotloop.pipeline.inject import multi_agent
from hotloop.pipeline.inputs import Inputs, gather, match_resent, remember
from hotloop.pipeline.mcp.approvals import approved_calls
from hotloop.pipeline.mcp.listing import endpoints, offer
from hotloop.pipeline.prepared import DEFAULT_OPTIONS, Prepared, TurnOptions
from hotloop.pipeline.prior import conversation_id_of
from hotloop.pipeline.prompt import render_prompt, too_long
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.session import Session
from hotloop.pipeline.steps.plan import StepPlan
from hotloop.pipeline.tools import ToolChoice, ToolSet, resolve_tool_choice, resolve_tools, runs_code, with_actions
from hotloop.pipeline.turn import Turn
from hotloop.pipeline.validate import check_new_items, check_request
from hotloop.safety.stage import SafetyResult
from hotloop.tools.multi_agent import ROOT_NAME
from hotloop.tools.tool_search import SERVER_KIND, check_loadable, loaded, loads
from hotloop.wire.items import ContextItem
from hotloop.wire.request import CreateRequest
from hotloop.wire.response import Response
from hotloop.wire.tool_items import AdditionalTools

SAFETY_METADATA_KEY = "hotloop_safety"

log = logging.getLogger("hotloop.turn")


async def start_turn(
    service: Service,
    session: Session,
    request: CreateRequest,
    options: TurnOptions = DEFAULT_OPTIONS,
    received_at: float | None = None,
    trace: ResponseTrace | None = None,
) -> Turn:
    """Validate, resolve, render and scan (after admission: admission/entry.py); raises `HotloopError`, nothing
    stored or cached. `received_at` (time.perf_counter()): the request's last byte, where stage timings start;
    `trace`: the response's, when tracing is on."""
    timings = StageTimings(received_at, trace)
    with timings.stage("validate"):
        check_request(request, websocket=options.websocket)
        trigger = compaction.triggered(request)  # taken out of the input: it asks for compaction now
        if trigger and not request.context_management:
            request.context_management = [{"type": "compaction"}]  # the default threshold, the window's policy
        model = service.models.resolve(request.model)
        conversation_id = conversation_id_of(request)
        resent = match_resent(service, session, request, conversation_id)
    with timings.stage("resolve"):
        inputs = await gather(service, session, request, conversation_id, resent)
    prior, fresh = inputs.prior, inputs.fresh
    with timings.stage("validate"):
        tools = prior.tools(request.tools)
        if tools is None:  # resolved once per chain: its grammars compiled then (and kept, tools/grammar.py)
            tools = _resolved(request, service)
            tools = await described(tools, service.skills, service.containers, session.owner)  # a shell's skills
            if tools.grammars:
                await check_grammars(tools.grammars, service.settings.grammar_compile_timeout_s)
        tools = with_actions(tools, multi_agent(request), service.settings.multi_agent_max_depth > 0)
        where = endpoints(tools, service.settings) if tools.mcp else {}
        prior.check(fresh)
        call_ids = check_new_items(fresh, prior.call_ids, service.secret, offset=prior.skip)
        check_loadable(fresh, tools.deferred, tools.specs)
        added(fresh, "input")
        approved = approved_calls(prior.context, fresh)
    steps: StepPlan | None = None
    # A multi-agent response runs its actions (and on WebSocket waits for injected outputs) between generations;
    # a file_search tool, the model's searches of its vector stores; a code_interpreter tool, its code (steps/).
    server_runs = _searches(tools) or multi_agent(request) or tools.file_search is not None or tools.code is not None
    server_runs = server_runs or tools.shell is not None  # a hosted shell, its commands (steps/shell_runs.py)
    if server_runs and not (tools.mcp or approved):  # the server runs steps
        steps = StepPlan({}, [], [], _context(inputs) if model.style.tokens else ())
    if tools.mcp or approved:
        context = _context(inputs)
        with timings.stage("mcp_list"):  # the tools of MCP servers not listed in the chain (listing.py)
            tools, listed = await offer(service.mcp, service.metrics, session.owner, tools, where, context)
        steps = StepPlan(where, listed, approved, context if model.style.tokens else ())
        for endpoint in where.values():  # opened while the turn renders and generates, before its first call
            service.mcp.warm(session.owner, endpoint)
    with timings.stage("validate"):
        choice = resolve_tool_choice(request.tool_choice, tools)
        _dropped(tools, service, session)  # after the choice: one that requires a dropped type refuses the request
    # Rendered before the safety scan: a prompt too long for the window is refused from its length (`token_floor`)
    # or once the tokenizer (off the event loop, GIL released) has counted it, before regexes run over megabytes
    # of it on the GIL.
    with timings.stage("render"):
        prompt = await render_prompt(service.renderer, model, request, tools.specs, prior.prompt_base(), fresh)
        compacting = _compaction(request, model, prompt, inputs, trigger)
    with timings.stage("safety"):
        scanned = await service.safety.scan_async(prior.safety_states(service.safety), fresh, service.tokenize_pool)
        safety = prior.scanned(scanned)
    if not options.measure_only:  # a measured turn leaves nothing for a later request
        remember(
            service,
            session,
            request,
            inputs,
            calls=call_ids,
            safety=safety,
            rendered=prompt.state,
            chat=model.chat,
            tools=tools,
        )
    response = _new_response(request, model, tools.echo, choice, conversation_id, safety)
    prepared = Prepared(
        request=request,
        response=response,
        parent=prior.parent,
        new_items=inputs.items,
        call_ids=call_ids,
        model=model,
        generation=_generation(request, response, choice, prompt, inputs, tools),
        rendered=prompt.state,
        safety=safety,
        tools=tools,
        timings=timings,
        compaction=compacting,
        steps=steps,
    )
    return Turn(service, session, prepared, options)


def _context(inputs: Inputs) -> list[ContextItem]:
    """Every item before the turn's output (read by a turn with MCP servers only)."""
    return [*inputs.prior.context, *inputs.fresh]


def _compaction(
    request: CreateRequest, model: Model, prompt: Prompt, inputs: Inputs, triggered: bool
) -> compaction.Plan | None:
    """The compaction this turn runs before it generates (`context_management`), if its prompt crosses the
    threshold or a `compaction_trigger` asked for it."""
    if not request.context_management:
        return None
    prior = inputs.prior
    size = len(prompt.tokens)
    limit = compaction.crosses(request, model, size, inputs.items, prior.used_tokens)
    if limit is None and triggered:
        limit = compaction.forced(request, model)
    if limit is None:
        if size >= model.context_window:
            raise too_long(size, model.context_window)  # past the window and below the threshold
        return None
    return compaction.plan(limit, [*prior.context, *inputs.fresh], inputs.calls_in_context(), triggered)


def _resolved(request: CreateRequest, service: Service) -> ToolSet:
    """The request's tools, validated: once per chain (or resent history), again only when a request changes them
    (`Prior.tools`). A tool left out by `drop_tool_types` is in `ToolSet.dropped` (`_dropped`)."""
    code = runs_code(request.tools or ())
    return resolve_tools(request.tools, service.settings.drop_tool_types, service.no_code() if code else None)


def _dropped(tools: ToolSet, service: Service, session: Session) -> None:
    """Tools `drop_tool_types` left out: counted every turn; logged once per WebSocket connection, and for HTTP
    once per key and set of types in this process (`Session.first_notice`). A client that always sends them (Codex,
    Cline) would otherwise log the same line on every turn, or on every request over HTTP."""
    if not tools.dropped:
        return
    for kind in tools.dropped:
        service.metrics.tools_dropped.labels(kind).inc()
    kinds = tuple(sorted(set(tools.dropped)))
    if session.first_notice(("drop_tool_types", kinds)):
        log.info("left out tools of types %s (setting drop_tool_types; logged once per connection)", ", ".join(kinds))


def _searches(tools: ToolSet) -> bool:
    """Whether the server runs the model's searches: with nothing deferred too, where a search finds nothing (its
    output says so) but a server-run `tool_search_call` never ends a response unanswered."""
    search = tools.search
    return search is not None and search.kind == SERVER_KIND


def _loaded(tools: ToolSet, inputs: Inputs) -> list[ToolSpec]:
    """The tools that searches (of the deferred tools) and `additional_tools` items in the context loaded. The
    context is looked over without a copy (most turns load nothing)."""
    context, fresh = inputs.prior.context, inputs.fresh
    if not (loads(fresh) or loads(context)):
        return []
    items = [*context, *fresh]
    return [*loaded(items, tools.deferred), *added(items)]


def added(items: Iterable[ContextItem], param: str | None = None) -> list[ToolSpec]:
    """The tools `additional_tools` items make available; `param`: check them (400 naming it)."""
    specs: list[ToolSpec] = []
    for item in items:
        if isinstance(item, AdditionalTools):
            try:
                resolved = resolve_tools(item.tools, drop=())
            except InvalidParam as exc:
                raise InvalidParam(f"additional_tools: {exc.message}", param=param or "input") from None
            if resolved.file_search is not None:  # its stores are the request's: declared in `tools`
                raise InvalidParam(
                    "additional_tools: a file_search tool is declared in the request's tools, not added by an item.",
                    param=param or "input",
                )
            if resolved.code is not None:  # where its code runs is the request's too
                raise InvalidParam(
                    "additional_tools: a code_interpreter tool is declared in the request's tools, not added by an "
                    "item.",
                    param=param or "input",
                )
            if resolved.shell is not None:  # its container is the request's, as the stores of a file_search
                raise InvalidParam(
                    "additional_tools: a shell in a container is declared in the request's tools, not added by an "
                    "item.",
                    param=param or "input",
                )
            specs.extend(resolved.specs)
    return specs


def _generation(
    request: CreateRequest, response: Response, choice: ToolChoice, prompt: Prompt, inputs: Inputs, tools: ToolSet
) -> GenerationRequest:
    parent = inputs.prior.parent
    found = _loaded(tools, inputs)
    offered = [*choice.tools.specs, *found] if choice.mode != "none" else []
    return GenerationRequest(
        prompt_tokens=prompt.tokens,
        # A model behind a chat API gets the whole conversation (it keeps no state), with the instructions.
        items=prompt.items,
        instructions=request.instructions,
        # Loaded tools are callable, not rendered: their definitions are in the search's output (§1.11).
        tools=offered,
        deferred=[spec for spec in tools.deferred if spec not in found],
        tool_choice=choice.mode,
        forced_tool=choice.forced,
        parallel_tool_calls=response.parallel_tool_calls,
        max_output_tokens=request.max_output_tokens,
        temperature=response.temperature,
        top_p=response.top_p,
        presence_penalty=response.presence_penalty,
        frequency_penalty=response.frequency_penalty,
        text_format=response.text.get("format", {"type": "text"}),
        calls_so_far=inputs.calls_in_context(),
        metadata=response.metadata,
        reasoning_effort=(request.reasoning or {}).get("effort"),
        response_id=response.id,
        previous_response_id=parent.response.id if parent is not None else None,
        agent=ROOT_NAME if multi_agent(request) else "",
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


def _new_response(
    request: CreateRequest,
    model: Model,
    tools: list[Any],
    choice: ToolChoice,
    conversation_id: str | None,
    safety: SafetyResult,
) -> Response:
    response = _echo(request, model, tools, choice)
    if conversation_id is not None:
        response.conversation = {"id": conversation_id}
    if safety.verdict != "allow":
        response.metadata[SAFETY_METADATA_KEY] = safety.summary()
    return response


def _echo(request: CreateRequest, model: Model, tools: list[Any], choice: ToolChoice) -> Response:
    """The response as it starts: the request's settings echoed, with their defaults."""
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
        prompt_cache_options=_cache_options(request.prompt_cache_options),
        prompt_cache_retention=request.prompt_cache_retention,
        user=request.user,
    )


def _cache_options(options: dict[str, Any] | None) -> dict[str, Any] | None:
    """The echo of `prompt_cache_options`: its mode and ttl with their defaults (openai-python types both as set)."""
    if options is None:
        return None
    echo: dict[str, Any] = {"mode": options.get("mode") or "implicit", "ttl": options.get("ttl") or "30m"}
    if options.get("comparison_response_id") is not None:
        echo["comparison_response_id"] = options["comparison_response_id"]
    return echo
