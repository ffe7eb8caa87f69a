"""The shared stores the store tests run against, each run in its own namespace (a Redis key prefix, a PostgreSQL
schema) that is dropped afterwards. An unreachable Redis or PostgreSQL fails these tests; it never skips them.

`HOTLOOP_TEST_REDIS_URL` and `HOTLOOP_TEST_POSTGRES_URL` override the defaults (127.0.0.1, db `test`; the
PostgreSQL user is root, else postgres, whichever the server accepts).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import uuid
from collections.abc import AsyncIterator, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncpg
from redis.asyncio import Redis

from hotloop.config import Settings
from hotloop.stores.base import Store
from hotloop.stores.postgres import PostgresStore
from hotloop.stores.sqlite import SQLiteStore
from hotloop.stores.url import open_store

KINDS = ("sqlite", "redis", "postgresql")
REDIS_URL = os.environ.get("HOTLOOP_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@functools.cache
def postgres_url() -> str:
    """The base URL of the test database (no schema)."""
    if "HOTLOOP_TEST_POSTGRES_URL" in os.environ:
        return os.environ["HOTLOOP_TEST_POSTGRES_URL"]
    errors = []
    for user in ("root", "postgres"):
        url = f"postgresql://{user}@127.0.0.1:5432/test"
        try:
            _in_thread(_probe(url))
            return url
        except Exception as exc:  # the next user; both failing fails the test
            errors.append(f"{user}: {exc!r}")
    raise AssertionError(f"PostgreSQL at 127.0.0.1:5432 db test is unreachable: {errors}")


def _in_thread(coro: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine to its end on a fresh loop in another thread (callers may be inside a running loop)."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coro).result()


async def _probe(url: str) -> None:
    conn = await asyncpg.connect(url, timeout=5)
    await conn.close()


def namespace() -> str:
    return f"t{uuid.uuid4().hex[:16]}"


def store_url(kind: str, ns: str, tmp_path: Path, *, host_port: tuple[str, int] | None = None) -> str:
    """The store URL of `kind` in namespace `ns`; `host_port` points Redis or PostgreSQL elsewhere (a proxy)."""
    if kind == "sqlite":
        return f"sqlite://{tmp_path / ns / 'hotloop.db'}"
    base = REDIS_URL if kind == "redis" else postgres_url()
    if host_port is not None:
        scheme, rest = base.split("://", 1)
        userinfo = rest.split("@", 1)[0] + "@" if "@" in rest.split("/", 1)[0] else ""
        path = rest.split("/", 1)[1] if "/" in rest else ""
        base = f"{scheme}://{userinfo}{host_port[0]}:{host_port[1]}/{path}"
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}prefix={ns}:" if kind == "redis" else f"{base}{sep}schema={ns}"


def upstream(kind: str) -> tuple[str, int]:
    """Host and port of the real Redis or PostgreSQL."""
    url = REDIS_URL if kind == "redis" else postgres_url()
    hostport = url.split("://", 1)[1].split("/", 1)[0].rsplit("@", 1)[-1]
    host, _, port = hostport.partition(":")
    return host, int(port or (6379 if kind == "redis" else 5432))


async def drop_namespace(kind: str, ns: str) -> None:
    if kind == "redis":
        client = Redis.from_url(REDIS_URL)
        try:
            keys = [key async for key in client.scan_iter(match=f"{ns}:*", count=1000)]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()
    elif kind == "postgresql":
        conn = await asyncpg.connect(postgres_url(), timeout=5)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{ns}" CASCADE')
        finally:
            await conn.close()


@contextlib.asynccontextmanager
async def opened_store(kind: str, tmp_path: Path) -> AsyncIterator[Store]:
    """A store of `kind` in a namespace of its own, closed and dropped afterwards."""
    ns = namespace()
    opened = open_store(Settings(store_url=store_url(kind, ns, tmp_path), data_dir=str(tmp_path)))
    try:
        yield opened
    finally:
        await opened.close()
        await drop_namespace(kind, ns)


async def chunk_rows(store: Store) -> int:
    """Every chunk of bytes the store keeps (a Files API file's, a container file's, a skill version's): what a
    deletion must leave none of."""
    if isinstance(store, SQLiteStore):
        return int(await store._read(lambda conn: conn.execute("SELECT COUNT(*) FROM file_chunks").fetchone()[0]))
    assert isinstance(store, PostgresStore)
    pool = await store._connected()
    return int(await pool.fetchval(f'SELECT COUNT(*) FROM "{store.schema}".file_chunks'))
