"""The SQL of the PostgreSQL store, every table qualified with the URL's schema (`{s}`, a checked identifier)."""

from __future__ import annotations

SCHEMA = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.responses (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    parent TEXT,
    created_at BIGINT NOT NULL,
    seq BIGSERIAL,
    size BIGINT NOT NULL,
    body BYTEA NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_by_age ON {s}.responses (created_at, seq);
CREATE TABLE IF NOT EXISTS {s}.items (
    response_id TEXT NOT NULL REFERENCES {s}.responses (id) ON DELETE CASCADE,
    kind SMALLINT NOT NULL,  -- 0: input, 1: output
    position INTEGER NOT NULL,
    item_id TEXT,
    type TEXT NOT NULL,
    body BYTEA NOT NULL,
    PRIMARY KEY (response_id, kind, position)
);
CREATE INDEX IF NOT EXISTS items_by_item_id ON {s}.items (item_id);
-- The stored bytes, in shards so concurrent saves do not queue on one row; the total is their sum.
CREATE TABLE IF NOT EXISTS {s}.stored_bytes (shard SMALLINT PRIMARY KEY, bytes BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.usage (
    response_id TEXT PRIMARY KEY,
    seq BIGSERIAL,
    owner TEXT NOT NULL,
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    input_tokens BIGINT NOT NULL,
    cached_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    transport TEXT NOT NULL,
    timings BYTEA NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_by_owner ON {s}.usage (owner, created_at, seq);
CREATE TABLE IF NOT EXISTS {s}.conversations (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    metadata BYTEA NOT NULL,
    next_position INTEGER NOT NULL DEFAULT 0  -- positions are never reused, even after a delete
);
CREATE TABLE IF NOT EXISTS {s}.conversation_items (
    conversation_id TEXT NOT NULL REFERENCES {s}.conversations (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    item_id TEXT,
    type TEXT NOT NULL,
    body BYTEA NOT NULL,
    PRIMARY KEY (conversation_id, position)
);
CREATE UNIQUE INDEX IF NOT EXISTS conversation_items_by_id ON {s}.conversation_items (conversation_id, item_id);
CREATE TABLE IF NOT EXISTS {s}.files (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    purpose TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT,
    body BYTEA NOT NULL
);
CREATE INDEX IF NOT EXISTS files_by_owner ON {s}.files (owner, created_at, id);
CREATE INDEX IF NOT EXISTS files_by_expiry ON {s}.files (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS {s}.file_chunks (
    file_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (file_id, seq)
);
"""

# Saves of one id queue here, so each reads the size the previous one left (a row lock cannot cover a new id).
SAVE_LOCK = "SELECT pg_advisory_xact_lock(hashtext('hotloop-save:' || $1))"
# $1 id; the size the response had before (NULL: new).
UPSERT = """
WITH old AS (SELECT size FROM {s}.responses WHERE id = $1)
INSERT INTO {s}.responses (id, owner, parent, created_at, size, body) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, parent = excluded.parent, created_at = excluded.created_at,
    size = excluded.size, body = excluded.body
RETURNING (SELECT size FROM old)
"""
DELETE_ITEMS = "DELETE FROM {s}.items WHERE response_id = $1"
# The items of one response and the byte count, in one statement.
INSERT_ITEMS = """
WITH added AS (
    INSERT INTO {s}.items (response_id, kind, position, item_id, type, body)
    SELECT $1::text, * FROM unnest($2::smallint[], $3::integer[], $4::text[], $5::text[], $6::bytea[])
)
INSERT INTO {s}.stored_bytes (shard, bytes) VALUES ($7, $8)
ON CONFLICT (shard) DO UPDATE SET bytes = {s}.stored_bytes.bytes + excluded.bytes
"""
# Deleting responses: their items go by cascade, their bytes are counted out, and every replica is told
# (pg_notify is delivered when the transaction commits). `victims` selects the ids with $1 and $2; $3 is the
# byte-counter shard, $4 the notification channel.
_REMOVE = """
, gone AS (DELETE FROM {s}.responses r USING victims v WHERE r.id = v.id RETURNING r.id, r.size)
, counted AS (
    INSERT INTO {s}.stored_bytes (shard, bytes) SELECT $3::smallint, -COALESCE(SUM(size), 0)::bigint FROM gone
    ON CONFLICT (shard) DO UPDATE SET bytes = {s}.stored_bytes.bytes + excluded.bytes
)
SELECT id, pg_notify($4::text, id) FROM gone
"""
DELETE = "WITH victims AS (SELECT id FROM {s}.responses WHERE id = $1 AND owner = $2)" + _REMOVE
EXPIRE = (
    "WITH victims AS (SELECT id FROM {s}.responses WHERE created_at < $1 ORDER BY created_at, seq LIMIT $2"
    " FOR UPDATE SKIP LOCKED)" + _REMOVE
)
# $1 bytes over budget, $2 most to delete: the oldest responses whose sizes add up to the excess.
TRIM = (
    """WITH oldest AS (
    SELECT id, size, created_at, seq FROM {s}.responses ORDER BY created_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED
), victims AS (
    SELECT id FROM (SELECT id, size, SUM(size) OVER (ORDER BY created_at, seq) AS running FROM oldest) w
    WHERE running - size < $1::bigint
)"""
    + _REMOVE
)
TOTAL_BYTES = "SELECT COALESCE(SUM(bytes), 0)::bigint FROM {s}.stored_bytes"
# Only one replica trims at a time, so two do not each delete the same excess.
TRIM_LOCK = "SELECT pg_try_advisory_xact_lock(hashtext('hotloop-trim:' || $1))"
SCHEMA_LOCK = "SELECT pg_advisory_xact_lock(hashtext('hotloop-schema:' || $1))"

GET = "SELECT body FROM {s}.responses WHERE id = $1 AND owner = $2"
# One statement: the chain walked by a recursive CTE, each response's items, and the head's own body last.
CHAIN = """
WITH RECURSIVE chain(id, parent, depth) AS (
    SELECT id, parent, 0 FROM {s}.responses WHERE id = $1 AND owner = $2
    UNION ALL
    SELECT r.id, r.parent, c.depth + 1 FROM {s}.responses r JOIN chain c ON r.id = c.parent
    WHERE r.owner = $2 AND c.depth < $3
)
SELECT c.depth, c.parent, i.kind, i.position, i.type, i.body FROM chain c LEFT JOIN {s}.items i ON i.response_id = c.id
UNION ALL
SELECT -1, NULL, NULL, NULL, 'head', body FROM {s}.responses WHERE id = $1 AND owner = $2
ORDER BY 1 DESC, 3, 4
"""
# No row: the response is unknown to the owner; one row with a NULL type: it has no input items.
INPUT_ITEMS = """
SELECT i.item_id, i.type, i.body FROM {s}.responses r
LEFT JOIN {s}.items i ON i.response_id = r.id AND i.kind = 0
WHERE r.id = $1 AND r.owner = $2 ORDER BY i.position
"""
FIND_ITEM = """
SELECT i.type, i.body FROM {s}.items i JOIN {s}.responses r ON r.id = i.response_id
WHERE i.item_id = $1 AND r.owner = $2 LIMIT 1
"""

USAGE_COLUMNS = (
    "response_id, owner, model, status, input_tokens, cached_tokens, output_tokens, created_at, transport, timings"
)
APPEND_USAGE = (
    "INSERT INTO {s}.usage (" + USAGE_COLUMNS + ") SELECT * FROM unnest($1::text[], $2::text[], $3::text[],"
    " $4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $8::float8[], $9::text[], $10::bytea[])"
    " ON CONFLICT (response_id) DO NOTHING"
)
USAGE_TOTALS = """
SELECT COUNT(*), COALESCE(SUM(input_tokens), 0)::bigint, COALESCE(SUM(cached_tokens), 0)::bigint,
    COALESCE(SUM(output_tokens), 0)::bigint
FROM {s}.usage WHERE owner = $1 AND ($2::text IS NULL OR model = $2)
"""
# An unknown `after` ($3) makes the row comparison NULL: an empty page.
USAGE_PAGE = (
    "SELECT " + USAGE_COLUMNS + " FROM {s}.usage WHERE owner = $1 AND ($2::text IS NULL OR model = $2)"
    " AND ($3::text IS NULL OR (created_at, seq) > (SELECT created_at, seq FROM {s}.usage"
    " WHERE response_id = $3 AND owner = $1)) ORDER BY created_at, seq LIMIT $4"
)

# -- conversations (stores/postgres_conversations.py) -----------------------------------------------------------
# Items as three arrays ($n item ids, $n+1 types, $n+2 bodies), numbered from the position the statement allocated.
_ITEMS = "unnest({ids}::text[], {types}::text[], {bodies}::bytea[]) WITH ORDINALITY AS t(item_id, type, body, ord)"
# $1 id, $2 owner, $3 created_at, $4 metadata, $5-$7 items: the conversation and its first items, one statement.
CREATE_CONVERSATION = """WITH conv AS (
    INSERT INTO {s}.conversations (id, owner, created_at, metadata, next_position)
    VALUES ($1, $2, $3, $4, cardinality($5::text[])) RETURNING id
)
INSERT INTO {s}.conversation_items (conversation_id, position, item_id, type, body)
SELECT conv.id, t.ord::integer - 1, t.item_id, t.type, t.body FROM conv, """ + _ITEMS.format(
    ids="$5", types="$6", bodies="$7"
)
# $1 id, $2 owner, $3-$5 items. The UPDATE allocates the positions and holds the conversation's row lock until
# commit, so concurrent appends queue and each reads the counter the previous one left. One row: it was there.
APPEND_CONVERSATION_ITEMS = (
    """WITH conv AS (
    UPDATE {s}.conversations SET next_position = next_position + cardinality($3::text[])
    WHERE id = $1 AND owner = $2 RETURNING next_position - cardinality($3::text[]) AS base
), added AS (
    INSERT INTO {s}.conversation_items (conversation_id, position, item_id, type, body)
    SELECT $1, conv.base + t.ord::integer - 1, t.item_id, t.type, t.body FROM conv, """
    + _ITEMS.format(ids="$3", types="$4", bodies="$5")
    + """
)
SELECT 1 FROM conv"""
)
GET_CONVERSATION = "SELECT created_at, metadata FROM {s}.conversations WHERE id = $1 AND owner = $2"
UPDATE_CONVERSATION = "UPDATE {s}.conversations SET metadata = $3 WHERE id = $1 AND owner = $2 RETURNING created_at"
DELETE_CONVERSATION = "DELETE FROM {s}.conversations WHERE id = $1 AND owner = $2 RETURNING 1"
# $1 id, $2 owner, $3 `after` (NULL: from the start; unknown: an empty page), $4 rows. No row: not the owner's
# conversation; one row with a NULL type: an empty page.
_PAGE = """
SELECT i.type, i.body FROM {s}.conversations c LEFT JOIN LATERAL (
    SELECT type, body, position FROM {s}.conversation_items WHERE conversation_id = c.id
    AND ($3::text IS NULL OR position {op} (
        SELECT position FROM {s}.conversation_items WHERE conversation_id = c.id AND item_id = $3))
    ORDER BY position {direction} LIMIT $4
) i ON true
WHERE c.id = $1 AND c.owner = $2 ORDER BY i.position {direction}
"""
CONVERSATION_ITEMS_ASC = _PAGE.replace("{op}", ">").replace("{direction}", "ASC")
CONVERSATION_ITEMS_DESC = _PAGE.replace("{op}", "<").replace("{direction}", "DESC")
CONVERSATION_ITEM = """
SELECT i.type, i.body FROM {s}.conversation_items i JOIN {s}.conversations c ON c.id = i.conversation_id
WHERE c.id = $1 AND c.owner = $2 AND i.item_id = $3
"""
# No row: not the owner's conversation; else how many items were deleted (0 or 1).
DELETE_CONVERSATION_ITEM = """
WITH conv AS (SELECT id FROM {s}.conversations WHERE id = $1 AND owner = $2),
gone AS (DELETE FROM {s}.conversation_items i USING conv WHERE i.conversation_id = conv.id AND i.item_id = $3
    RETURNING 1)
SELECT (SELECT COUNT(*) FROM gone) FROM conv
"""
# No row: not the owner's conversation; one row with a NULL type: no items.
LOAD_CONVERSATION = """
SELECT i.type, i.body FROM {s}.conversations c LEFT JOIN {s}.conversation_items i ON i.conversation_id = c.id
WHERE c.id = $1 AND c.owner = $2 ORDER BY i.position
"""

# -- the Files API (postgres_files.py) ---------------------------------------------------------------------------
_LIVE_FILE = "(expires_at IS NULL OR expires_at > extract(epoch FROM now())::bigint)"
INSERT_FILE_CHUNK = "INSERT INTO {s}.file_chunks VALUES ($1, $2, $3)"
INSERT_FILE = "INSERT INTO {s}.files VALUES ($1, $2, $3, $4, $5, $6)"
GET_FILE = "SELECT body FROM {s}.files WHERE id = $1 AND owner = $2 AND " + _LIVE_FILE
FILE_CHUNK = "SELECT data FROM {s}.file_chunks WHERE file_id = $1 AND seq = $2"
DELETE_FILE = """WITH gone AS (DELETE FROM {s}.files WHERE id = $1 AND owner = $2 RETURNING id),
chunks AS (DELETE FROM {s}.file_chunks WHERE file_id IN (SELECT id FROM gone))
SELECT 1 FROM gone"""
# $1 owner, $2 purpose (NULL: any), $3 `after` (NULL: from the start; unknown: an empty page), $4 rows.
_LIST_FILES = (
    "SELECT body FROM {{s}}.files WHERE owner = $1 AND ($2::text IS NULL OR purpose = $2) AND "
    + _LIVE_FILE
    + " AND ($3::text IS NULL OR (created_at, id) {op} "
    "(SELECT created_at, id FROM {{s}}.files WHERE id = $3 AND owner = $1)) "
    "ORDER BY created_at {direction}, id {direction} LIMIT $4"
)
LIST_FILES_ASC = _LIST_FILES.format(op=">", direction="ASC")
LIST_FILES_DESC = _LIST_FILES.format(op="<", direction="DESC")
EXPIRE_FILES = """WITH gone AS (DELETE FROM {s}.files WHERE id IN
    (SELECT id FROM {s}.files WHERE expires_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING id),
chunks AS (DELETE FROM {s}.file_chunks WHERE file_id IN (SELECT id FROM gone))
SELECT id FROM gone"""
