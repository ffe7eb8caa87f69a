"""The SQL of the PostgreSQL store's containers (postgres_containers.py), qualified with the URL's schema (`{s}`).
A container file's bytes are in `file_chunks`, keyed by its `blob`, as a Files API file's are."""

from __future__ import annotations

CONTAINER_SCHEMA = """
CREATE TABLE IF NOT EXISTS {s}.containers (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    last_active_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    body BYTEA NOT NULL
);
CREATE INDEX IF NOT EXISTS containers_by_owner ON {s}.containers (owner, created_at, id);
CREATE INDEX IF NOT EXISTS containers_by_expiry ON {s}.containers (expires_at);
CREATE TABLE IF NOT EXISTS {s}.container_files (
    id TEXT PRIMARY KEY,
    container_id TEXT NOT NULL,
    path TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    blob TEXT NOT NULL,
    body BYTEA NOT NULL,
    UNIQUE (container_id, path)
);
CREATE INDEX IF NOT EXISTS container_files_by_container ON {s}.container_files (container_id, created_at, id);
CREATE TABLE IF NOT EXISTS {s}.container_skills (
    container_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    blob TEXT NOT NULL,
    body BYTEA NOT NULL,
    PRIMARY KEY (container_id, position)
);
"""
# Creates by one owner queue here, so each counts the containers the previous one left.
C_OWNER_LOCK = "SELECT pg_advisory_xact_lock(hashtext('hotloop-containers:' || $1))"
C_COUNT = "SELECT COUNT(*) FROM {s}.containers WHERE owner = $1 AND expires_at > $2"
C_INSERT = "INSERT INTO {s}.containers VALUES ($1, $2, $3, $4, $5, $6, $7)"
C_GET = "SELECT body, last_active_at FROM {s}.containers WHERE id = $1 AND owner = $2 AND expires_at > $3"
# Held while a file's row is placed: the container's files are counted and placed one at a time.
C_HOLD = "SELECT 1 FROM {s}.containers WHERE id = $1 AND owner = $2 AND expires_at > $3 FOR UPDATE"
# $1 owner, $2 now, $3 name (NULL: any), $4 `after` (NULL: from the start; unknown: an empty page), $5 rows.
_LIST = (
    "SELECT body, last_active_at FROM {{s}}.containers WHERE owner = $1 AND expires_at > $2"
    " AND ($3::text IS NULL OR name = $3) AND ($4::text IS NULL OR (created_at, id) {op}"
    " (SELECT created_at, id FROM {{s}}.containers WHERE id = $4 AND owner = $1))"
    " ORDER BY created_at {direction}, id {direction} LIMIT $5"
)
C_LIST_ASC = _LIST.format(op=">", direction="ASC")
C_LIST_DESC = _LIST.format(op="<", direction="DESC")
C_DELETE = "DELETE FROM {s}.containers WHERE id = $1 AND owner = $2 AND expires_at > $3 RETURNING id"
C_EXPIRE = """DELETE FROM {s}.containers WHERE id IN
    (SELECT id FROM {s}.containers WHERE expires_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING id"""
# The files and skills of deleted containers ($1), with their bytes.
C_DROP_FILES = """WITH files AS (DELETE FROM {s}.container_files WHERE container_id = ANY($1::text[]) RETURNING blob),
skills AS (DELETE FROM {s}.container_skills WHERE container_id = ANY($1::text[]) RETURNING blob)
DELETE FROM {s}.file_chunks WHERE file_id IN (SELECT blob FROM files UNION ALL SELECT blob FROM skills)"""
CS_INSERT = "INSERT INTO {s}.container_skills VALUES ($1, $2, $3, $4)"
CS_LIST = """SELECT s.blob, s.body FROM {s}.container_skills s JOIN {s}.containers c ON c.id = s.container_id
WHERE s.container_id = $1 AND c.owner = $2 AND c.expires_at > $3 ORDER BY s.position"""
# The idle time (expires_at - last_active_at) is kept: it is the container's `expires_after.minutes`.
C_TOUCH = """UPDATE {s}.containers SET expires_at = $3 + (expires_at - last_active_at), last_active_at = $3
WHERE id = $1 AND owner = $2 AND expires_at > $3 RETURNING 1"""
C_LIVE = "SELECT id FROM {s}.containers WHERE id = ANY($1::text[]) AND expires_at > $2"

CF_AT = "SELECT body, blob FROM {s}.container_files WHERE container_id = $1 AND path = $2"
# $2 the directories above the path, $3 the path plus '/': a file there, or beneath.
CF_CLASH = """SELECT 1 FROM {s}.container_files WHERE container_id = $1
AND (path = ANY($2::text[]) OR left(path, length($3)) = $3) LIMIT 1"""
CF_COUNT = "SELECT COUNT(*) FROM {s}.container_files WHERE container_id = $1"
CF_INSERT = "INSERT INTO {s}.container_files VALUES ($1, $2, $3, $4, $5, $6)"
CF_REPLACE = "UPDATE {s}.container_files SET blob = $2, body = $3 WHERE id = $1"
# One chunk of a Files API file ($1) copied under a container file's blob ($2), a statement each (a large file's
# copy is no one statement that could outlast the command timeout); no row: past its last chunk.
CF_COPY_CHUNK = """INSERT INTO {s}.file_chunks SELECT $2, seq, data FROM {s}.file_chunks WHERE file_id = $1 AND seq = $3
RETURNING length(data)"""
CF_SOURCE = "SELECT 1 FROM {s}.files WHERE id = $1 AND owner = $2"
CF_GET = """SELECT f.body, f.blob FROM {s}.container_files f JOIN {s}.containers c ON c.id = f.container_id
WHERE f.id = $1 AND f.container_id = $2 AND c.owner = $3 AND c.expires_at > $4"""
_FILES = (
    "SELECT body FROM {{s}}.container_files WHERE container_id = $1 AND ($2::text IS NULL OR (created_at, id) {op}"
    " (SELECT created_at, id FROM {{s}}.container_files WHERE id = $2 AND container_id = $1))"
    " ORDER BY created_at {direction}, id {direction} LIMIT $3"
)
CF_LIST_ASC = _FILES.format(op=">", direction="ASC")
CF_LIST_DESC = _FILES.format(op="<", direction="DESC")
CF_DELETE = "DELETE FROM {s}.container_files WHERE id = $1 AND container_id = $2 RETURNING blob"
DELETE_CHUNKS = "DELETE FROM {s}.file_chunks WHERE file_id = $1"
