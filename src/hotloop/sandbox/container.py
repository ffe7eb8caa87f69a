"""One container: an isolated process tree with its own uid, cgroups and bounded /mnt/data, a persistent Python
kernel, and shell commands; one call at a time. Calls never raise for what the code did (a traceback, a timeout, a
dead kernel are all in the result); `SandboxError` is for the sandbox itself."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

from hotloop.sandbox import disk, files
from hotloop.sandbox.bounds import Bounds
from hotloop.sandbox.cgroups import Cgroup
from hotloop.sandbox.egress import Egress
from hotloop.sandbox.kernel import Kernel, KernelLost, Reply
from hotloop.sandbox.launch import Launch
from hotloop.sandbox.results import Closed, Image, Run, SandboxError, ShellRun
from hotloop.sandbox.shell import run_command
from hotloop.sandbox.uids import Lease, kill_uid

LOST = "Its variables are gone; the next call starts a fresh kernel."
STOPPED = "a call was stopped, and its code did not end when interrupted"
KILL_ATTEMPTS = 100


class Container:
    def __init__(
        self,
        *,
        directory: Path,
        stage: Path,
        launch: Launch,
        cgroup: Cgroup | None,
        lease: Lease,
        python: str,
        on_close: Callable[[Container], None],
        egress: Egress | None = None,
    ) -> None:
        self.directory = directory
        self._stage = stage
        self._launch = launch
        self._cgroup = cgroup
        self._lease = lease
        self._python = python
        self._on_close = on_close
        self._egress = egress  # its way out to its allowed domains, when it has one
        self._kernel: Kernel | None = None
        self._lost: str | None = None  # why the last kernel stopped, until a call has said so
        self._lock = asyncio.Lock()
        self.closed = False

    @property
    def uid(self) -> int:
        return self._lease.uid

    @property
    def bounds(self) -> Bounds:
        return self._launch.bounds

    @property
    def network(self) -> bool:
        return self._launch.view.network

    @property
    def allowed_domains(self) -> tuple[str, ...]:
        """The domains its egress proxy lets it reach (none: no network, or the host's where `network`)."""
        return self._egress.domains if self._egress is not None else ()

    async def start_kernel(self) -> None:
        """Start the Python kernel now rather than at the first call."""
        async with self._lock:
            self._check()
            await self._ensure_kernel()

    async def python(self, code: str, *, timeout: float | None = None, stop: asyncio.Event | None = None) -> Run:
        """Run `code` in the container's kernel, within `timeout` seconds (capped by `bounds.wall_seconds`). `stop`
        set while it runs interrupts it (a KeyboardInterrupt in the code; kernel.py): the run is `stopped`, with
        what it printed and its traceback, and the kernel keeps its variables unless the code would not end."""
        async with self._lock:
            self._check()
            before = self._snapshot()
            try:
                notice = await self._ensure_kernel()
            except SandboxError as failed:  # no process left to start it with, say: the call says so
                return Run("", "", None, _sentence(str(failed)), False, None, (), (), lost=True)
            assert self._kernel is not None
            try:
                reply = await self._kernel.run(code, timeout=self.bounds.wall(timeout), stop=stop)
            except asyncio.CancelledError:  # the code was interrupted (kernel.py); a kernel it outlasted was stopped
                if not self._kernel.alive:
                    self._kernel, self._lost = None, STOPPED
                raise
            except KernelLost as lost:
                self._kernel, self._lost = None, lost.reason
                error = f"{_sentence(lost.reason)}. {LOST}"
                changed = self._changed(before)
                timed_out = lost.timed_out
                return Run(lost.stdout, lost.stderr, None, error, timed_out, notice, (), changed, True, lost.stopped)
            return self._run(reply, notice, self._changed(before))

    async def shell(
        self,
        commands: Sequence[str],
        *,
        timeout: float | None = None,
        max_output_length: int | None = None,
        stop: asyncio.Event | None = None,
    ) -> list[ShellRun]:
        """Run each command in turn, each in a fresh process tree of the container, each within `timeout`. `stop`
        set: the command under way is killed (its run `stopped`) and the rest are not run, so there are fewer runs
        than commands. A cancelled call kills the command under way (shell.py); the kernel lives on either way."""
        async with self._lock:
            self._check()
            wall = self.bounds.wall(timeout)
            runs: list[ShellRun] = []
            for command in commands:
                if stop is not None and stop.is_set():
                    break
                runs.append(
                    await run_command(self._launch, command, timeout=wall, max_output=max_output_length, stop=stop)
                )
            return runs

    def read(self, name: str) -> bytes:
        """A file of the container, never through a link (files.py); at most `bounds.file_bytes`."""
        return files.read(self.directory, name, limit=self.bounds.file_bytes)

    def write(self, name: str, data: bytes) -> None:
        """Put a file in the container, owned by its uid; OSError (ENOSPC) past its disk bound."""
        files.write(self.directory, name, data, uid=self.uid)

    def files(self) -> dict[str, tuple[int, int]]:
        """Every regular file in /mnt/data: name → (bytes, mtime in ns), links not followed. Two of them, taken
        around a shell call, say what it created or changed (`Run.files` says it for a Python call)."""
        return dict(sorted(self._snapshot().items()))

    def cpu_seconds(self) -> float | None:
        """CPU time the container's processes have used so far, all of them (its cpuacct cgroup); None where the
        host gives no cpuacct."""
        return self._cgroup.cpu_seconds() if self._cgroup is not None else None

    async def close(self) -> None:
        """End every process of the container, then remove its cgroups and its files, and free its uid. A call
        under way ends at once, with the kernel's loss or a killed command."""
        if self.closed:
            return
        self.closed = True
        try:
            if self._kernel is not None:
                await self._kernel.stop()
            await self._kill_all()
            async with self._lock:  # the call under way has seen its processes end, and reaped them
                if self._cgroup is not None:
                    await self._cgroup.remove()
                disk.detach(self.uid)
                with contextlib.suppress(OSError):
                    self._stage.rmdir()
                if self._egress is not None:
                    await self._egress.close()
        finally:
            self._lease.release()
            self._on_close(self)

    async def _ensure_kernel(self) -> str | None:
        """A live kernel; the notice for the call when it is not the one the last call ran on."""
        if self._kernel is not None and self._kernel.alive:
            return None
        if self._kernel is not None:  # it stopped between calls (a thread it left running, say)
            self._lost = f"{self._kernel.exit_reason()}, between calls"
        self._kernel = await Kernel.start(self._launch, self._python, self._cgroup)
        lost, self._lost = self._lost, None
        if lost is None:
            return None
        return f"A fresh Python kernel: the previous one stopped ({lost}), and its variables with it."

    def _run(self, reply: Reply, notice: str | None, changed: tuple[str, ...]) -> Run:
        images = []
        for name in reply.images:
            with contextlib.suppress(OSError, ValueError):
                images.append(Image(name, self.read(name)))
        fields = (reply.stdout, reply.stderr, reply.result, reply.error, False, notice, tuple(images), changed)
        return Run(*fields, stopped=reply.stopped)

    def _snapshot(self) -> dict[str, tuple[int, int]]:
        return files.snapshot(self.directory, limit=self.bounds.max_files + 16)

    def _changed(self, before: dict[str, tuple[int, int]]) -> tuple[str, ...]:
        return tuple(files.changed(before, self._snapshot()))

    def _check(self) -> None:
        if self.closed:
            raise Closed("the container was closed")

    async def _kill_all(self) -> None:
        """SIGKILL every process of the container's uid (no other process has it) until none is left: only then
        may another container take the uid."""
        for _ in range(KILL_ATTEMPTS):
            if not kill_uid(self.uid):
                return
            await asyncio.sleep(0.01)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]
