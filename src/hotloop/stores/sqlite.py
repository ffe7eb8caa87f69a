"""The embedded default store: SQLite in WAL mode, one writer thread, reads on worker threads.

A chain loads in one query (a recursive CTE over `parent`), so continuing a long conversation from the store
costs one round trip, not one per turn.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import msgspec

from hotloop.metering.records import UsageRecord, UsageTotals
from hotloop.stores.base import Chain, ItemPage, UsagePage
from hotloop.wire.items import KNOWN_ITEM_TYPES, ContextItem, OtherItem, item_to_builtins
from hotloop.wire.response import Response, response_decoder

T = TypeVar("T")
SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    parent TEXT,
    created_at INTEGER NOT NULL,
    body BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
    response_id TEXT NOT NULL,
    kind INTEGER NOT NULL,          -- 0: input, 1: output
    position INTEGER NOT NULL,
    item_id TEXT,
    type TEXT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (response_id, kind, position)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS items_by_item_id ON items (item_id);
"""
# The usage ledger: one row per response (the owner is the store's owner tag, a hash, never an API key).
USAGE_SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (
    response_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    cached_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    created_at REAL NOT NULL,
    transport TEXT NOT NULL,
    timings BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_by_owner ON usage (owner, created_at);
"""
_USAGE_COLUMNS = (
    "response_id, owner, model, status, input_tokens, cached_tokens, output_tokens, created_at, transport, timings"
)
_CHAIN = """
WITH RECURSIVE chain(id, parent, depth) AS (
    SELECT id, parent, 0 FROM responses WHERE id = ?1 AND owner = ?2
    UNION ALL
    SELECT r.id, r.parent, c.depth + 1 FROM responses r JOIN chain c ON r.id = c.parent WHERE r.owner = ?2
)
SELECT c.depth, c.parent, i.type, i.body FROM chain c LEFT JOIN items i ON i.response_id = c.id
ORDER BY c.depth DESC, i.kind, i.position
"""
_encode = msgspec.json.Encoder().encode
_decoders = {name: msgspec.json.Decoder(cls) for name, cls in KNOWN_ITEM_TYPES.items()}


def decode_item(type_name: str, body: bytes) -> ContextItem:
    decoder = _decoders.get(type_name)
    if decoder is None:
        return OtherItem(raw=msgspec.json.decode(body))
    item: ContextItem = decoder.decode(body)
    return item


def _item_rows(response_id: str, kind: int, items: list[Any]) -> list[tuple[Any, ...]]:
    rows = []
    for position, item in enumerate(items):
        raw = item_to_builtins(item)
        rows.append((response_id, kind, position, raw.get("id"), raw.get("type", "message"), _encode(raw)))
    return rows


class SQLiteStore:
    def __init__(self, path: Path) -> None:
        self._path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._writes: queue.SimpleQueue[tuple[Callable[[sqlite3.Connection], Any], Any] | None] = queue.SimpleQueue()
        self._local = threading.local()
        writer = self._connect()
        writer.executescript(SCHEMA)
        writer.executescript(USAGE_SCHEMA)
        self._writer = threading.Thread(target=self._write_loop, args=(writer,), name="hotloop-sqlite", daemon=True)
        self._writer.start()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL is durable against process crashes in WAL mode (only an OS crash may drop the last commits).
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _write_loop(self, conn: sqlite3.Connection) -> None:
        while (job := self._writes.get()) is not None:
            work, (loop, future) = job
            try:
                conn.execute("BEGIN IMMEDIATE")
                result = work(conn)
                conn.execute("COMMIT")
            except BaseException as exc:  # handed to the awaiting coroutine
                conn.execute("ROLLBACK")
                loop.call_soon_threadsafe(_settle, future, None, exc)
            else:
                loop.call_soon_threadsafe(_settle, future, result, None)
        conn.close()

    async def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._writes.put((work, (loop, future)))
        return await future

    async def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def run() -> T:
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = self._connect()
            return work(conn)

        return await asyncio.to_thread(run)

    async def save(self, owner: str, response: Response, input_items: list[ContextItem]) -> None:
        body = _encode(response)
        rows = _item_rows(response.id, 0, input_items) + _item_rows(response.id, 1, response.output)

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR REPLACE INTO responses (id, owner, parent, created_at, body) VALUES (?, ?, ?, ?, ?)",
                (response.id, owner, response.previous_response_id, response.created_at, body),
            )
            conn.execute("DELETE FROM items WHERE response_id = ?", (response.id,))
            conn.executemany("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?)", rows)

        await self._write(work)

    async def get(self, owner: str, response_id: str) -> Response | None:
        def work(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute("SELECT body FROM responses WHERE id = ? AND owner = ?", (response_id, owner)).fetchone()
            return row[0] if row else None

        body = await self._read(work)
        return response_decoder.decode(body) if body is not None else None

    async def delete(self, owner: str, response_id: str) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute("DELETE FROM responses WHERE id = ? AND owner = ?", (response_id, owner))
            if cursor.rowcount:
                conn.execute("DELETE FROM items WHERE response_id = ?", (response_id,))
            return cursor.rowcount > 0

        return await self._write(work)

    async def input_items(
        self, owner: str, response_id: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> ItemPage | None:
        def work(conn: sqlite3.Connection) -> list[tuple[str | None, str, bytes]] | None:
            if (
                conn.execute("SELECT 1 FROM responses WHERE id = ? AND owner = ?", (response_id, owner)).fetchone()
                is None
            ):
                return None
            direction = "ASC" if order == "asc" else "DESC"
            rows = conn.execute(
                "SELECT item_id, type, body FROM items WHERE response_id = ? AND kind = 0"
                f" ORDER BY position {direction}",
                (response_id,),
            ).fetchall()
            return [tuple(row) for row in rows]

        rows = await self._read(work)
        if rows is None:
            return None
        if after is not None:
            ids = [row[0] for row in rows]
            rows = rows[ids.index(after) + 1 :] if after in ids else []
        page = rows[:limit]
        return ItemPage(items=[decode_item(row[1], row[2]) for row in page], has_more=len(rows) > limit)

    async def load_chain(self, owner: str, response_id: str) -> Chain | None:
        def work(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            rows = conn.execute(_CHAIN, (response_id, owner)).fetchall()
            if rows:
                head = conn.execute("SELECT body FROM responses WHERE id = ?", (response_id,)).fetchone()
                rows.append(("head", None, None, head[0]))
            return rows

        rows = await self._read(work)
        if not rows:
            return None
        *item_rows, head = rows
        if item_rows[0][1] is not None:  # the oldest ancestor still names a parent: that parent is gone
            return None
        context = [decode_item(row[2], row[3]) for row in item_rows if row[2] is not None]
        return Chain(response=response_decoder.decode(head[3]), context=context)

    async def find_item(self, owner: str, item_id: str) -> ContextItem | None:
        def work(conn: sqlite3.Connection) -> tuple[str, bytes] | None:
            row = conn.execute(
                "SELECT i.type, i.body FROM items i JOIN responses r ON r.id = i.response_id"
                " WHERE i.item_id = ? AND r.owner = ? LIMIT 1",
                (item_id, owner),
            ).fetchone()
            return (row[0], row[1]) if row else None

        row = await self._read(work)
        return decode_item(*row) if row else None

    async def append_usage(self, records: list[UsageRecord]) -> None:
        rows = [
            (
                rec.response_id,
                rec.owner,
                rec.model,
                rec.status,
                rec.input_tokens,
                rec.cached_tokens,
                rec.output_tokens,
                rec.created_at,
                rec.transport,
                _encode(rec.timings),
            )
            for rec in records
        ]

        def work(conn: sqlite3.Connection) -> None:
            conn.executemany(
                f"INSERT OR IGNORE INTO usage ({_USAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows
            )

        await self._write(work)

    async def usage(self, owner: str, *, after: str | None, limit: int, model: str | None) -> UsagePage:
        def work(conn: sqlite3.Connection) -> tuple[list[tuple[Any, ...]], tuple[Any, ...]]:
            where, args = "owner = ?", [owner]
            if model is not None:
                where += " AND model = ?"
                args.append(model)
            totals = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(cached_tokens), 0),"
                f" COALESCE(SUM(output_tokens), 0) FROM usage WHERE {where}",
                args,
            ).fetchone()
            page_where, page_args = where, list(args)
            if after is not None:
                cursor = conn.execute(
                    "SELECT created_at, rowid FROM usage WHERE response_id = ? AND owner = ?", (after, owner)
                ).fetchone()
                if cursor is None:
                    return [], tuple(totals)
                page_where += " AND (created_at, rowid) > (?, ?)"
                page_args += [cursor[0], cursor[1]]
            rows = conn.execute(
                f"SELECT {_USAGE_COLUMNS} FROM usage WHERE {page_where} ORDER BY created_at, rowid LIMIT ?",
                [*page_args, limit + 1],
            ).fetchall()
            return [tuple(row) for row in rows], tuple(totals)

        rows, totals = await self._read(work)
        records = [_usage_record(row) for row in rows[:limit]]
        return UsagePage(records=records, has_more=len(rows) > limit, totals=UsageTotals(*totals))

    async def close(self) -> None:
        self._writes.put(None)
        await asyncio.to_thread(self._writer.join, 10)


_timings_decoder = msgspec.json.Decoder(dict[str, float])


def _usage_record(row: tuple[Any, ...]) -> UsageRecord:
    return UsageRecord(
        response_id=row[0],
        owner=row[1],
        model=row[2],
        status=row[3],
        input_tokens=row[4],
        cached_tokens=row[5],
        output_tokens=row[6],
        created_at=row[7],
        transport=row[8],
        timings=_timings_decoder.decode(row[9]),
    )


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
