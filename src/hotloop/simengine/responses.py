"""A stateless POST /v1/responses: the whole conversation in `input`, nothing stored, no `previous_response_id`.

The body is read and checked with hotloop's own wire types and stages (decode, validate, normalize, tools), the
prompt rendered as hotloop renders it for SmolLM2, and the events built by hotloop's `ResponseBuilder`: the same
shapes as hotloop's, from a separate engine process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from hotloop.backends.base import Delta, Finished
from hotloop.backends.sim.backend import SimFault
from hotloop.chat.hosted import as_calls
from hotloop.chat.messages import chat_messages
from hotloop.errors import HotloopError, InvalidParam
from hotloop.ids import new_id
from hotloop.pipeline.generate import feed_delta
from hotloop.pipeline.normalize import normalize_input
from hotloop.pipeline.resolve import count_calls
from hotloop.pipeline.tools import resolve_tool_choice, resolve_tools
from hotloop.pipeline.validate import check_request
from hotloop.simengine.engine import Engine
from hotloop.wire.builder import ResponseBuilder, error_body
from hotloop.wire.events import Event
from hotloop.wire.items import ContextItem, ItemReference
from hotloop.wire.request import CreateRequest, decode_create
from hotloop.wire.response import ErrorInfo, Usage, encode
from hotloop.wire.response import Response as WireResponse


def _error(status: int, payload: dict[str, str | None]) -> JSONResponse:
    return JSONResponse({"error": payload}, status_code=status)


async def create_response(engine: Engine, request: Request) -> Response:
    try:
        create = decode_create(await request.body())
        check_request(create, websocket=False)
        items = _items(create)
        tools = resolve_tools(create.tools)
        choice = resolve_tool_choice(create.tool_choice, tools)
    except HotloopError as exc:
        return _error(exc.status, exc.payload())
    specs = list(choice.tools.specs) if choice.mode != "none" else []
    tokens = await asyncio.to_thread(engine.chat.tokens, chat_messages(create.instructions, specs, as_calls(items)))
    response = WireResponse(
        id=new_id("resp"),
        created_at=int(time.time()),
        model=create.model or engine.settings.model,
        instructions=create.instructions,
        tools=tools.echo,
        tool_choice=choice.echo,
        parallel_tool_calls=create.parallel_tool_calls is not False,
        max_output_tokens=create.max_output_tokens,
        store=False,
        metadata=dict(create.metadata or {}),
    )
    override = engine.admit(response.model, request.headers.get("authorization", ""))
    if override is not None and override.status is not None:
        engine.stats.failed += 1
        kind = "invalid_request_error" if override.status < 500 else "server_error"
        return _error(override.status, {"message": override.message, "type": kind, "param": None, "code": None})
    deltas = engine.generate(
        tokens,
        override,
        tools=specs,
        tool_choice=choice.mode,
        forced_tool=choice.forced,
        parallel_tool_calls=response.parallel_tool_calls,
        max_output_tokens=create.max_output_tokens,
        text_format=(create.text or {}).get("format") or {"type": "text"},
        calls_so_far=count_calls(items),
    )
    events = _events(ResponseBuilder(response), deltas, inband=create.stream is True)
    if create.stream:
        stream = engine.counted(_sse(events), lambda: response.status == "failed")
        return StreamingResponse(stream, media_type="text/event-stream")
    engine.stats.active += 1
    try:
        async for _ in events:
            pass
    finally:
        engine.stats.active -= 1
    if response.status == "failed":
        engine.stats.failed += 1
        return _error(500, {**msgspec.to_builtins(response.error), "type": "server_error", "param": None})
    engine.stats.completed += 1
    return Response(encode(response), media_type="application/json")


def _items(create: CreateRequest) -> list[ContextItem]:
    if create.previous_response_id is not None:
        raise InvalidParam("This engine is stateless: send the whole conversation.", param="previous_response_id")
    items: list[ContextItem] = []
    for index, item in enumerate(normalize_input(create.input)):
        if isinstance(item, ItemReference):
            raise InvalidParam("This engine is stateless: no item references.", param=f"input[{index}]")
        items.append(item)
    return items


async def _events(
    builder: ResponseBuilder, deltas: AsyncGenerator[Delta, None], inband: bool
) -> AsyncGenerator[Event, None]:
    yield builder.created()
    yield builder.in_progress()
    try:
        async for delta in deltas:
            if isinstance(delta, Finished):
                usage = Usage.of(delta.prompt_tokens or 0, delta.cached_tokens, delta.output_tokens)
                reason = "max_output_tokens" if delta.reason == "length" else None
                for event in builder.finish("incomplete" if reason else "completed", usage, reason=reason):
                    yield event
                return
            for event in feed_delta(builder, delta):
                yield event
    except SimFault as exc:
        error = ErrorInfo(code="server_error", message=str(exc))
        for event in builder.finish("failed", None, error=error, inband_error=error_body(error) if inband else None):
            yield event
    finally:
        await deltas.aclose()


async def _sse(events: AsyncGenerator[Event, None]) -> AsyncGenerator[bytes, None]:
    try:
        async for event in events:
            yield event.sse()
    finally:
        await events.aclose()
    yield b"data: [DONE]\n\n"
