"""What one container may use: the bounds every process in it runs under (docs/sandbox.md, "Bounds")."""

from __future__ import annotations

import re
from dataclasses import dataclass

MIB = 1 << 20
GIB = 1 << 30

# The Containers API's `memory_limit` values ("1g", "4g", "16g", "64g"), and any "<n>m" / "<n>g" like them.
_MEMORY_LIMIT = re.compile(r"(\d+)([mg])")


@dataclass(frozen=True, slots=True)
class Bounds:
    """A container's bounds. Memory, processes and disk hold for the whole container; CPU time, file size and
    wall time for each call (docs/sandbox.md says which mechanism holds each one)."""

    memory_bytes: int = GIB  # OpenAI's default `memory_limit`, "1g"
    processes: int = 64  # tasks: threads count too (RLIMIT_NPROC and the pids cgroup both count them)
    cpu_seconds: int = 60  # per process; the kernel's is re-armed before each call
    file_bytes: int = 256 * MIB  # one file (RLIMIT_FSIZE)
    disk_bytes: int = 256 * MIB  # /mnt/data in all, and each fresh /tmp
    max_files: int = 4096  # files and directories in /mnt/data
    wall_seconds: float = 60.0  # the longest one call may run; a call's own timeout is capped by it
    output_bytes: int = MIB  # stdout and stderr kept per call, each (the middle is cut, and said so)
    open_files: int = 1024

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "processes", "cpu_seconds", "file_bytes", "disk_bytes", "max_files"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Bounds.{name} must be positive")
        if self.processes < 16:
            raise ValueError("Bounds.processes must be at least 16: the launcher and bwrap take 3 per process tree")
        if not 0 < self.wall_seconds <= 24 * 3600:
            raise ValueError("Bounds.wall_seconds must be in (0, 86400]")
        if self.output_bytes < 64 or self.open_files < 64:
            raise ValueError("Bounds.output_bytes and Bounds.open_files must be at least 64")

    def wall(self, timeout: float | None) -> float:
        """The wall bound of one call: its own timeout, never past the container's."""
        return self.wall_seconds if timeout is None else max(0.001, min(timeout, self.wall_seconds))


def memory_limit_bytes(limit: str) -> int:
    """A Containers API `memory_limit` ("1g", "4g", "512m") in bytes."""
    match = _MEMORY_LIMIT.fullmatch(limit.strip().lower())
    if match is None or int(match.group(1)) == 0:
        raise ValueError(f"memory_limit {limit!r}: expected a size such as '1g', '4g' or '512m'")
    return int(match.group(1)) * (GIB if match.group(2) == "g" else MIB)
