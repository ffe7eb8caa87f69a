"""Which store a `store_url` names: `sqlite:///path`, `redis://…`, `postgresql://…`; empty: SQLite in data_dir."""

from __future__ import annotations

from pathlib import Path

from hotloop.config import Settings
from hotloop.stores.base import Store
from hotloop.stores.retention import Retention

SCHEMES = ("sqlite", "redis", "rediss", "postgresql", "postgres")


def retention_of(settings: Settings) -> Retention:
    return Retention(ttl_s=settings.retention_ttl_s, max_bytes=settings.retention_max_bytes)


def open_store(settings: Settings) -> Store:
    """The store the settings name; a bad URL raises ValueError (the server refuses to start)."""
    url = settings.store_url.strip()
    retention = retention_of(settings)
    if settings.retention_ttl_s < 0 or settings.retention_max_bytes < 0:
        raise ValueError("retention_ttl_s and retention_max_bytes must be 0 (off) or positive")
    scheme, sep, rest = url.partition("://")
    if not url or scheme == "sqlite":
        from hotloop.stores.sqlite import SQLiteStore

        # sqlite:///abs/path or sqlite://relative/path (relative to the working directory)
        path = Path(rest) if sep and rest else settings.resolved_data_dir() / "hotloop.db"
        return SQLiteStore(path, retention)
    if scheme in ("redis", "rediss"):
        from hotloop.stores.redis import RedisStore

        return RedisStore(url, retention)
    if scheme in ("postgresql", "postgres"):
        from hotloop.stores.postgres import PostgresStore

        return PostgresStore(url, retention)
    raise ValueError(f"store_url: unknown scheme '{scheme}' (use one of {', '.join(SCHEMES)})")
