"""Wake-ups when a file changes, whichever process wrote it: inotify on Linux, so that an idle server is not woken
to look at files nobody touched. `FileChanges.open` answers None where inotify is unavailable (another OS, a kernel
without it, no watches left); the caller then polls.

The watch is on the file's directory (the file may not exist yet, or be replaced); only the names asked for count,
and a file counts as changed when a process that wrote to it closes it (or one is moved into its place).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import struct
import sys
from collections.abc import Collection
from pathlib import Path

IN_CLOSE_WRITE = 0x008
IN_MOVED_TO = 0x080
IN_Q_OVERFLOW = 0x4000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then `len` bytes of NUL-padded name
# A write counts once its writer closes the file: one event a write-and-close, not one per write(2).
_WATCHED = IN_CLOSE_WRITE | IN_MOVED_TO


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library's inotify calls, from the interpreter's own symbols (no `find_library`: it runs ldconfig)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    except (OSError, AttributeError):
        return None
    return libc


def changed_names(buffer: bytes) -> tuple[set[str], bool]:
    """The names in a read of inotify events, and whether the kernel's queue overflowed (events were lost)."""
    names: set[str] = set()
    overflowed = False
    offset = 0
    while offset + _EVENT.size <= len(buffer):
        _, mask, _, length = _EVENT.unpack_from(buffer, offset)
        offset += _EVENT.size
        names.add(buffer[offset : offset + length].rstrip(b"\0").decode(errors="replace"))
        offset += length
        overflowed = overflowed or bool(mask & IN_Q_OVERFLOW)
    return names, overflowed


class FileChanges:
    """An inotify watch on a directory; `wait` returns once one of the named files in it changed."""

    def __init__(self, fd: int, names: Collection[str]) -> None:
        self._fd = fd
        self._names = frozenset(names)

    @classmethod
    def open(cls, directory: Path, names: Collection[str]) -> FileChanges | None:
        libc = _libc()
        if libc is None:
            return None
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            return None
        if libc.inotify_add_watch(fd, os.fsencode(directory), _WATCHED) < 0:
            os.close(fd)
            return None
        return cls(fd, names)

    def _changed(self) -> bool:
        """Read every queued event: did one of the named files change?"""
        changed = False
        while True:
            try:
                buffer = os.read(self._fd, 65536)
            except BlockingIOError:
                return changed
            except OSError:  # the watch is broken: "changed", so the caller looks (at its polling pace)
                return True
            names, overflowed = changed_names(buffer)
            changed = changed or overflowed or not self._names.isdisjoint(names)

    async def wait(self, timeout: float) -> bool:
        """Until one of the files changes (True), or `timeout` seconds pass (False). Events queued since the last
        wait count: a change while the caller was busy is not missed."""
        if self._changed():
            return True
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if self._changed() and not woken.done():
                woken.set_result(None)

        loop.add_reader(self._fd, readable)
        try:
            await asyncio.wait_for(woken, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            loop.remove_reader(self._fd)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
