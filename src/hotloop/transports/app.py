"""The ASGI application: routes, one error mapping for HTTP, and the service's start-up and shutdown."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute

from hotloop.config import Settings
from hotloop.errors import HotloopError, NotFound, ServerError
from hotloop.observability.logs import RequestIds
from hotloop.pipeline.service import Service
from hotloop.transports import http
from hotloop.transports.asgi import error_response
from hotloop.transports.console import console_routes
from hotloop.transports.containers import container_routes
from hotloop.transports.conversations import conversation_routes
from hotloop.transports.doors import Doors, DoorsMiddleware
from hotloop.transports.files import file_routes
from hotloop.transports.skills import skill_routes
from hotloop.transports.vector_stores import vector_store_routes
from hotloop.transports.websocket import websocket_endpoint
from hotloop.transports.ws_writer import RawSend

log = logging.getLogger("hotloop")


def build_service(settings: Settings) -> Service:
    from hotloop.metering.ledger import Ledger
    from hotloop.models import build_registry
    from hotloop.pipeline.state.shared_limits import LimitTable
    from hotloop.sealing import load_secret
    from hotloop.stores.url import open_store
    from hotloop.transports.worker_share import worker_share

    data_dir = settings.resolved_data_dir()
    store = open_store(settings)  # docs/stores.md
    ledger = Ledger(store.append_usage, settings.ledger_batch, settings.ledger_flush_ms)
    share = worker_share()  # under a supervisor: the limits every worker counts in
    limits = None
    if share is not None:
        limits = LimitTable(share.limits, share.worker, settings.rate_limit_rpm, settings.rate_limit_tpm)
    return Service(
        settings, build_registry(settings), store, load_secret(data_dir, settings.secret_key_file), ledger, limits
    )


async def _hotloop_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HotloopError)
    return error_response(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return error_response(NotFound(f"No route for {request.method} {request.url.path}.", code="not_found"))
    code = "method_not_allowed" if exc.status_code == 405 else "invalid_request"
    return error_response(HotloopError(str(exc.detail), code=code, status=exc.status_code))


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(ServerError("The server had an error while processing your request."))


def create_app(settings: Settings, service: Service | None = None) -> Starlette:
    """The app; `service` may be passed in (tests), else it is built at start-up."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.service = service or build_service(settings)
        app.state.service.start()
        try:
            yield
        finally:
            await app.state.service.close()

    routes = [
        Route("/healthz", http.healthz),
        Route("/readyz", http.readyz),
        Route("/metrics", http.metrics),
        Route("/v1/models", http.list_models),
        Route("/v1/models/{model_id:path}", http.get_model),
        Route("/v1/responses", http.create_response, methods=["POST"]),
        Route("/v1/responses", http.websocket_required, methods=["GET"]),
        WebSocketRoute("/v1/responses", websocket_endpoint),
        Route("/v1/responses/input_tokens", http.count_input_tokens, methods=["POST"]),
        Route("/v1/responses/compact", http.compact_response, methods=["POST"]),
        Route("/v1/responses/{response_id}", http.get_response, methods=["GET"]),
        Route("/v1/responses/{response_id}", http.delete_response, methods=["DELETE"]),
        Route("/v1/responses/{response_id}/input_items", http.list_input_items, methods=["GET"]),
        Route("/v1/responses/{response_id}/cancel", http.cancel_response, methods=["POST"]),
        Route("/v1/usage", http.list_usage, methods=["GET"]),
        Route("/v1/embeddings", http.create_embeddings, methods=["POST"]),
        *conversation_routes(),
        *file_routes(),
        *vector_store_routes(),
        *container_routes(),
        *skill_routes(),
        *console_routes(),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(DoorsMiddleware, doors=Doors.of(settings)), Middleware(RawSend), Middleware(RequestIds)],
        lifespan=lifespan,
        exception_handlers={HotloopError: _hotloop_error, HTTPException: _http_error, Exception: _unexpected},
    )
