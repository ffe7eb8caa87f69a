"""The Conversations API's half of the SQLite store, on the store's own connections: writes on its one writer
thread (so positions are allocated one append at a time), reads on its reader threads."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, TypeVar

from hotloop.stores.codec import ItemRow, decode_item
from hotloop.stores.conversation_codec import (
    conversation_of,
    duplicate_item,
    encode_metadata,
    page_of,
    unique_rows,
)
from hotloop.stores.pages import ItemPage
from hotloop.wire.conversations import Conversation
from hotloop.wire.items import ContextItem

T = TypeVar("T")
CONVERSATION_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    metadata BLOB NOT NULL,
    next_position INTEGER NOT NULL DEFAULT 0  -- positions are never reused, even after a delete
);
CREATE TABLE IF NOT EXISTS conversation_items (
    conversation_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    item_id TEXT,
    type TEXT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (conversation_id, position)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS conversation_items_by_id ON conversation_items (conversation_id, item_id);
"""
_OWNED = "SELECT 1 FROM conversations WHERE id = ? AND owner = ?"
# ?1 conversation, ?2 `after` (NULL: from the start; unknown: the comparison is NULL, an empty page), ?3 rows.
_PAGE = """
SELECT type, body FROM conversation_items WHERE conversation_id = ?1
AND (?2 IS NULL OR position {op} (SELECT position FROM conversation_items WHERE conversation_id = ?1 AND item_id = ?2))
ORDER BY position {direction} LIMIT ?3
"""
_PAGES = {"asc": _PAGE.format(op=">", direction="ASC"), "desc": _PAGE.format(op="<", direction="DESC")}
# No row: not this owner's conversation; one row with a NULL type: it has no items.
_LOAD = """
SELECT i.type, i.body FROM conversations c LEFT JOIN conversation_items i ON i.conversation_id = c.id
WHERE c.id = ? AND c.owner = ? ORDER BY i.position
"""


def _owned(conn: sqlite3.Connection, owner: str, conversation_id: str) -> bool:
    return conn.execute(_OWNED, (conversation_id, owner)).fetchone() is not None


def _append(conn: sqlite3.Connection, conversation_id: str, rows: list[ItemRow]) -> None:
    """Inside the writer's transaction: no id already there, then the next positions, then the rows."""
    ids = [row.item_id for row in rows if row.item_id is not None]
    if ids:
        marks = ", ".join("?" * len(ids))
        taken = conn.execute(
            f"SELECT item_id FROM conversation_items WHERE conversation_id = ? AND item_id IN ({marks}) LIMIT 1",
            (conversation_id, *ids),
        ).fetchone()
        if taken is not None:
            raise duplicate_item(taken[0])  # the writer rolls back: nothing of this call is stored
    base = conn.execute(
        "UPDATE conversations SET next_position = next_position + ?1 WHERE id = ?2 RETURNING next_position - ?1",
        (len(rows), conversation_id),
    ).fetchone()[0]
    conn.executemany(
        "INSERT INTO conversation_items VALUES (?, ?, ?, ?, ?)",
        [(conversation_id, base + k, row.item_id, row.type, row.body) for k, row in enumerate(rows)],
    )


class SQLiteConversations:
    """`ConversationStore` for `SQLiteStore`, which provides `_read` and `_write`."""

    if TYPE_CHECKING:

        async def _read(self, work: Callable[[sqlite3.Connection], T]) -> T: ...

        async def _write(self, work: Callable[[sqlite3.Connection], T]) -> T: ...

    async def create_conversation(self, owner: str, conversation: Conversation, items: list[ContextItem]) -> None:
        rows = unique_rows(items)
        metadata = encode_metadata(conversation.metadata)

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO conversations (id, owner, created_at, metadata) VALUES (?, ?, ?, ?)",
                (conversation.id, owner, conversation.created_at, metadata),
            )
            _append(conn, conversation.id, rows)

        await self._write(work)

    async def get_conversation(self, owner: str, conversation_id: str) -> Conversation | None:
        def work(conn: sqlite3.Connection) -> tuple[int, bytes] | None:
            row = conn.execute(
                "SELECT created_at, metadata FROM conversations WHERE id = ? AND owner = ?", (conversation_id, owner)
            ).fetchone()
            return (row[0], row[1]) if row else None

        row = await self._read(work)
        return conversation_of(conversation_id, *row) if row else None

    async def update_conversation(
        self, owner: str, conversation_id: str, metadata: dict[str, str]
    ) -> Conversation | None:
        blob = encode_metadata(metadata)

        def work(conn: sqlite3.Connection) -> int | None:
            row = conn.execute(
                "UPDATE conversations SET metadata = ? WHERE id = ? AND owner = ? RETURNING created_at",
                (blob, conversation_id, owner),
            ).fetchone()
            return int(row[0]) if row else None

        created_at = await self._write(work)
        return conversation_of(conversation_id, created_at, blob) if created_at is not None else None

    async def delete_conversation(self, owner: str, conversation_id: str) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            if not _owned(conn, owner, conversation_id):
                return False
            conn.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
            conn.execute("DELETE FROM conversation_items WHERE conversation_id = ?", (conversation_id,))
            return True

        return await self._write(work)

    async def add_conversation_items(self, owner: str, conversation_id: str, items: list[ContextItem]) -> bool:
        rows = unique_rows(items)

        def work(conn: sqlite3.Connection) -> bool:
            if not _owned(conn, owner, conversation_id):
                return False
            _append(conn, conversation_id, rows)
            return True

        return await self._write(work)

    async def conversation_items(
        self, owner: str, conversation_id: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> ItemPage | None:
        def work(conn: sqlite3.Connection) -> list[tuple[str, bytes]] | None:
            if not _owned(conn, owner, conversation_id):
                return None
            rows = conn.execute(_PAGES[order], (conversation_id, after, limit + 1)).fetchall()
            return [(row[0], row[1]) for row in rows]

        rows = await self._read(work)
        return page_of(rows, limit) if rows is not None else None

    async def conversation_item(self, owner: str, conversation_id: str, item_id: str) -> ContextItem | None:
        def work(conn: sqlite3.Connection) -> tuple[str, bytes] | None:
            row = conn.execute(
                "SELECT i.type, i.body FROM conversation_items i JOIN conversations c ON c.id = i.conversation_id"
                " WHERE c.id = ? AND c.owner = ? AND i.item_id = ?",
                (conversation_id, owner, item_id),
            ).fetchone()
            return (row[0], row[1]) if row else None

        row = await self._read(work)
        return decode_item(*row) if row else None

    async def delete_conversation_item(self, owner: str, conversation_id: str, item_id: str) -> bool | None:
        def work(conn: sqlite3.Connection) -> bool | None:
            if not _owned(conn, owner, conversation_id):
                return None
            gone = conn.execute(
                "DELETE FROM conversation_items WHERE conversation_id = ? AND item_id = ? RETURNING 1",
                (conversation_id, item_id),
            ).fetchone()
            return gone is not None

        return await self._write(work)

    async def load_conversation(self, owner: str, conversation_id: str) -> list[ContextItem] | None:
        def work(conn: sqlite3.Connection) -> list[tuple[str | None, bytes | None]]:
            return [(row[0], row[1]) for row in conn.execute(_LOAD, (conversation_id, owner))]

        rows = await self._read(work)
        if not rows:
            return None
        return [decode_item(type_name, body) for type_name, body in rows if type_name is not None and body is not None]
