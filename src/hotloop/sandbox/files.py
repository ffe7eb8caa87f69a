"""The server's own access to a container's files, which the container's code controls: a name is looked up one
component at a time and no link is ever followed, so a symlink planted there cannot make the server (root) read
or write anything outside."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def parts(name: str) -> list[str]:
    """A relative name's components; ValueError for an absolute name, `..`, or an empty one."""
    pieces = [piece for piece in name.split("/") if piece not in ("", ".")]
    if not pieces or name.startswith("/") or ".." in pieces:
        raise ValueError(f"{name!r} is not a file name inside the container")
    return pieces


def _walk(root: Path, pieces: list[str], *, create: int | None = None) -> int:
    """An fd of the directory holding the last piece; `create`: make missing directories owned by that uid."""
    fd = os.open(root, _DIR)
    try:
        for piece in pieces[:-1]:
            if create is not None:
                try:
                    os.mkdir(piece, 0o755, dir_fd=fd)
                    os.chown(piece, create, create, dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    pass
            inner = os.open(piece, _DIR, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def read(root: Path, name: str, *, limit: int) -> bytes:
    """A regular file's bytes; OSError for a link, a directory, a FIFO or a file past `limit`."""
    pieces = parts(name)
    parent = _walk(root, pieces)
    try:
        fd = os.open(pieces[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
    finally:
        os.close(parent)
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise IsADirectoryError(f"{name!r} is not a regular file")
        if info.st_size > limit:
            raise OSError(f"{name!r} is {info.st_size} bytes, past the {limit} read here")
        return file.read(limit + 1)[:limit]


def write(root: Path, name: str, data: bytes, *, uid: int) -> None:
    """Write a file (and its directories) owned by the container's uid; ENOSPC past the container's disk bound."""
    pieces = parts(name)
    parent = _walk(root, pieces, create=uid)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(pieces[-1], flags, 0o644, dir_fd=parent)
    finally:
        os.close(parent)
    with os.fdopen(fd, "wb") as file:
        os.fchown(file.fileno(), uid, uid)
        file.write(data)


def snapshot(root: Path, *, limit: int) -> dict[str, tuple[int, int]]:
    """name → (size, mtime in ns) of every regular file, links not followed, at most `limit` entries looked at."""
    found: dict[str, tuple[int, int]] = {}
    for name, info in _entries(root, "", limit):
        if stat.S_ISREG(info.st_mode):
            found[name] = (info.st_size, info.st_mtime_ns)
    return found


def changed(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    """Files created or modified between two snapshots, in name order."""
    return sorted(name for name, mark in after.items() if before.get(name) != mark)


def _entries(root: Path, prefix: str, budget: int) -> Iterator[tuple[str, os.stat_result]]:
    """Each directory is opened from its parent's fd without following links: one swapped for a link between
    the listing and the descent is not entered."""
    stack: list[tuple[int, str]] = [(os.open(root, _DIR), prefix)]
    try:
        while stack:
            fd, base = stack.pop()
            try:
                with os.scandir(fd) as listing:
                    for entry in listing:
                        budget -= 1
                        if budget < 0:
                            return
                        info = entry.stat(follow_symlinks=False)
                        name = f"{base}{entry.name}"
                        yield name, info
                        if stat.S_ISDIR(info.st_mode):
                            try:
                                stack.append((os.open(entry.name, _DIR, dir_fd=fd), f"{name}/"))
                            except OSError:
                                continue
            finally:
                os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)
