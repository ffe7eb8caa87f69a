"""The console's routes (the console itself: hotloop/console/): the page and its static files, and
`GET /v1/console/state` (the live numbers).

The state shows every key's connections and usage, so on a server with API keys it answers only the operator's
`admin_key`; a server without keys (a developer's machine) serves it to anyone who can reach it, like /metrics.
"""

from __future__ import annotations

import hmac
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from hotloop import console
from hotloop.console.snapshot import snapshot
from hotloop.errors import HotloopError, NotFound, Unauthorized
from hotloop.pipeline.service import Service
from hotloop.transports.auth import presented_key

STATIC = Path(console.__file__).parent / "static"


class ConsoleForbidden(HotloopError):
    status = 403
    code = "console_disabled"


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    if not service.settings.console:
        raise NotFound("The console is disabled on this server.", code="not_found")
    return service


def _check_admin(request: Request, service: Service) -> None:
    settings = service.settings
    if not settings.api_keys:
        return
    if not settings.admin_key:
        raise ConsoleForbidden("This server has API keys but no admin_key: its console state is not served.")
    key = presented_key(request.headers)
    if key is None or not hmac.compare_digest(key.encode(), settings.admin_key.encode()):
        raise Unauthorized("The console state needs the server's admin key.")


async def console_page(request: Request) -> Response:
    _service(request)
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


async def console_state(request: Request) -> Response:
    service = _service(request)
    _check_admin(request, service)
    return JSONResponse(snapshot(service), headers={"Cache-Control": "no-store"})


def console_routes() -> list[BaseRoute]:
    return [
        Route("/", console_page),
        Route("/v1/console/state", console_state),
        Mount("/console", app=StaticFiles(directory=STATIC), name="console"),
    ]
