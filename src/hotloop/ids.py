"""Opaque ids: a type prefix, then 24 random URL-safe characters (protocol.md §0)."""

from __future__ import annotations

import secrets


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(18)}"
