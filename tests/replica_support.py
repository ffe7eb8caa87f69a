"""Helpers of the replica and durability tests: the stores several real processes can share, and small HTTP and
WebSocket turns against one replica."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from store_support import KINDS, drop_namespace, namespace, store_url
from wsutil import WS, final

SIM = "hotloop-sim"
KEY = "replica-key"
HEADERS = {"Authorization": f"Bearer {KEY}"}
# Stores several processes can share; Redis and PostgreSQL must be running (CI starts them): without them the
# tests fail, they never skip.
STORES = KINDS


@contextlib.contextmanager
def shared_store(kind: str, data_dir: Path) -> Iterator[dict[str, Any]]:
    """Settings that make every process started with them (and with `data_dir`: one secret) share one store of
    `kind`, in a fresh namespace that is dropped afterwards."""
    ns = namespace()
    try:
        yield {"store_url": store_url(kind, ns, data_dir)}
    finally:
        if kind != "sqlite":
            asyncio.run(drop_namespace(kind, ns))


def http_turn(base_url: str, **body: Any) -> dict[str, Any]:
    reply = httpx.post(f"{base_url}/responses", json={"model": SIM, **body}, headers=HEADERS, timeout=30)
    assert reply.status_code == 200, reply.text
    response: dict[str, Any] = reply.json()
    assert response["status"] == "completed", response
    return response


def get_response(base_url: str, response_id: str) -> httpx.Response:
    return httpx.get(f"{base_url}/responses/{response_id}", headers=HEADERS, timeout=30)


def ws_turn(ws: WS, **body: Any) -> dict[str, Any]:
    response = final(ws.turn(model=SIM, **body))
    assert response["status"] == "completed", response
    return response
