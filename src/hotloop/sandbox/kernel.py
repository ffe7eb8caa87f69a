"""The host's handle on a container's Python kernel (repl.py, run in the sandbox): one JSON line out, one back,
under the call's wall and CPU bounds. A kernel that runs past either, dies, or answers garbage is stopped and
reported as `KernelLost`; the container starts a fresh one for its next call."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import stat
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from hotloop.sandbox.cgroups import Cgroup
from hotloop.sandbox.launch import EXIT_SECONDS, Launch, command_pid, spawn, stop
from hotloop.sandbox.output import cut
from hotloop.sandbox.results import SandboxError
from hotloop.sandbox.view import DATA

READY_SECONDS = 30.0  # a kernel's start, while many containers start at once on a small host
# How often a running call's CPU time is looked at: a call may overrun its CPU bound by this much per core. A call
# that answers sooner is never looked at.
CPU_POLL_SECONDS = 0.2
_TICKS = os.sysconf("SC_CLK_TCK")
# How long an interrupted cell has to end before its kernel is stopped, and how often it is interrupted meanwhile
# (a SIGINT that reached the kernel just before the cell began did nothing).
INTERRUPT_SECONDS = 2.0
INTERRUPT_POLL_SECONDS = 0.1


@cache
def source() -> str:
    return Path(__file__).with_name("repl.py").read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class Reply:
    stdout: str
    stderr: str
    result: str | None
    error: str | None
    images: tuple[str, ...]  # figure files the kernel saved in /mnt/data
    stopped: bool = False  # the cell was interrupted at the caller's `stop` (its KeyboardInterrupt is its error)


class KernelLost(Exception):
    """The kernel stopped during a call and its variables with it; `reason` says why."""

    def __init__(
        self, reason: str, *, timed_out: bool = False, stdout: str = "", stderr: str = "", stopped: bool = False
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.timed_out = timed_out
        self.stopped = stopped  # it was being interrupted at the caller's `stop`
        self.stdout = stdout
        self.stderr = stderr


class Kernel:
    def __init__(self, process: asyncio.subprocess.Process, launch: Launch, cgroup: Cgroup | None) -> None:
        self.process = process
        self.launch = launch
        self.cgroup = cgroup
        self.pid = command_pid(process)  # the kernel's own host pid, for its CPU time, partial output and interrupts
        self._interrupting: asyncio.Future[bool] | None = None  # a cancelled call's interrupt, while it runs

    @classmethod
    async def start(cls, launch: Launch, python: str, cgroup: Cgroup | None) -> Kernel:
        command = [python, "-I", "-B", "-c", source(), DATA]
        limit = 16 * launch.bounds.output_bytes + (1 << 20)  # a reply, JSON-escaped, at most
        process = await spawn(launch, command, stdin=asyncio.subprocess.PIPE, limit=limit, cpu_rlimit=False)
        assert process.stdout is not None and process.stderr is not None
        try:
            line = await asyncio.wait_for(process.stdout.readline(), READY_SECONDS)
        except (TimeoutError, ValueError):
            line = b""
        except asyncio.CancelledError:  # the call that wanted it was cancelled: no kernel is left behind
            await asyncio.shield(stop(process))
            raise
        if line.strip() != b'{"ready": true}':
            await stop(process)
            why = (await process.stderr.read(4096)).decode(errors="replace").strip() or "no output"
            raise SandboxError(f"the Python kernel did not start: {why}")
        return cls(process, launch, cgroup)

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    async def run(self, code: str, *, timeout: float, stop: asyncio.Event | None = None) -> Reply:
        """Run one cell; KernelLost when the kernel is gone after it (this kernel is then stopped for good). A
        cancelled call interrupts the cell before the cancellation goes on (`interrupt`); `stop` set while it runs
        interrupts it too, and its reply (what it printed, then its KeyboardInterrupt) comes back `stopped`."""
        assert self.process.stdin is not None
        if self._interrupting is not None:
            interrupted, self._interrupting = await self._interrupting, None
            if not interrupted:
                raise KernelLost(
                    "the kernel was stopped: the code of a call stopped before did not end when interrupted"
                )
        kills = self.cgroup.oom_kills() if self.cgroup else 0
        request = {"code": code, "output_bytes": self.launch.bounds.output_bytes}
        stopped = False
        try:
            self.process.stdin.write(json.dumps(request).encode() + b"\n")
            await self.process.stdin.drain()
            line, stopped = await self._answer(timeout, stop)
        except asyncio.CancelledError:
            # Shielded: cancelled again meanwhile, the interrupt goes on, and the next call waits for it.
            self._interrupting = asyncio.ensure_future(self.interrupt())
            await asyncio.shield(self._interrupting)
            raise
        except (TimeoutError, _CpuSpent, _Unstoppable) as over:
            stdout, stderr = self._partial()
            await self.stop()
            timed_out, unstoppable = isinstance(over, TimeoutError), isinstance(over, _Unstoppable)
            why = f"the call ran past its {timeout:g} s" if timed_out else str(over)
            if unstoppable:
                why = f"the code did not end within {INTERRUPT_SECONDS:g} s of its interrupt; its kernel was stopped"
            raise KernelLost(why, timed_out=timed_out, stdout=stdout, stderr=stderr, stopped=unstoppable) from None
        except (OSError, ValueError):  # a broken pipe, or a line past the reply limit
            line = b""
        if not line:
            raise KernelLost(await self._death(kills))
        try:
            return dataclasses.replace(_reply(json.loads(line)), stopped=stopped)
        except (ValueError, TypeError, KeyError):
            await self.stop()
            raise KernelLost("the kernel's reply was not one it could have sent; it was stopped") from None

    async def stop(self) -> None:
        await stop(self.process)

    async def interrupt(self) -> bool:
        """End the cell under way as Ctrl-C would: SIGINT to the kernel, a `KeyboardInterrupt` in the code (repl.py
        raises it only inside a cell), again every `INTERRUPT_POLL_SECONDS` until its reply comes, which is read and
        dropped so that the next call reads its own. The kernel and its variables live on (True); code that does
        not end within `INTERRUPT_SECONDS` (it catches the interrupt, or waits in C) has its kernel stopped (False).
        """
        assert self.process.stdout is not None
        if self.pid is None:
            await self.stop()
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + INTERRUPT_SECONDS
        reading = asyncio.ensure_future(self.process.stdout.readline())
        try:
            while not reading.done() and (left := deadline - loop.time()) > 0:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGINT)
                await asyncio.wait({reading}, timeout=min(left, INTERRUPT_POLL_SECONDS))
        finally:
            reading.cancel()
        answered = reading.done() and not reading.cancelled() and reading.exception() is None and reading.result()
        if not answered:
            await self.stop()
        return bool(answered)

    def exit_reason(self) -> str:
        """Why a kernel that has exited did."""
        return _status(self.process.returncode or 0)

    async def _answer(self, timeout: float, stop: asyncio.Event | None) -> tuple[bytes, bool]:
        """The reply line, within `timeout`, and whether `stop` interrupted the cell; the CPU time the call uses
        looked at while it runs (the kernel's RLIMIT_CPU would count its whole life, and the host may not move it:
        that needs CAP_SYS_RESOURCE). Code that outlasts its interrupt by `INTERRUPT_SECONDS` is a TimeoutError."""
        assert self.process.stdout is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        start = self._cpu()
        reading = asyncio.ensure_future(self.process.stdout.readline())
        stopping = asyncio.ensure_future(stop.wait()) if stop is not None else None
        interrupted = False
        try:
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    raise _Unstoppable if interrupted else TimeoutError
                waits = {reading} if stopping is None or interrupted else {reading, stopping}
                poll = INTERRUPT_POLL_SECONDS if interrupted else CPU_POLL_SECONDS
                done, _ = await asyncio.wait(waits, timeout=min(left, poll), return_when=asyncio.FIRST_COMPLETED)
                if reading in done:
                    return reading.result(), interrupted
                if interrupted or (stopping is not None and stopping in done):
                    if not interrupted:  # from now on only the interrupt's own time is left
                        interrupted, deadline = True, min(deadline, loop.time() + INTERRUPT_SECONDS)
                    if self.pid is not None:  # again each poll: one that came just before the cell began did nothing
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(self.pid, signal.SIGINT)
                    continue
                used = self._cpu()
                if start is not None and used is not None and used - start > self.launch.bounds.cpu_seconds:
                    raise _CpuSpent(f"the call used its {self.launch.bounds.cpu_seconds} s of CPU time")
        finally:
            reading.cancel()
            if stopping is not None:
                stopping.cancel()

    def _cpu(self) -> float | None:
        """CPU seconds used so far: the container's whole tree (cpuacct), else the kernel and its waited-for
        children."""
        if self.cgroup is not None and (whole := self.cgroup.cpu_seconds()) is not None:
            return whole
        if self.pid is None:
            return None
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return sum(int(field) for field in fields[11:15]) / _TICKS  # utime, stime, cutime, cstime
        except (OSError, ValueError):
            return None

    def _partial(self) -> tuple[str, str]:
        """What a call that ran out of time had printed so far, read from the kernel's capture files."""
        if self.pid is None:
            return "", ""
        limit = self.launch.bounds.output_bytes
        return _read_fd(self.pid, 1, limit), _read_fd(self.pid, 2, limit)

    async def _death(self, kills: int) -> str:
        """Why the kernel is gone, once it has exited."""
        try:
            code = await asyncio.wait_for(self.process.wait(), EXIT_SECONDS)
        except TimeoutError:  # it closed its pipe but lives on: end it
            await self.stop()
            return "the kernel closed its connection to the server; it was stopped"
        if self.cgroup is not None and self.cgroup.oom_kills() > kills:
            return f"the kernel was killed: the container reached its memory limit ({_size(self.launch)})"
        return _status(code)


class _CpuSpent(Exception):
    pass


class _Unstoppable(Exception):
    """The cell went on past `INTERRUPT_SECONDS` after its interrupt (it caught it, or waits in C)."""


def _reply(raw: Any) -> Reply:
    images = tuple(raw["images"])
    if not all(isinstance(name, str) and "/" not in name for name in images):
        raise ValueError("images")
    fields = [raw["stdout"], raw["stderr"], raw["result"], raw["error"]]
    if not all(isinstance(field, str) for field in fields[:2]) or not all(
        field is None or isinstance(field, str) for field in fields[2:]
    ):
        raise TypeError("fields")
    return Reply(fields[0], fields[1], fields[2], fields[3], images)


def _status(code: int) -> str:
    """bwrap exits with its command's status, or 128 + the signal that killed it (negative: the launcher's own
    signal)."""
    if code > 128 or code < 0:
        number = code - 128 if code > 128 else -code
        with contextlib.suppress(ValueError):
            return f"the kernel was killed by signal {number} ({signal.Signals(number).name})"
        return f"the kernel was killed by signal {number}"
    return f"the kernel exited with status {code}"


def _size(launch: Launch) -> str:
    return f"{launch.bounds.memory_bytes / (1 << 20):g} MiB"


def _read_fd(pid: int, fd: int, limit: int) -> str:
    """Read what fd `fd` of process `pid` holds, if it is a regular file; its middle cut past `limit`."""
    try:
        handle = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        size = os.fstat(handle).st_size
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return ""
        half = limit // 2
        head = os.pread(handle, min(size, half), 0)
        tail = os.pread(handle, min(size - len(head), half), max(len(head), size - half))
        return cut(head, tail, size)
    except OSError:
        return ""
    finally:
        os.close(handle)
