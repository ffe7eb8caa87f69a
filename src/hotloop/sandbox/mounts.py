"""The host mounts a container needs (root only): a bounded tmpfs, read-only binds, and finding and detaching them.
mount(2) through ctypes: one system call each, no `mount` process."""

from __future__ import annotations

import ctypes
import os
import stat
from pathlib import Path

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str, path: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what} {path}: {os.strerror(number)}")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    result = _libc.mount(
        source.encode(), target.encode(), fstype.encode() if fstype else None, flags, data.encode() if data else None
    )
    _check(result, "mount", target)


def tmpfs(target: str, *, tag: str, size: int, inodes: int, uid: int) -> None:
    """A tmpfs of `size` bytes and `inodes` files at `target`, its root owned by `uid` (mode 0700): the kernel
    refuses a write past either with ENOSPC. `tag` is its source, by which `tagged` finds it again."""
    options = f"size={size},nr_inodes={inodes},mode=0700,uid={uid},gid={uid}"
    mount(tag, target, "tmpfs", MS_NOSUID | MS_NODEV, options)


def bind(source: str, target: str, *, readonly: bool) -> None:
    mount(source, target, None, MS_BIND)
    if readonly:  # a bind takes MS_RDONLY only on a remount (mount(2))
        mount(source, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def detach(target: str) -> None:
    """Unmount lazily: a file the server still holds open there does not keep the mount busy."""
    _check(_libc.umount2(target.encode(), MNT_DETACH), "umount", target)


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (proc(5))."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field


def table() -> list[tuple[str, str]]:
    """(mount point, source) of every mount this process sees, from /proc/self/mountinfo."""
    rows: list[tuple[str, str]] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        after = tail.split(" ")
        rows.append((_unescape(fields.split(" ")[4]), _unescape(after[1]) if len(after) > 1 else ""))
    return rows


def tagged(tag: str) -> list[str]:
    """The mount points whose source is `tag`, deepest first: a tmpfs and every bind of it."""
    return sorted((point for point, source in table() if source == tag), key=len, reverse=True)


def mounted(point: str) -> bool:
    return any(row[0] == point for row in table())


def reachable(path: str) -> bool:
    """Whether a user with no relation to the host can look `path` up: every directory above it searchable by
    others. A sandbox's uid is such a user, and bwrap looks its sources up as it."""
    parent = Path(path).parent
    return all(os.stat(directory).st_mode & stat.S_IXOTH for directory in (parent, *parent.parents))
