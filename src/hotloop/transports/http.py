"""HTTP endpoints of the Responses API (protocol.md §1): thin handlers over the pipeline and its stored objects."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from hotloop.errors import (
    InvalidParam,
    NotFound,
    RequestTooLarge,
    StoreUnavailable,
    UnsupportedParam,
    UpgradeRequired,
    failure_of,
)
from hotloop.models import Model
from hotloop.pipeline import background
from hotloop.pipeline.admission.entry import admit
from hotloop.pipeline.objects import embeddings
from hotloop.pipeline.objects import responses as stored
from hotloop.pipeline.objects.compact import compact
from hotloop.pipeline.prepared import MEASURE_OPTIONS, TurnOptions
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.session import Session, owner_of
from hotloop.pipeline.turn import Turn
from hotloop.transports.asgi import included, wait_disconnect, wants_timings
from hotloop.transports.auth import authenticate
from hotloop.transports.paging import page_params
from hotloop.transports.sse import SendState, sse_response
from hotloop.wire.codex_catalog import CLIENT_VERSION_PARAM, codex_catalog
from hotloop.wire.events import Event
from hotloop.wire.included import NOTHING, shown, visible
from hotloop.wire.replay import replay_events
from hotloop.wire.request import decode_create
from hotloop.wire.response import encode

JSON = "application/json"
READY_TIMEOUT_S = 2.0  # a readiness probe's store ping: under a probe's usual 3-5 s timeout


def raw_json(data: bytes, status: int = 200) -> Response:
    return Response(data, status_code=status, media_type=JSON)


def service_of(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def http_session(request: Request) -> tuple[Service, Session]:
    """Authenticate and build a cache-less session; raises `Unauthorized`."""
    service = service_of(request)
    keys = service.settings.api_keys
    key = authenticate(request.headers, keys)
    return service, service.session(owner_of(key, bool(keys)), caching=False)


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _strict_check(body: bytes) -> None:
    from hotloop.wire.request import CreateRequest

    raw = msgspec.json.decode(body)
    if isinstance(raw, dict):
        for key in raw:
            if key not in CreateRequest.__struct_fields__ or key == "stream_id":
                raise InvalidParam(f"Unknown parameter: '{key}'.", param=key, code="unknown_parameter")


async def create_response(request: Request) -> Response:
    """POST /v1/responses: JSON, SSE (`stream: true`) or background."""
    service, session = http_session(request)
    body = await read_body(request, service.settings.max_body_bytes)
    received_at = time.perf_counter()
    create = decode_create(body)
    if service.settings.strict_params:
        _strict_check(body)
    if create.stream_id is not None:
        raise UnsupportedParam("stream_id is a WebSocket-mode parameter.", param="stream_id")
    options = TurnOptions(
        inband_errors=bool(create.stream),
        transport="sse" if create.stream else "http",
        include_timings=wants_timings(request.headers),
        trace_parent=service.tracing.parent(request.headers) if service.tracing is not None else None,
    )
    turn = await admit(service, session, create, options, received_at)
    if turn.response.background:
        return await _background(service, turn, stream=bool(create.stream))
    if create.stream:
        state = SendState()
        settings = service.settings
        return sse_response(
            turn.events(state.congested),
            done=settings.sse_done,
            state=state,
            flush_window_s=settings.stream_flush_ms / 1000,
        )
    return await _json_result(request, turn)


async def _json_result(request: Request, turn: Turn) -> Response:
    """Run the turn to its end; a client that disconnects first cancels generation."""

    async def consume() -> None:
        async with contextlib.aclosing(turn.events()) as events:
            async for _ in events:
                pass

    task = asyncio.ensure_future(consume())
    watcher = asyncio.ensure_future(wait_disconnect(request.receive))
    await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return Response(status_code=499)
    watcher.cancel()
    task.result()
    response = turn.response
    if response.status == "failed" and response.error is not None:
        failure = failure_of(response.error.code)  # the table the in-band error event reads too
        code, message = response.error.code, response.error.message
        error = {"message": message, "type": failure.type, "param": failure.param, "code": code}
        return JSONResponse({"error": error}, status_code=failure.status)
    return raw_json(encode(visible(response, shown(turn.prepared.request.include))))


async def _background(service: Service, turn: Turn, *, stream: bool) -> Response:
    """The queued response now (JSON), or its events as they are generated (SSE); pipeline/background.py runs it."""
    running = await background.start(service, turn, stream=stream)
    if not stream:
        return raw_json(encode(turn.response))
    return sse_response(running.relay(), done=service.settings.sse_done)


async def get_response(request: Request) -> Response:
    """GET /v1/responses/{id}: the stored response; `stream=true` replays its events as SSE (protocol.md §1.8).

    `starting_after=N` sends only the events with `sequence_number > N`; `include_obfuscation` is accepted and
    ignored. A background response still generating is waited for, then replayed whole (`stored.finished_response`).
    `include=file_search_call.results` (or `include[]=`, as openai-python sends it) shows its searches' results,
    `include=code_interpreter_call.outputs` its code runs' outputs (wire/included.py).
    """
    service, session = http_session(request)
    query = request.query_params
    response_id = request.path_params["response_id"]
    showing = shown(included(query))
    if query.get("stream") not in ("true", "1"):
        return raw_json(encode(visible(await stored.get_response(service, session, response_id), showing)))
    raw_after = query.get("starting_after")
    after = -1
    if raw_after is not None:
        if not (raw_after.isascii() and raw_after.isdigit()):
            raise InvalidParam("starting_after must be a non-negative integer.", param="starting_after")
        after = int(raw_after)
    response = await stored.finished_response(service, session, response_id)
    events = replay_events(
        response, starting_after=after, reasoning_events=service.settings.reasoning_events, shown=showing
    )

    async def replay() -> AsyncGenerator[Event, None]:
        for event in events:
            yield event

    return sse_response(replay(), done=service.settings.sse_done)


async def delete_response(request: Request) -> Response:
    service, session = http_session(request)
    deleted = await stored.delete_response(service, session, request.path_params["response_id"])
    return raw_json(encode(deleted))


async def list_input_items(request: Request) -> Response:
    service, session = http_session(request)
    after, limit, order = page_params(request.query_params)
    page = await stored.input_items(
        service, session, request.path_params["response_id"], after=after, limit=limit, order=order
    )
    return raw_json(msgspec.json.encode(page))


async def cancel_response(request: Request) -> Response:
    service, session = http_session(request)
    response = await stored.cancel_response(service, session, request.path_params["response_id"])
    return raw_json(encode(visible(response, NOTHING)))


async def list_usage(request: Request) -> Response:
    """GET /v1/usage: the caller's usage ledger (`after`, `limit` 1 to 1000, `model`)."""
    service, session = http_session(request)
    query = request.query_params
    raw_limit = query.get("limit", "100")
    if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= 1000:
        raise InvalidParam("limit must be an integer between 1 and 1000.", param="limit")
    page = await stored.usage(
        service, session, after=query.get("after"), limit=int(raw_limit), model=query.get("model")
    )
    return raw_json(msgspec.json.encode(page))


async def count_input_tokens(request: Request) -> Response:
    service, session = http_session(request)
    create = decode_create(await read_body(request, service.settings.max_body_bytes))
    turn = await admit(service, session, create, MEASURE_OPTIONS)  # the drain and the rate limit apply; never run
    return JSONResponse(
        {"object": "response.input_tokens", "input_tokens": len(turn.prepared.generation.prompt_tokens)}
    )


async def compact_response(request: Request) -> Response:
    service, session = http_session(request)
    create = decode_create(await read_body(request, service.settings.max_body_bytes))
    return raw_json(msgspec.json.encode(await compact(service, session, create)))


async def websocket_required(request: Request) -> Response:
    """GET /v1/responses without `Upgrade: websocket` (protocol.md §1.9: 426)."""
    http_session(request)
    raise UpgradeRequired("Use a WebSocket upgrade on GET /v1/responses, or POST to create a response.")


def _model_object(model: Model) -> dict[str, Any]:
    return {"id": model.id, "object": "model", "created": model.created, "owned_by": model.owned_by}


async def list_models(request: Request) -> Response:
    service, _ = http_session(request)
    if CLIENT_VERSION_PARAM in request.query_params:  # Codex's catalog request (wire/codex_catalog.py)
        catalog = codex_catalog(
            [(model.id, model.context_window, model.follows_codex_patches) for model in service.models]
        )
        return raw_json(msgspec.json.encode(catalog))
    return JSONResponse({"object": "list", "data": [_model_object(model) for model in service.models]})


async def get_model(request: Request) -> Response:
    service, _ = http_session(request)
    model_id = request.path_params["model_id"]
    for model in service.models:
        if model.id == model_id:
            return JSONResponse(_model_object(model))
    raise NotFound(f"The model '{model_id}' does not exist.", param="model", code="model_not_found")


async def metrics(request: Request) -> Response:
    """Prometheus exposition (no key needed: no label carries a key or a response's content)."""
    service = service_of(request)
    if not service.settings.metrics:
        raise NotFound("Metrics are disabled on this server.", code="not_found")
    return Response(service.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")


async def create_embeddings(request: Request) -> Response:
    """POST /v1/embeddings (pipeline/objects/embeddings.py)."""
    service, _ = http_session(request)
    body = await read_body(request, service.settings.max_body_bytes)
    return raw_json(msgspec.json.encode(await embeddings.create(service, body)))


async def healthz(request: Request) -> Response:
    """Liveness: the process serves (it answers while it drains too, so a supervisor does not kill it early)."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Readiness (a load balancer's or Kubernetes' probe): 503 while the process drains, or while its store does
    not answer within `READY_TIMEOUT_S`; nothing in it names a key, a response or the store's address."""
    service = service_of(request)
    if service.drain.draining:
        return JSONResponse({"status": "draining"}, status_code=503)
    try:
        await asyncio.wait_for(service.store.ping(), READY_TIMEOUT_S)
    except (StoreUnavailable, TimeoutError):
        return JSONResponse({"status": "store_unavailable"}, status_code=503)
    return JSONResponse({"status": "ready"})
