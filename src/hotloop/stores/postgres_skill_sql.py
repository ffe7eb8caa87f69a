"""The SQL of the PostgreSQL store's skills (postgres_skills.py), qualified with the URL's schema (`{s}`). A
version's zip is in `file_chunks`, keyed by its `blob`, as a Files API file's bytes are."""

from __future__ import annotations

SKILL_SCHEMA = """
CREATE TABLE IF NOT EXISTS {s}.skills (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    default_version BIGINT NOT NULL,
    next_version BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS skills_by_owner ON {s}.skills (owner, created_at, id);
CREATE TABLE IF NOT EXISTS {s}.skill_versions (
    id TEXT PRIMARY KEY,
    skill_id TEXT NOT NULL,
    version BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    blob TEXT NOT NULL,
    bytes BIGINT NOT NULL,
    UNIQUE (skill_id, version)
);
"""
# Creates by one owner queue here, so each counts the skills the previous one left.
SK_OWNER_LOCK = "SELECT pg_advisory_xact_lock(hashtext('hotloop-skills:' || $1))"
SK_COUNT = "SELECT COUNT(*) FROM {s}.skills WHERE owner = $1"
SK_INSERT = "INSERT INTO {s}.skills VALUES ($1, $2, $3, 1, 2)"
# A skill reads as its row, its latest number and its default version's name and description.
_SKILLS = """SELECT s.id, s.created_at, s.default_version,
    (SELECT MAX(l.version) FROM {{s}}.skill_versions l WHERE l.skill_id = s.id), v.name, v.description
FROM {{s}}.skills s JOIN {{s}}.skill_versions v ON v.skill_id = s.id AND v.version = s.default_version"""
SK_GET = _SKILLS.format() + " WHERE s.id = $1 AND s.owner = $2"
# $1 owner, $2 `after` (NULL: from the start; unknown: an empty page), $3 rows.
_LIST = (
    _SKILLS
    + """ WHERE s.owner = $1 AND ($2::text IS NULL OR (s.created_at, s.id) {op}
    (SELECT created_at, id FROM {{s}}.skills WHERE id = $2 AND owner = $1))
ORDER BY s.created_at {direction}, s.id {direction} LIMIT $3"""
)
SK_LIST_ASC = _LIST.format(op=">", direction="ASC")
SK_LIST_DESC = _LIST.format(op="<", direction="DESC")
# Held while a version is added, made the default or deleted: a skill's versions change one at a time.
SK_HOLD = "SELECT default_version, next_version FROM {s}.skills WHERE id = $1 AND owner = $2 FOR UPDATE"
SK_DELETE = "DELETE FROM {s}.skills WHERE id = $1 AND owner = $2 RETURNING id"
# A deleted skill's versions ($1), with their bytes.
SK_DROP_VERSIONS = """WITH gone AS (DELETE FROM {s}.skill_versions WHERE skill_id = $1 RETURNING blob)
DELETE FROM {s}.file_chunks WHERE file_id IN (SELECT blob FROM gone)"""
SK_SET_DEFAULT = "UPDATE {s}.skills SET default_version = $2 WHERE id = $1"
SK_NEXT = """UPDATE {s}.skills SET next_version = $2 + 1,
    default_version = CASE WHEN $3 THEN $2 ELSE default_version END WHERE id = $1"""

_COLUMNS = "v.id, v.skill_id, v.version, v.created_at, v.name, v.description, v.blob, v.bytes"
_OWNED = (
    f"SELECT {_COLUMNS} FROM {{s}}.skill_versions v JOIN {{s}}.skills s ON s.id = v.skill_id"
    " WHERE s.id = $1 AND s.owner = $2"
)
SV_NUMBER = _OWNED + " AND v.version = $3"
SV_DEFAULT = _OWNED + " AND v.version = s.default_version"
SV_LATEST = _OWNED + " ORDER BY v.version DESC LIMIT 1"
SV_INSERT = "INSERT INTO {s}.skill_versions VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
SV_COUNT = "SELECT COUNT(*) FROM {s}.skill_versions WHERE skill_id = $1"
# $1 skill, $2 `after` (a version id), $3 rows.
_VERSIONS = (
    "SELECT " + _COLUMNS + " FROM {{s}}.skill_versions v WHERE v.skill_id = $1"
    " AND ($2::text IS NULL OR v.version {op}"
    " (SELECT version FROM {{s}}.skill_versions WHERE id = $2 AND skill_id = $1))"
    " ORDER BY v.version {direction} LIMIT $3"
)
SV_LIST_ASC = _VERSIONS.format(op=">", direction="ASC")
SV_LIST_DESC = _VERSIONS.format(op="<", direction="DESC")
SV_DELETE = "DELETE FROM {s}.skill_versions WHERE id = $1 RETURNING blob"
SV_DELETE_CHUNKS = "DELETE FROM {s}.file_chunks WHERE file_id = $1"
