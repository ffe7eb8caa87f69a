"""The embedded default store: SQLite in WAL mode, one writer thread, reads on worker threads.

A chain loads in one query (a recursive CTE over `parent`), so continuing a long conversation from the store
costs one round trip, not one per turn. Processes sharing the file (several workers) learn of each other's
deletions from a small `deletions` table, which each one reads when a process that deleted touched the
`-deletions` file beside the database (inotify, file_changes.py), or polls where that is not seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from hotloop.errors import StoreUnavailable
from hotloop.metering.records import UsageRecord, UsageTotals
from hotloop.stores.base import Chain
from hotloop.stores.codec import ItemRow, chain_from_rows, decode_item, encode, encode_response, usage_record
from hotloop.stores.file_changes import FileChanges
from hotloop.stores.files import sweep_expired_files
from hotloop.stores.pages import ItemPage, UsagePage
from hotloop.stores.retention import Background, DeletionHandler, GapHandler, Retention
from hotloop.stores.sqlite_containers import CONTAINER_SCHEMA, SQLiteContainers
from hotloop.stores.sqlite_conversations import CONVERSATION_SCHEMA, SQLiteConversations
from hotloop.stores.sqlite_files import FILE_SCHEMA, SQLiteFiles
from hotloop.stores.sqlite_skills import SKILL_SCHEMA, SQLiteSkills
from hotloop.stores.sqlite_vector_stores import VECTOR_STORE_SCHEMA, SQLiteVectorStores
from hotloop.wire.items import ContextItem
from hotloop.wire.response import Response, response_decoder

__all__ = ["SQLiteStore", "decode_item"]

T = TypeVar("T")
log = logging.getLogger("hotloop.store")
SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    parent TEXT,
    created_at INTEGER NOT NULL,
    body BLOB NOT NULL,
    size INTEGER NOT NULL DEFAULT 0  -- bytes counted against retention_max_bytes
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
CREATE INDEX IF NOT EXISTS responses_by_age ON responses (created_at);
-- The stored bytes (retention_max_bytes), kept in the same transaction as every save and delete.
CREATE TABLE IF NOT EXISTS stats (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
-- Recent deletions, polled by every process sharing this file so none keeps serving a deleted chain.
CREATE TABLE IF NOT EXISTS deletions (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL, at REAL NOT NULL);
"""
# `size` came with retention: an older file gets the column, its rows measured once.
MIGRATE_SIZE = """
ALTER TABLE responses ADD COLUMN size INTEGER NOT NULL DEFAULT 0;
UPDATE responses SET size = length(body)
    + COALESCE((SELECT SUM(length(i.body)) FROM items i WHERE i.response_id = responses.id), 0);
INSERT OR REPLACE INTO stats VALUES ('bytes', (SELECT COALESCE(SUM(size), 0) FROM responses));
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
DELETION_POLL_S = 0.5  # the shortest time between two looks at the deletions table
DELETIONS_KEPT_S = 300.0  # a process that looks less often than this misses deletions (it never does)
# With inotify (Linux), a look follows a deletion's announcement; this is the longest wait for one regardless (the
# deletions table's pruning is due then anyway), in case an announcement went unseen.
DELETION_CHECK_S = DELETIONS_KEPT_S / 10
ANNOUNCE_SUFFIX = "-deletions"  # the file beside the database a deleting process writes to, after its commit
WRITE_BATCH = 256  # writes committed together at most (the queue's backlog under load)
# A write: its work on the writer's connection, and where its result goes (the awaiting loop and future).
_Job = tuple[Callable[[sqlite3.Connection], Any], tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]"]]
_Outcome = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Any, BaseException | None]


def _item_rows(response_id: str, kind: int, rows: list[ItemRow]) -> list[tuple[Any, ...]]:
    return [(response_id, kind, pos, row.item_id, row.type, row.body) for pos, row in enumerate(rows)]


def _remove(conn: sqlite3.Connection, ids: list[str]) -> None:
    """Delete responses (known to exist) with their items; count their bytes out and record the deletions."""
    for response_id in ids:
        size = conn.execute("DELETE FROM responses WHERE id = ? RETURNING size", (response_id,)).fetchone()
        conn.execute("DELETE FROM items WHERE response_id = ?", (response_id,))
        conn.execute("UPDATE stats SET value = value - ? WHERE name = 'bytes'", (size[0] if size else 0,))
        conn.execute("INSERT INTO deletions (id, at) VALUES (?, ?)", (response_id, time.time()))


def _deletions_after(seq: int, conn: sqlite3.Connection) -> list[tuple[int, str]]:
    return [
        (row[0], row[1]) for row in conn.execute("SELECT seq, id FROM deletions WHERE seq > ? ORDER BY seq", (seq,))
    ]


def _prune_deletions(before: float, conn: sqlite3.Connection) -> None:
    conn.execute("DELETE FROM deletions WHERE at < ?", (before,))


WAL_WAIT_S = 10.0  # how long opening waits for another process switching a new database to WAL


def _wal(conn: sqlite3.Connection) -> None:
    """WAL mode. Worker processes that open a new database at once (`--workers N`) contend for switching it, and
    SQLite answers that contention with `database is locked` at once, without its busy timeout: try again."""
    deadline = time.monotonic() + WAL_WAIT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class SQLiteStore(SQLiteConversations, SQLiteFiles, SQLiteVectorStores, SQLiteContainers, SQLiteSkills):
    def __init__(self, path: Path, retention: Retention | None = None) -> None:
        self._path = path
        self._announcements = path.with_name(path.name + ANNOUNCE_SUFFIX)
        self.retention = retention or Retention()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._writes: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._local = threading.local()
        self._background = Background()
        writer = self._connect()
        writer.executescript(SCHEMA)
        writer.executescript(USAGE_SCHEMA)
        writer.executescript(CONVERSATION_SCHEMA)
        writer.executescript(FILE_SCHEMA)
        writer.executescript(VECTOR_STORE_SCHEMA)
        writer.executescript(CONTAINER_SCHEMA)
        writer.executescript(SKILL_SCHEMA)
        if "size" not in {row[1] for row in writer.execute("PRAGMA table_info(responses)")}:
            writer.executescript(f"BEGIN IMMEDIATE; {MIGRATE_SIZE} COMMIT;")
        writer.execute("INSERT OR IGNORE INTO stats VALUES ('bytes', 0)")
        self._writer = threading.Thread(target=self._write_loop, args=(writer,), name="hotloop-sqlite", daemon=True)
        self._writer.start()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None, timeout=30)
        _wal(conn)
        # NORMAL is durable against process crashes in WAL mode (only an OS crash may drop the last commits).
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _write_loop(self, conn: sqlite3.Connection) -> None:
        """Group commit: the writes waiting in the queue run in one transaction, settled after its COMMIT.

        Under load the event loop holds the GIL most of the time and every statement hands it back and forth, so
        a transaction and a wake-up per save queued the saves behind each other (`store: true` added ~10 ms a turn
        at 50 sessions); one BEGIN/COMMIT and one wake-up of the event loop per batch spread that over the batch.
        A batch that fails runs again job by job, so one bad write fails alone."""
        closing = False
        while not closing and (job := self._writes.get()) is not None:
            batch = [job]
            while len(batch) < WRITE_BATCH:
                try:
                    more = self._writes.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    closing = True
                    break
                batch.append(more)
            outcomes = _run_batch(conn, batch)
            if outcomes is None:
                outcomes = [outcome for one in batch for outcome in _run_batch(conn, [one]) or ()]
            by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
            for outcome in outcomes:
                by_loop.setdefault(outcome[0], []).append(outcome)
            for loop, settled in by_loop.items():
                loop.call_soon_threadsafe(_settle_all, settled)
        conn.close()

    def _announce(self) -> None:
        """Tell the processes sharing the file that the deletions table grew (they watch this file): a one-byte
        write to a file in the page cache, after the deletion's commit, so whoever wakes finds its row."""
        try:
            self._announcements.write_bytes(b"1")
        except OSError as exc:  # they still look every DELETION_CHECK_S
            log.warning("could not announce a deletion (%s): other processes see it within %gs", exc, DELETION_CHECK_S)

    def _file_stamp(self) -> tuple[tuple[int, int], ...]:
        """Size and modification time of the database and its WAL: they change with every commit, any process's."""
        stamps = []
        for path in (self._path, self._path.with_name(self._path.name + "-wal")):
            try:
                found = path.stat()
                stamps.append((found.st_size, found.st_mtime_ns))
            except OSError:
                stamps.append((-1, -1))
        return tuple(stamps)

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
            try:
                return work(conn)
            except sqlite3.OperationalError as exc:
                raise _unavailable(exc) from exc

        return await asyncio.to_thread(run)

    async def ensure_available(self) -> None:
        """A local file: nothing to probe (a locked or unwritable file still fails its call with a 503)."""

    async def ping(self) -> None:
        await self._read(lambda conn: conn.execute("SELECT 1").fetchone())

    def start(self, on_deleted: DeletionHandler, on_gap: GapHandler) -> None:
        # never calls on_gap: the deletions table is read by sequence number, so no deletion is missed
        self._background.start(self, self.retention, self._poll_deletions(on_deleted))
        self._background.spawn(sweep_expired_files(self), "hotloop-file-expiry")

    async def _poll_deletions(self, on_deleted: DeletionHandler) -> None:
        def latest(conn: sqlite3.Connection) -> int:
            return int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM deletions").fetchone()[0])

        # The watch first, then where the table stands: every deletion after that reading is announced to the watch
        # (the other order could leave one unseen until DELETION_CHECK_S).
        changes = FileChanges.open(self._path.parent, [self._announcements.name])
        try:
            seen = await self._read(latest)
            pruned_at = looked_at = time.monotonic()
            stamp = self._file_stamp()
            while True:
                # At most two looks a second, however often responses are deleted; with inotify, none while none is.
                await asyncio.sleep(max(0.0, looked_at + DELETION_POLL_S - time.monotonic()))
                announced = changes is not None and await changes.wait(DELETION_CHECK_S)
                looked_at = time.monotonic()
                # Polling: nothing was committed since the last look (no process wrote to the files), so nothing to
                # read; a stat on the event loop instead of a query on a thread.
                now = self._file_stamp()
                prune = looked_at - pruned_at >= DELETION_CHECK_S
                if not announced and now == stamp and not prune:
                    continue
                stamp = now
                try:
                    for seq, response_id in await self._read(functools.partial(_deletions_after, seen)):
                        seen = seq
                        on_deleted(response_id)
                    if prune:
                        pruned_at = looked_at
                        await self._write(functools.partial(_prune_deletions, time.time() - DELETIONS_KEPT_S))
                except StoreUnavailable as exc:  # a busy file: the next look picks up from `seen`
                    log.warning("polling deletions failed: %s", exc)
        finally:
            if changes is not None:
                changes.close()

    async def save(self, owner: str, response: Response, input_items: list[ContextItem]) -> None:
        enc = encode_response(response, input_items)
        rows = _item_rows(response.id, 0, enc.inputs) + _item_rows(response.id, 1, enc.outputs)

        def work(conn: sqlite3.Connection) -> None:
            old = conn.execute("SELECT size FROM responses WHERE id = ?", (response.id,)).fetchone()
            conn.execute(
                "INSERT OR REPLACE INTO responses (id, owner, parent, created_at, body, size)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (response.id, owner, response.previous_response_id, response.created_at, enc.body, enc.size),
            )
            conn.execute("DELETE FROM items WHERE response_id = ?", (response.id,))
            conn.executemany("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?)", rows)
            growth = enc.size - (old[0] if old else 0)
            conn.execute("UPDATE stats SET value = value + ? WHERE name = 'bytes'", (growth,))

        await self._write(work)

    async def get(self, owner: str, response_id: str) -> Response | None:
        def work(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute("SELECT body FROM responses WHERE id = ? AND owner = ?", (response_id, owner)).fetchone()
            return row[0] if row else None

        body = await self._read(work)
        return response_decoder.decode(body) if body is not None else None

    async def delete(self, owner: str, response_id: str) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            found = conn.execute("SELECT 1 FROM responses WHERE id = ? AND owner = ?", (response_id, owner)).fetchone()
            if found:
                _remove(conn, [response_id])
            return found is not None

        return await self._removed(work)

    async def expire(self, before: int, limit: int) -> list[str]:
        def work(conn: sqlite3.Connection) -> list[str]:
            ids = [
                row[0]
                for row in conn.execute(
                    "SELECT id FROM responses WHERE created_at < ? ORDER BY created_at, rowid LIMIT ?", (before, limit)
                )
            ]
            _remove(conn, ids)
            return ids

        return await self._removed(work)

    async def trim(self, max_bytes: int, limit: int) -> list[str]:
        def work(conn: sqlite3.Connection) -> list[str]:
            excess = conn.execute("SELECT value FROM stats WHERE name = 'bytes'").fetchone()[0] - max_bytes
            ids: list[str] = []
            if excess > 0:
                for response_id, size in conn.execute(
                    "SELECT id, size FROM responses ORDER BY created_at, rowid LIMIT ?", (limit,)
                ).fetchall():
                    if excess <= 0:
                        break
                    ids.append(response_id)
                    excess -= size
            _remove(conn, ids)
            return ids

        return await self._removed(work)

    async def _removed(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """A write that deletes responses (what it answers is truthy when it deleted any), announced once committed."""
        if removed := await self._write(work):
            self._announce()
        return removed

    async def stored_bytes(self) -> int:
        return int(
            await self._read(lambda conn: conn.execute("SELECT value FROM stats WHERE name = 'bytes'").fetchone()[0])
        )

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
        return chain_from_rows(item_rows, head[3], parent=1, type_=2, body=3)

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
                encode(rec.timings),
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
        records = [usage_record(row) for row in rows[:limit]]
        return UsagePage(records=records, has_more=len(rows) > limit, totals=UsageTotals(*totals))

    async def close(self) -> None:
        await self._background.stop()
        self._writes.put(None)
        await asyncio.to_thread(self._writer.join, 10)


def _unavailable(exc: BaseException) -> BaseException:
    """A locked or unwritable database file is the store being unavailable (503), not a server bug."""
    if isinstance(exc, sqlite3.OperationalError):
        return StoreUnavailable(f"The response store is unavailable: {exc}.")
    return exc


def _run_batch(conn: sqlite3.Connection, batch: list[_Job]) -> list[_Outcome] | None:
    """Run `batch` in one transaction: each job's outcome, or None when a batch of several failed (nothing kept)."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        results = [work(conn) for work, _ in batch]
        conn.execute("COMMIT")
    except BaseException as exc:  # handed to the awaiting coroutine
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # the writer thread must outlive a failed rollback too
                conn.execute("ROLLBACK")
        if len(batch) > 1:
            return None
        return [(*batch[0][1], None, _unavailable(exc))]
    return [(*target, result, None) for (_, target), result in zip(batch, results, strict=True)]


def _settle_all(outcomes: list[_Outcome]) -> None:
    for _, future, result, error in outcomes:
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
