"""How every process of one container starts (its kernel and each shell command alike): the same uid, cgroups,
rlimits and view, on asyncio's subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from hotloop.sandbox.argv import Tools, bwrap_args, environment, launcher, rlimits
from hotloop.sandbox.bounds import Bounds
from hotloop.sandbox.view import View

EXIT_SECONDS = 2.0
# bwrap reads its arguments from a pipe written whole before it starts: what a pipe holds without a reader.
ARGS_MAX = 60_000
# The launcher's whole environment. bwrap's --clearenv clears only its command's: bwrap itself, the sandbox's pid 1,
# keeps what it was started with, and the sandbox reads that in /proc/1/environ — the server's keys, were it the
# server's environment.
LAUNCH_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}

Stream = int | IO[Any] | None


@dataclass(frozen=True, slots=True)
class Launch:
    tools: Tools
    view: View
    bounds: Bounds
    uid: int
    procs: tuple[str, ...]  # the container's cgroup.procs files; empty without cgroups
    memory_rlimit: bool  # RLIMIT_AS on each process: no memory cgroup holds the tree
    shim: tuple[str, ...] = ()  # run before every command, which it becomes (forward.py, where egress is allowed)

    def argv(self, command: Sequence[str], args_fd: int, *, cpu_rlimit: bool) -> list[str]:
        limits = rlimits(self.bounds, memory=self.memory_rlimit, cpu=cpu_rlimit)
        return launcher(self.tools, command, uid=self.uid, procs=self.procs, limits=limits, args_fd=args_fd)

    def bwrap_args(self) -> list[str]:
        return bwrap_args(self.view, self.bounds, environment(self.view))


async def spawn(
    launch: Launch,
    command: Sequence[str],
    *,
    stdin: Stream = asyncio.subprocess.DEVNULL,
    stdout: Stream = asyncio.subprocess.PIPE,
    stderr: Stream = asyncio.subprocess.PIPE,
    limit: int = 1 << 16,
    cpu_rlimit: bool = True,
) -> asyncio.subprocess.Process:
    """Start `command` in the container. Its own session, so a signal meant for the server's terminal never
    reaches it; bwrap's options on a pipe, so they never show in the sandbox's /proc/1/cmdline. `cpu_rlimit`:
    bound each process's CPU time with RLIMIT_CPU (a shell command's), or leave it to the host (the kernel's)."""
    payload = b"".join(arg.encode() + b"\0" for arg in launch.bwrap_args())
    if len(payload) > ARGS_MAX:
        raise ValueError(f"bwrap's arguments take {len(payload)} bytes, past {ARGS_MAX}")
    read, write = os.pipe()
    try:
        os.write(write, payload)
        os.close(write)
        write = -1
        return await asyncio.create_subprocess_exec(
            *launch.argv([*launch.shim, *command], read, cpu_rlimit=cpu_rlimit),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            pass_fds=(read,),
            env=LAUNCH_ENV,
            start_new_session=True,
            limit=limit,
        )
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)


async def stop(process: asyncio.subprocess.Process) -> None:
    """End a container process and all it started: SIGKILL bwrap's monitor, the pid 1 of the launch's pid
    namespace, whose end takes every process under it (the sandbox's own namespace nested inside) and reaps them;
    `unshare`, waiting for it, then exits. Killing `unshare` first would leave the monitor unreaped."""
    if process.returncode is None:
        monitors = children(process.pid)
        for pid in monitors:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not monitors:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
    try:
        await asyncio.wait_for(process.wait(), EXIT_SECONDS)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


def children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def command_pid(process: asyncio.subprocess.Process) -> int | None:
    """The command's host pid: `unshare` → bwrap's monitor → the sandbox's init → the command."""
    level = [process.pid]
    for _ in range(3):
        level = [child for pid in level for child in children(pid)]
    return level[0] if level else None
