"""The engine's HTTP API: OpenAI's /v1/chat/completions, /v1/completions and a stateless /v1/responses (streamed
or not), /v1/models, SGLang's /generate and llama.cpp's /completion (token ids or text), and the
test facilities GET /stats, GET /stats/requests, POST /stats/reset and POST /sim/script."""

from __future__ import annotations

import asyncio
import random
import time
from array import array
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hotloop.backends.base import Delta, Finished
from hotloop.backends.sim.backend import SimFault
from hotloop.ids import new_id
from hotloop.simengine import constraints
from hotloop.simengine import requests as req
from hotloop.simengine.engine import Engine, Override, current_record
from hotloop.simengine.native import GenerateChunks, LlamaCppChunks
from hotloop.simengine.responses import create_response
from hotloop.simengine.sse import ChatChunks, CompletionChunks, Output, sse

_encode = msgspec.json.encode
GENERATION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/generate", "/completion", "/v1/responses"})


def error_response(status: int, message: str, param: str | None = None, code: str | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status)


def build_app(engine: Engine) -> Starlette:
    async def chat(request: Request) -> Response:
        body: req.ChatBody = req.decode(await request.body(), req.ChatBody)
        specs = req.tool_specs(body)
        mode, forced = req.tool_mode(body, specs)
        messages, calls = req.template_messages(body, specs)
        record = current_record.get()
        if record is not None:
            record.reasoning_chars = req.reasoning_sent(body)
            record.strict = req.strict_of(body)
        limit = req.max_tokens(body)
        tokens = await asyncio.to_thread(engine.chat.tokens, messages)  # a long prompt takes a while
        kwargs = dict(
            tools=specs if mode != "none" else [],
            tool_choice=mode,
            forced_tool=forced,
            parallel_tool_calls=body.parallel_tool_calls is not False,
            max_output_tokens=limit,
            text_format=req.text_format(body),
            calls_so_far=calls,
            thinking=body.thinking,
        )
        chunks = ChatChunks(new_id("chatcmpl"), body.model or engine.settings.model, engine.settings.reasoning_field)
        return await _run(engine, request, body, tokens, kwargs, chunks)

    async def completions(request: Request) -> Response:
        body: req.CompletionBody = req.decode(await request.body(), req.CompletionBody)
        tokens, kwargs = await _prompt(engine, req.single_prompt(body.prompt))
        kwargs["max_output_tokens"] = body.max_tokens
        so = body.structured_outputs or {}
        await _constrain(engine, body, tokens, kwargs, so.get("structural_tag"), so.get("grammar"))
        chunks = CompletionChunks(new_id("cmpl"), body.model or engine.settings.model, engine.writer())
        return await _run(engine, request, body, tokens, kwargs, chunks)

    async def generate(request: Request) -> Response:
        body: req.GenerateBody = req.decode(await request.body(), req.GenerateBody)
        if (body.input_ids is None) == (body.text is None):
            raise req.BadRequest("Give either input_ids or text.", param="input_ids")
        raw = body.input_ids if body.input_ids is not None else body.text
        tokens, kwargs = await _prompt(engine, req.single_prompt(raw or ""))
        kwargs["max_output_tokens"] = body.sampling_params.max_new_tokens
        # SGLang picks json_schema, regex, ebnf, then structural_tag: the first set wins.
        params = body.sampling_params
        tag = params.structural_tag if params.json_schema is None and params.regex is None else None
        await _constrain(engine, body, tokens, kwargs, tag if params.ebnf is None else None, params.ebnf)
        return await _run(
            engine, request, body, tokens, kwargs, GenerateChunks(new_id("gen"), len(tokens), engine.writer())
        )

    async def completion(request: Request) -> Response:
        body: req.LlamaCppBody = req.decode(await request.body(), req.LlamaCppBody)
        tokens, kwargs = await _prompt(engine, req.single_prompt(body.prompt))
        kwargs["max_output_tokens"] = body.n_predict if body.n_predict >= 0 else None
        triggers = (body.grammar_triggers or []) if body.grammar_lazy else []  # not lazy: the whole output
        await _constrain(engine, body, tokens, kwargs, None, body.grammar, triggers)
        return await _run(engine, request, body, tokens, kwargs, LlamaCppChunks(text=engine.writer()))

    async def responses(request: Request) -> Response:
        return await create_response(engine, request)

    async def models(request: Request) -> Response:
        model = {"id": engine.settings.model, "object": "model", "created": 0, "owned_by": "hotloop-sim-engine"}
        return JSONResponse({"object": "list", "data": [model]})

    async def stats(request: Request) -> Response:
        return Response(_encode(engine.stats), media_type="application/json")

    async def requests(request: Request) -> Response:
        after = int(request.query_params.get("after", "0") or 0)
        return Response(_encode({"requests": engine.requests_after(after)}), media_type="application/json")

    async def reset(request: Request) -> Response:
        engine.reset()
        return Response(_encode(engine.stats), media_type="application/json")

    async def script(request: Request) -> Response:
        try:
            steps = msgspec.json.decode(await request.body(), type=list[Override])
        except msgspec.MsgspecError as exc:
            return error_response(400, f"Invalid script: {exc}")
        engine.script.extend(steps)
        return JSONResponse({"queued": len(engine.script)})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def bad_request(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, req.BadRequest)
        return error_response(400, str(exc), exc.param, "invalid_value")

    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/generate", generate, methods=["POST"]),
        Route("/completion", completion, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/stats", stats, methods=["GET"]),
        Route("/stats/requests", requests, methods=["GET"]),
        Route("/stats/reset", reset, methods=["POST"]),
        Route("/sim/script", script, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
    ]
    middleware = [Middleware(RequestTimer, engine=engine)]
    return Starlette(routes=routes, exception_handlers={req.BadRequest: bad_request}, middleware=middleware)


class RequestTimer:
    """Times each generation request inside the engine (GET /stats/requests): a gateway in front of it is then
    measured against the engine's own time, whichever endpoint it uses (only llama.cpp's reports one)."""

    def __init__(self, app: ASGIApp, engine: Engine) -> None:
        self.app = app
        self.engine = engine

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in GENERATION_PATHS:
            await self.app(scope, receive, send)
            return
        traceparent = next((value for name, value in scope["headers"] if name == b"traceparent"), b"")
        entry = self.engine.record(scope["path"], traceparent.decode("latin-1"))
        start = time.perf_counter()

        async def timed_send(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                entry.ms = (time.perf_counter() - start) * 1000.0

        token = current_record.set(entry)
        try:
            await self.app(scope, receive, timed_send)
        finally:
            current_record.reset(token)


async def _prompt(engine: Engine, prompt: str | array[int]) -> tuple[Sequence[int], dict[str, Any]]:
    """A completion prompt's ids (a token-ID prompt skips tokenization, as with a real engine) and the tools its
    text offers, with the calls already made: the engine's tool policy then acts as a model reading it would."""
    if isinstance(prompt, array):
        tokens: Sequence[int] = prompt
        specs, calls = await asyncio.to_thread(engine.scans.scan, prompt)
    else:
        tokens = await asyncio.to_thread(engine.chat.tokenizer.encode, prompt)
        specs, calls = req.tools_in_prompt(prompt)
    kwargs = {"tools": specs, "tool_choice": "auto" if specs else "none", "calls_so_far": calls, "cache_output": True}
    return tokens, kwargs


async def _constrain(
    engine: Engine,
    body: req.CompletionBody | req.GenerateBody | req.LlamaCppBody,
    tokens: Sequence[int],
    kwargs: dict[str, Any],
    structural_tag: str | None,
    gbnf: str | None = None,
    triggers: Sequence[dict[str, Any]] = (),
) -> None:
    """The request's constrained decoding: its fields recorded as they came (GET /stats/requests), and the answer
    kept to them, as an engine's masked decoding keeps it (constraints.py): a JSON schema makes it that bare JSON;
    a custom tool's grammar in a structural tag or a lazy GBNF grammar makes the tool's input one drawn from it."""
    fields = req.constraint_fields(body)
    record = current_record.get()
    if record is not None:
        record.constraint = fields
    schema = req.schema_of(body) if fields is not None else None
    if constraints.needs_work(schema, structural_tag, gbnf):
        rng = random.Random(engine.settings.seed * 1_000_003 + len(tokens))
        lark = engine.settings.structural_tag_lark
        got = await asyncio.to_thread(
            constraints.resolve, schema, structural_tag, gbnf, triggers, kwargs["tools"], rng, lark
        )
        schema = got.schema
        if got.grammars:
            kwargs["tools"] = constraints.with_grammars(kwargs["tools"], got.grammars)
        if got.forced is not None and any(spec.name == got.forced for spec in kwargs["tools"]):
            kwargs.update(tool_choice="required", forced_tool=got.forced, thinking=False)
    req.constrain(kwargs, schema)


async def _run(
    engine: Engine, request: Request, body: Any, tokens: Sequence[int], kwargs: dict[str, Any], chunks: Output
) -> Response:
    override = engine.admit(body.model, request.headers.get("authorization", ""))
    if override is not None and override.status is not None:
        engine.stats.failed += 1
        return error_response(override.status, override.message, code="simulated_error")
    deltas = engine.generate(tokens, override, **kwargs)
    if body.stream:
        usage = body.stream_options is not None and body.stream_options.include_usage
        stream = engine.counted(sse(chunks, deltas, usage), lambda: chunks.failed)
        return StreamingResponse(stream, media_type="text/event-stream")
    engine.stats.active += 1
    try:
        result = await _collect(deltas, chunks)
    except SimFault as exc:
        engine.stats.failed += 1
        return error_response(500, str(exc), code="simulated_error")
    finally:
        engine.stats.active -= 1
    engine.stats.completed += 1
    return Response(_encode(result), media_type="application/json")


async def _collect(deltas: AsyncGenerator[Delta, None], chunks: Output) -> dict[str, Any]:
    out = chunks.collector()
    async for delta in deltas:
        if isinstance(delta, Finished):
            return out.result(delta)
        out.add(delta)
    raise SimFault("generation ended without a result")
