"""The PostgreSQL store (asyncpg, a connection pool): a save is one transaction, a chain loads with one recursive
query, deletions reach every replica by LISTEN/NOTIFY.

URL: `postgresql://user[:password]@host:port/db?schema=NAME` (default schema `hotloop`); the tables live in that
schema, created on first use, so deployments and test runs sharing a database never see each other's data.
The pool connects lazily: a server whose database is down starts, answers 503 to what needs the store, and
works once the database is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from hotloop.metering.records import UsageRecord, UsageTotals
from hotloop.stores import postgres_container_sql as container_sql
from hotloop.stores import postgres_skill_sql as skill_sql
from hotloop.stores import postgres_sql as sql
from hotloop.stores import postgres_vector_sql as vector_sql
from hotloop.stores.base import Chain
from hotloop.stores.codec import chain_from_rows, decode_item, encode, encode_response, usage_record
from hotloop.stores.files import sweep_expired_files
from hotloop.stores.health import Health
from hotloop.stores.pages import ItemPage, UsagePage
from hotloop.stores.postgres_containers import PostgresContainers
from hotloop.stores.postgres_conversations import PostgresConversations
from hotloop.stores.postgres_files import PostgresFiles
from hotloop.stores.postgres_skills import PostgresSkills
from hotloop.stores.postgres_vector_stores import PostgresVectorStores
from hotloop.stores.retention import (
    Background,
    DeletionHandler,
    GapHandler,
    Retention,
    retry_forever,
)
from hotloop.wire.items import ContextItem
from hotloop.wire.response import Response, response_decoder

DEFAULT_SCHEMA = "hotloop"
CONNECT_TIMEOUT_S = 2.0
COMMAND_TIMEOUT_S = 10.0
POOL_SIZE = 16
BYTE_SHARDS = 16
MAX_CHAIN_DEPTH = 100_000
LISTENER_PING_S = 5.0
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,39}")
_UNREACHABLE = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError,
)
# A text parameter with a NUL, which PostgreSQL's text cannot hold (a client's id, name or cursor): a 400.
_UNSTORABLE = (asyncpg.exceptions.CharacterNotInRepertoireError, asyncpg.exceptions.UntranslatableCharacterError)


def split_schema(url: str) -> tuple[str, str]:
    """The URL without `schema=`, and the schema: lower-case letters, digits and `_` (it is spliced into SQL)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((value for key, value in query if key == "schema"), DEFAULT_SCHEMA)
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(f"store_url: schema '{schema}' must match {_SCHEMA_NAME.pattern}")
    rest = urlencode([(key, value) for key, value in query if key != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


class PostgresStore(PostgresConversations, PostgresFiles, PostgresVectorStores, PostgresContainers, PostgresSkills):
    def __init__(self, url: str, retention: Retention | None = None) -> None:
        self._dsn, self.schema = split_schema(url)
        self.retention = retention or Retention()
        self._sql = {
            name: text.replace("{s}", f'"{self.schema}"')
            for module in (sql, vector_sql, container_sql, skill_sql)
            for name, text in vars(module).items()
            if name.isupper()
        }
        self._channel = f"hotloop_deleted_{self.schema}"
        self._pool: asyncpg.Pool | None = None
        self._opening = asyncio.Lock()
        self._background = Background()
        self.health = Health(_UNREACHABLE, self._ping, _UNSTORABLE)

    async def _connected(self) -> asyncpg.Pool:
        """The pool, opened (and the schema created) on first use; a failure is retried on the next call."""
        if self._pool is not None:
            return self._pool
        async with self._opening:
            if self._pool is None:
                pool = await asyncpg.create_pool(
                    self._dsn,
                    min_size=1,
                    max_size=POOL_SIZE,
                    timeout=CONNECT_TIMEOUT_S,
                    command_timeout=COMMAND_TIMEOUT_S,
                )
                try:
                    async with pool.acquire() as conn, conn.transaction():
                        await conn.execute(self._sql["SCHEMA_LOCK"], self.schema)  # replicas starting together
                        await conn.execute(self._sql["SCHEMA"])
                        await conn.execute(self._sql["VECTOR_SCHEMA"])
                        await conn.execute(self._sql["CONTAINER_SCHEMA"])
                        await conn.execute(self._sql["SKILL_SCHEMA"])
                except BaseException:
                    await pool.close()
                    raise
                self._pool = pool
        return self._pool

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Any]:
        """A connection in a transaction, the store's health watching it (the containers' and skills' writes)."""
        async with self.health.guard():
            pool = await self._connected()
            async with pool.acquire() as conn, conn.transaction():
                yield conn

    async def _fetch(self, name: str, *args: Any) -> list[asyncpg.Record]:
        async with self.health.guard():
            pool = await self._connected()
            rows: list[asyncpg.Record] = await pool.fetch(self._sql[name], *args)
            return rows

    async def _ping(self) -> None:
        pool = await self._connected()
        await pool.fetchval("SELECT 1", timeout=CONNECT_TIMEOUT_S)

    async def ensure_available(self) -> None:
        await self.health.ensure()

    async def ping(self) -> None:
        async with self.health.guard():
            await self._ping()

    def start(self, on_deleted: DeletionHandler, on_gap: GapHandler) -> None:
        feed = retry_forever("postgresql", lambda subscribed: self._listen(on_deleted, subscribed), on_gap)
        self._background.start(self, self.retention, feed)
        self._background.spawn(sweep_expired_files(self), "hotloop-file-expiry")

    async def _listen(self, on_deleted: DeletionHandler, subscribed: Callable[[], None]) -> None:
        await self._connected()  # the schema exists before anything is deleted
        # Named, so an operator (or a test) can tell the listener in pg_stat_activity.
        settings = {"application_name": self.listener_name}
        conn = await asyncpg.connect(self._dsn, timeout=CONNECT_TIMEOUT_S, server_settings=settings)
        closed = asyncio.Event()
        conn.add_termination_listener(lambda _conn: closed.set())
        try:
            await conn.add_listener(self._channel, lambda _c, _pid, _channel, payload: on_deleted(payload))
            subscribed()  # add_listener returns once LISTEN has run: every later NOTIFY reaches this connection
            while True:  # a closed connection is noticed at once; a ping notices one that died quietly
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(closed.wait(), LISTENER_PING_S)
                await conn.execute("SELECT 1", timeout=CONNECT_TIMEOUT_S)  # raises on a closed connection
        finally:
            conn.terminate()

    @property
    def listener_name(self) -> str:
        """The `application_name` of this store's LISTEN connection."""
        return f"hotloop-listener-{self.schema}"

    async def save(self, owner: str, response: Response, input_items: list[ContextItem]) -> None:
        enc = encode_response(response, input_items)
        rows = [(0, pos, row) for pos, row in enumerate(enc.inputs)] + [
            (1, pos, row) for pos, row in enumerate(enc.outputs)
        ]
        columns = (
            [kind for kind, _, _ in rows],
            [pos for _, pos, _ in rows],
            [row.item_id for _, _, row in rows],
            [row.type for _, _, row in rows],
            [row.body for _, _, row in rows],
        )
        parent = response.previous_response_id
        async with self.health.guard():
            pool = await self._connected()
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(self._sql["SAVE_LOCK"], response.id)
                old = await conn.fetchval(
                    self._sql["UPSERT"], response.id, owner, parent, response.created_at, enc.size, enc.body
                )
                if old is not None:
                    await conn.execute(self._sql["DELETE_ITEMS"], response.id)
                shard = random.randrange(BYTE_SHARDS)
                await conn.execute(self._sql["INSERT_ITEMS"], response.id, *columns, shard, enc.size - (old or 0))

    async def get(self, owner: str, response_id: str) -> Response | None:
        rows = await self._fetch("GET", response_id, owner)
        return response_decoder.decode(rows[0][0]) if rows else None

    async def delete(self, owner: str, response_id: str) -> bool:
        return bool(await self._fetch("DELETE", response_id, owner, *self._notify_args()))

    async def expire(self, before: int, limit: int) -> list[str]:
        return [row[0] for row in await self._fetch("EXPIRE", before, limit, *self._notify_args())]

    async def trim(self, max_bytes: int, limit: int) -> list[str]:
        async with self.health.guard():
            pool = await self._connected()
            async with pool.acquire() as conn, conn.transaction():
                if not await conn.fetchval(self._sql["TRIM_LOCK"], self.schema):
                    return []  # another replica is trimming
                excess = await conn.fetchval(self._sql["TOTAL_BYTES"]) - max_bytes
                if excess <= 0:
                    return []
                rows = await conn.fetch(self._sql["TRIM"], excess, limit, *self._notify_args())
                return [row[0] for row in rows]

    def _notify_args(self) -> tuple[int, str]:
        return random.randrange(BYTE_SHARDS), self._channel

    async def stored_bytes(self) -> int:
        return int((await self._fetch("TOTAL_BYTES"))[0][0])

    async def input_items(
        self, owner: str, response_id: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> ItemPage | None:
        rows = await self._fetch("INPUT_ITEMS", response_id, owner)
        if not rows:
            return None
        found = [row for row in rows if row[1] is not None]
        if order == "desc":
            found.reverse()
        if after is not None:
            ids = [row[0] for row in found]
            found = found[ids.index(after) + 1 :] if after in ids else []
        page = found[:limit]
        return ItemPage(items=[decode_item(row[1], row[2]) for row in page], has_more=len(found) > limit)

    async def load_chain(self, owner: str, response_id: str) -> Chain | None:
        rows = await self._fetch("CHAIN", response_id, owner, MAX_CHAIN_DEPTH)
        if len(rows) < 2 or rows[-1][0] != -1:
            return None
        *item_rows, head = rows
        return chain_from_rows(item_rows, head[5], parent=1, type_=4, body=5)

    async def find_item(self, owner: str, item_id: str) -> ContextItem | None:
        rows = await self._fetch("FIND_ITEM", item_id, owner)
        return decode_item(rows[0][0], rows[0][1]) if rows else None

    async def append_usage(self, records: list[UsageRecord]) -> None:
        if not records:
            return
        columns = (
            [r.response_id for r in records],
            [r.owner for r in records],
            [r.model for r in records],
            [r.status for r in records],
            [r.input_tokens for r in records],
            [r.cached_tokens for r in records],
            [r.output_tokens for r in records],
            [r.created_at for r in records],
            [r.transport for r in records],
            [encode(r.timings) for r in records],
        )
        await self._fetch("APPEND_USAGE", *columns)

    async def usage(self, owner: str, *, after: str | None, limit: int, model: str | None) -> UsagePage:
        async with self.health.guard():
            pool = await self._connected()
            async with pool.acquire() as conn:
                totals = await conn.fetchrow(self._sql["USAGE_TOTALS"], owner, model)
                rows = await conn.fetch(self._sql["USAGE_PAGE"], owner, model, after, limit + 1)
        records = [usage_record(tuple(row)) for row in rows[:limit]]
        return UsagePage(records=records, has_more=len(rows) > limit, totals=UsageTotals(*totals))

    async def close(self) -> None:
        await self._background.stop()
        if self._pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._pool.close(), CONNECT_TIMEOUT_S)
            self._pool = None
