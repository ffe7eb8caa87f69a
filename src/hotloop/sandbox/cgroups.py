"""A container's cgroups (v1 `memory`, `pids` and `cpuacct`, where this host mounts them writable): the memory and
process bounds held by the whole process tree, not by each process alone as rlimits are, and the tree's CPU time
counted."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from hotloop.sandbox.bounds import Bounds

ROOT = Path("/sys/fs/cgroup")
PARENT = "hotloop-sandbox"  # under this process's own cgroup, so what bounds the server bounds its containers too


def _own(controller: str, root: Path = ROOT) -> Path | None:
    """This process's cgroup directory for a v1 controller, or None when it is not mounted writable."""
    mount = root / controller
    if not (mount / "cgroup.procs").exists() or not os.access(mount, os.W_OK):
        return None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            own = mount / path.lstrip("/")
            return own if own.is_dir() else mount
    return mount


def available(root: Path = ROOT) -> tuple[bool, bool]:
    """(memory, pids): which controllers this host lets the server use."""
    return _own("memory", root) is not None, _own("pids", root) is not None


@dataclass(frozen=True, slots=True)
class Cgroup:
    memory: Path | None
    pids: Path | None
    cpuacct: Path | None

    @classmethod
    def create(cls, name: str, bounds: Bounds, *, root: Path = ROOT) -> Cgroup:
        """The cgroups for one container, with its bounds written; a controller the host does not offer is None
        (and the launch falls back to rlimits for it)."""
        memory = _make(_own("memory", root), name)
        pids = _make(_own("pids", root), name)
        group = cls(memory, pids, _make(_own("cpuacct", root), name))
        try:
            if memory is not None:
                (memory / "memory.limit_in_bytes").write_text(str(bounds.memory_bytes))
                swap = memory / "memory.memsw.limit_in_bytes"  # memory and swap together: present with swap accounting
                if swap.exists():
                    swap.write_text(str(bounds.memory_bytes))
            if pids is not None:
                (pids / "pids.max").write_text(str(bounds.processes))
        except OSError:
            group.remove_now()
            raise
        return group

    @classmethod
    def existing(cls, name: str, *, root: Path = ROOT) -> Cgroup:
        """A container's cgroups as a crashed server left them (those that exist)."""
        found = [_find(_own(controller, root), name) for controller in ("memory", "pids", "cpuacct")]
        return cls(*found)

    @property
    def paths(self) -> tuple[Path, ...]:
        return tuple(path for path in (self.memory, self.pids, self.cpuacct) if path is not None)

    @property
    def procs(self) -> tuple[str, ...]:
        """The `cgroup.procs` files a launch writes its pid into."""
        return tuple(str(path / "cgroup.procs") for path in self.paths)

    def cpu_seconds(self) -> float | None:
        """CPU time the whole tree has used, or None without cpuacct."""
        if self.cpuacct is None:
            return None
        try:
            return int((self.cpuacct / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            return None

    def oom_kills(self) -> int:
        """How many processes the kernel killed for reaching the memory bound."""
        if self.memory is None:
            return 0
        with contextlib.suppress(OSError):
            for line in (self.memory / "memory.oom_control").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":  # since Linux 4.13
                    return int(value)
        return 0

    def kill(self) -> int:
        """SIGKILL every process in the container; returns how many were found."""
        found = 0
        for path in self.paths:
            with contextlib.suppress(OSError):
                for pid in (path / "cgroup.procs").read_text().split():
                    found += 1
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
        return found

    def remove_now(self) -> bool:
        """rmdir both; False while a process is still on its way out."""
        done = True
        for path in self.paths:
            if path.exists():
                try:
                    path.rmdir()
                except OSError:
                    done = False
        return done

    async def remove(self, *, attempts: int = 50) -> None:
        """Remove the cgroups once their processes are gone, killing what is left only at the end: a launcher
        (`unshare`, root's) killed before it reaps bwrap's monitor would leave the monitor a zombie."""
        for attempt in range(attempts):
            if self.remove_now():
                return
            if attempt >= attempts // 2:
                self.kill()
            await asyncio.sleep(0.02)


def _make(own: Path | None, name: str) -> Path | None:
    if own is None:
        return None
    path = own / PARENT / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _find(own: Path | None, name: str) -> Path | None:
    path = None if own is None else own / PARENT / name
    return path if path is not None and path.is_dir() else None
