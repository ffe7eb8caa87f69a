"""Opaque ids: a type prefix, then 24 random URL-safe characters (protocol.md §0).

The randomness is the operating system's (as `secrets` draws it), read 4 KiB at a time: one system call for
some 200 ids instead of one each, several per turn.
"""

from __future__ import annotations

import base64
import os
import threading

_ID_BYTES = 18  # 24 URL-safe characters
_POOL_BYTES = _ID_BYTES * 227
_lock = threading.Lock()
_pool = b""
_at = 0


def _random_bytes() -> bytes:
    global _pool, _at
    with _lock:
        if _at + _ID_BYTES > len(_pool):
            _pool, _at = os.urandom(_POOL_BYTES), 0
        chunk = _pool[_at : _at + _ID_BYTES]
        _at += _ID_BYTES
    return chunk


def _forget_pool() -> None:
    """A forked child must not hand out its parent's ids: it draws its own bytes."""
    global _pool, _at
    _pool, _at = b"", 0


os.register_at_fork(after_in_child=_forget_pool)


def new_id(prefix: str) -> str:
    return f"{prefix}_{base64.urlsafe_b64encode(_random_bytes()).decode()}"
