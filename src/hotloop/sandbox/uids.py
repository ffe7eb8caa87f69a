"""A uid of its own for each live container, from a range no account uses. RLIMIT_NPROC counts a real uid's
processes across the whole host: with one uid for every container, one fork bomb would leave the others none."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
from pathlib import Path

# Above the ranges /etc/subuid hands out (100000 + 65536·n) for a long way, below 2^31 (some tools read uids as
# signed), and named nowhere in /etc/passwd.
UID_BASE = 1_900_000_000
UID_COUNT = 65_536


class Lease:
    """One uid held: the lock file stays locked while the lease lives, across every server process on the host (a
    crashed one's locks go with it)."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class UidPool:
    def __init__(self, lock_dir: Path, *, base: int = UID_BASE, count: int = UID_COUNT) -> None:
        self.lock_dir = lock_dir
        self.base = base
        self.count = count
        # Start past the last uid handed out: a uid just released is taken again last, long after its processes.
        self._next = int.from_bytes(os.urandom(2)) % count

    def acquire(self) -> Lease | None:
        """A free uid, or None when every one of the range is held."""
        for step in range(self.count):
            slot = (self._next + step) % self.count
            lease = self.take(self.base + slot)
            if lease is not None:
                self._next = slot + 1
                return lease
        return None

    def take(self, uid: int) -> Lease | None:
        """This uid, when no server process holds it."""
        self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.lock_dir / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        return Lease(uid, fd)


def kill_uid(uid: int) -> int:
    """SIGKILL the live processes of `uid`; how many there were (a zombie is dead already, and not counted)."""
    found = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if entry.stat(follow_symlinks=False).st_uid != uid:
                continue
            state = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state not in ("Z", "X"):
                found += 1
                os.kill(int(entry.name), signal.SIGKILL)
    return found
