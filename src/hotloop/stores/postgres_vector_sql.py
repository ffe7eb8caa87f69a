"""The SQL of the PostgreSQL store's vector stores (postgres_vector_stores.py), qualified with the URL's schema
(`{s}`). Chunks keep their text, vector and terms; each replica reads a store's vectors and terms into its search
index (pipeline/filesearch/index.py)."""

from __future__ import annotations

VECTOR_SCHEMA = """
CREATE TABLE IF NOT EXISTS {s}.vector_stores (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    version BIGINT NOT NULL DEFAULT 0,
    body BYTEA NOT NULL
);
CREATE INDEX IF NOT EXISTS vector_stores_by_owner ON {s}.vector_stores (owner, created_at, id);
CREATE TABLE IF NOT EXISTS {s}.vector_store_files (
    vector_store_id TEXT NOT NULL,
    file_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    status TEXT NOT NULL,
    batch_id TEXT,
    lease TEXT,
    lease_until DOUBLE PRECISION NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    usage_bytes BIGINT NOT NULL DEFAULT 0,
    model TEXT NOT NULL DEFAULT '',
    body BYTEA NOT NULL,
    PRIMARY KEY (vector_store_id, file_id)
);
CREATE INDEX IF NOT EXISTS vector_store_files_pending ON {s}.vector_store_files (lease_until)
    WHERE status = 'in_progress';
CREATE INDEX IF NOT EXISTS vector_store_files_by_file ON {s}.vector_store_files (file_id);
CREATE INDEX IF NOT EXISTS vector_store_files_by_batch ON {s}.vector_store_files (batch_id)
    WHERE batch_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS {s}.vector_store_batches (
    id TEXT PRIMARY KEY,
    vector_store_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    cancelled BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE TABLE IF NOT EXISTS {s}.vector_store_chunks (
    id BIGSERIAL PRIMARY KEY,
    vector_store_id TEXT NOT NULL,
    file_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    start_at INTEGER NOT NULL,
    end_at INTEGER NOT NULL,
    text TEXT NOT NULL,
    vector BYTEA NOT NULL,
    terms BYTEA NOT NULL
);
-- Ingestion writes every chunk once: no pglz over vectors and hashed terms (incompressible: it tries, fails, and
-- costs the ingest ~a fifth of its time), lz4 for the text (several times faster than pglz).
-- Once (a replica starting later takes no lock for it).
DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '{s}.vector_store_chunks'::regclass
               AND attname = 'vector' AND attstorage <> 'e') THEN
        ALTER TABLE {s}.vector_store_chunks ALTER COLUMN vector SET STORAGE EXTERNAL,
            ALTER COLUMN terms SET STORAGE EXTERNAL, ALTER COLUMN text SET COMPRESSION lz4;
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS vector_store_chunks_by_file ON {s}.vector_store_chunks (vector_store_id, file_id, seq);
"""
VS_OWNED = "SELECT body FROM {s}.vector_stores WHERE id = $1 AND owner = $2"
VS_PUT = """INSERT INTO {s}.vector_stores (id, owner, created_at, body) VALUES ($1, $2, $3, $4)
ON CONFLICT (id) DO UPDATE SET body = excluded.body WHERE {s}.vector_stores.owner = excluded.owner"""
VS_SET_BODY = "UPDATE {s}.vector_stores SET body = $2 WHERE id = $1"
VS_BUMP = "UPDATE {s}.vector_stores SET version = version + 1 WHERE id = $1"
VS_DELETE = "DELETE FROM {s}.vector_stores WHERE id = $1 AND owner = $2 RETURNING 1"
VS_DELETE_REST = """WITH f AS (DELETE FROM {s}.vector_store_files WHERE vector_store_id = $1),
b AS (DELETE FROM {s}.vector_store_batches WHERE vector_store_id = $1)
DELETE FROM {s}.vector_store_chunks WHERE vector_store_id = $1"""
VS_COUNTS = "SELECT status, COUNT(*) FROM {s}.vector_store_files WHERE vector_store_id = $1 GROUP BY status"
VS_USAGE = """SELECT COALESCE(SUM(usage_bytes), 0) FROM {s}.vector_store_files
WHERE vector_store_id = $1 AND status = 'completed'"""
_VS_PAGE = (
    "SELECT body FROM {{s}}.vector_stores WHERE owner = $1 AND ($2::text IS NULL OR (created_at, id) {op} "
    "(SELECT created_at, id FROM {{s}}.vector_stores WHERE id = $2 AND owner = $1)) "
    "ORDER BY created_at {direction}, id {direction} LIMIT $3"
)
VS_PAGE_ASC = _VS_PAGE.format(op=">", direction="ASC")
VS_PAGE_DESC = _VS_PAGE.format(op="<", direction="DESC")
VS_VERSION = "SELECT version FROM {s}.vector_stores WHERE id = $1"

VSF_STATUS = "SELECT status FROM {s}.vector_store_files WHERE vector_store_id = $1 AND file_id = $2"
VSF_UPSERT = """INSERT INTO {s}.vector_store_files
(vector_store_id, file_id, owner, created_at, status, batch_id, body) VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (vector_store_id, file_id) DO UPDATE SET owner = excluded.owner, created_at = excluded.created_at,
status = excluded.status, batch_id = excluded.batch_id, body = excluded.body, lease = NULL, lease_until = 0,
attempts = 0, usage_bytes = 0"""
VSF_GET = "SELECT body FROM {s}.vector_store_files WHERE vector_store_id = $1 AND file_id = $2 AND owner = $3"
VSF_SET = """UPDATE {s}.vector_store_files SET status = $3, body = $4, usage_bytes = $5
WHERE vector_store_id = $1 AND file_id = $2"""
VSF_DELETE = """DELETE FROM {s}.vector_store_files WHERE vector_store_id = $1 AND file_id = $2 AND owner = $3
RETURNING 1"""
VSF_REMOVE_FILE = "DELETE FROM {s}.vector_store_files WHERE file_id = $1 RETURNING vector_store_id"
_VSF_PAGE = (
    "SELECT body FROM {{s}}.vector_store_files WHERE vector_store_id = $1 AND owner = $2 "
    "AND ($3::text IS NULL OR status = $3) AND ($4::text IS NULL OR batch_id = $4) "
    "AND ($5::text IS NULL OR (created_at, file_id) {op} "
    "(SELECT created_at, file_id FROM {{s}}.vector_store_files WHERE vector_store_id = $1 AND file_id = $5)) "
    "ORDER BY created_at {direction}, file_id {direction} LIMIT $6"
)
VSF_PAGE_ASC = _VSF_PAGE.format(op=">", direction="ASC")
VSF_PAGE_DESC = _VSF_PAGE.format(op="<", direction="DESC")
VSF_HELD = """SELECT body FROM {s}.vector_store_files WHERE vector_store_id = $1 AND file_id = $2
AND status = 'in_progress' AND lease = $3 FOR UPDATE"""
VSF_IN_PROGRESS = """SELECT 1 FROM {s}.vector_store_files WHERE vector_store_id = $1 AND file_id = $2
AND status = 'in_progress'"""
VSF_CLAIMABLE = """SELECT vector_store_id, file_id, owner, attempts, body FROM {s}.vector_store_files
WHERE status = 'in_progress' AND lease_until < $1 ORDER BY lease_until, created_at LIMIT 1 FOR UPDATE SKIP LOCKED"""
VSF_LEASE = """UPDATE {s}.vector_store_files SET lease = $3, lease_until = $4, attempts = attempts + 1
WHERE vector_store_id = $1 AND file_id = $2"""
VSF_RENEW = """UPDATE {s}.vector_store_files SET lease_until = $4 WHERE vector_store_id = $1 AND file_id = $2
AND status = 'in_progress' AND lease = $3 RETURNING 1"""
VSF_MODEL = "UPDATE {s}.vector_store_files SET model = $3 WHERE vector_store_id = $1 AND file_id = $2"
VSF_COMPLETED = """SELECT v.file_id, f.body, v.body, v.lease, v.model FROM {s}.vector_store_files v
JOIN {s}.files f ON f.id = v.file_id WHERE v.vector_store_id = $1 AND v.status = 'completed'"""

VSB_INSERT = "INSERT INTO {s}.vector_store_batches (id, vector_store_id, owner, created_at) VALUES ($1, $2, $3, $4)"
VSB_GET = """SELECT created_at, cancelled FROM {s}.vector_store_batches
WHERE id = $1 AND vector_store_id = $2 AND owner = $3"""
VSB_CANCEL = """UPDATE {s}.vector_store_batches SET cancelled = TRUE
WHERE id = $1 AND vector_store_id = $2 AND owner = $3 RETURNING 1"""
VSB_COUNTS = "SELECT status, COUNT(*) FROM {s}.vector_store_files WHERE batch_id = $1 GROUP BY status"
VSB_OPEN_FILES = "SELECT body FROM {s}.vector_store_files WHERE batch_id = $1 AND status = 'in_progress' FOR UPDATE"

VSC_DROP = "DELETE FROM {s}.vector_store_chunks WHERE vector_store_id = $1 AND file_id = $2"
VSC_INSERT = """INSERT INTO {s}.vector_store_chunks
(vector_store_id, file_id, seq, start_at, end_at, text, vector, terms)
SELECT $1, $2, * FROM unnest($3::int[], $4::int[], $5::int[], $6::text[], $7::bytea[], $8::bytea[])"""
VSC_VECTORS = """SELECT id, vector, terms FROM {s}.vector_store_chunks WHERE vector_store_id = $1 AND file_id = $2
ORDER BY seq"""
VSC_TEXTS = "SELECT id, text FROM {s}.vector_store_chunks WHERE id = ANY($1::bigint[])"
VSC_FILE_TEXT = """SELECT start_at, end_at, text FROM {s}.vector_store_chunks
WHERE vector_store_id = $1 AND file_id = $2 ORDER BY seq"""
