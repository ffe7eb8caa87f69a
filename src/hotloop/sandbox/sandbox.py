"""The sandbox: opens containers, each an isolated process tree (docs/sandbox.md), at most `max_containers` at
once and a few starting at a time; refuses with `Unavailable` where this host cannot run it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from hotloop.sandbox import disk
from hotloop.sandbox.bounds import Bounds
from hotloop.sandbox.cgroups import Cgroup
from hotloop.sandbox.container import Container
from hotloop.sandbox.egress import Egress
from hotloop.sandbox.interpreter import Interpreter, server_interpreter, stage
from hotloop.sandbox.launch import Launch
from hotloop.sandbox.probe import Support, probe
from hotloop.sandbox.results import Full, SandboxError, Unavailable
from hotloop.sandbox.uids import UID_BASE, UID_COUNT, Lease, UidPool, kill_uid
from hotloop.sandbox.view import host_view

# Root's, searchable by every uid (bwrap looks its sources up as the container's uid): the staged interpreter,
# each container's tmpfs, and (mode 0700) the uid locks.
STATE_DIR = Path("/run/hotloop-sandbox")
MAX_CONTAINERS = 64
STARTING = 4  # containers starting at once: 50 asked together start a few at a time, each in ~0.1 s
FORWARD = (Path(__file__).parent / "forward.py").read_text(encoding="utf-8")  # run inside: egress.py's other end


class Sandbox:
    def __init__(
        self,
        *,
        state_dir: Path = STATE_DIR,
        max_containers: int = MAX_CONTAINERS,
        uid_base: int = UID_BASE,
        uid_count: int = UID_COUNT,
        cgroups: bool = True,
    ) -> None:
        """`cgroups=False` holds memory and processes with rlimits alone, as on a host without the cgroup v1
        controllers (for tests of that path)."""
        self.state_dir = state_dir
        self.max_containers = max_containers
        self._uids = UidPool(state_dir / "uids", base=uid_base, count=uid_count)
        self._use_cgroups = cgroups
        self._starting = asyncio.Semaphore(STARTING)
        self._containers: set[Container] = set()
        self._opening = 0
        self._python: tuple[Interpreter, list[tuple[str, str]]] | None = None

    @property
    def live(self) -> int:
        return len(self._containers)

    def support(self) -> Support:
        """This host's support (probe.py), with cgroups as this sandbox uses them."""
        found = probe()
        if self._use_cgroups:
            return found
        return Support(found.available, found.reason, found.tools)

    async def open(
        self,
        directory: Path | str,
        bounds: Bounds | None = None,
        *,
        network: bool = False,
        kernel: bool = True,
        mounts: Sequence[tuple[str, str]] = (),
        allowed_domains: Sequence[str] = (),
        private_egress: bool = False,
    ) -> Container:
        """A new container whose files are `directory` (what it holds is copied in). `network`: share the host's
        network — its loopback included, so the server's own services too (docs/sandbox.md). `kernel`: start
        the Python kernel now (ready for the first call) rather than at the first call. `mounts`: (host folder,
        path inside) each bound read-only (a container's skills), each host folder searchable by every uid.
        `allowed_domains`: no network of its own, but an HTTP proxy to these domains (egress.py), which refuses
        addresses that are not public unless `private_egress`."""
        if network and allowed_domains:
            raise ValueError("a container has the host's network or an allowlist, not both")
        support = await asyncio.to_thread(self.support)
        if not support.available:
            raise Unavailable(f"the sandbox cannot run on this host: {support.reason}")
        if self.live + self._opening >= self.max_containers:
            raise Full(f"all {self.max_containers} containers of this server are in use; close one and retry")
        self._opening += 1
        try:
            lease = self._uids.acquire()
            if lease is None:
                raise Full("every uid of the sandbox's range is in use")
            egress = Egress(self._egress_dir(lease.uid), allowed_domains, private=private_egress)
            try:
                async with self._starting:
                    where = Path(directory).absolute()
                    container = await self._build(where, bounds or Bounds(), network, lease, mounts, egress)
                    if kernel:
                        await _started(container)
            except BaseException:  # a failed or cancelled start leaves nothing of itself
                await asyncio.shield(egress.close())
                _clean(lease.uid, self._stage(lease.uid))
                lease.release()
                raise
        finally:
            self._opening -= 1
        self._containers.add(container)
        return container

    async def close(self) -> None:
        """Close every container."""
        await asyncio.gather(*(container.close() for container in list(self._containers)))

    async def _build(
        self,
        directory: Path,
        bounds: Bounds,
        network: bool,
        lease: Lease,
        mounts: Sequence[tuple[str, str]],
        egress: Egress,
    ) -> Container:
        """The container's tmpfs and cgroups, and how its processes start; its kernel is not started yet."""
        interpreter, binds = self._interpreter()
        data = self._stage(lease.uid)
        _clean(lease.uid, data)
        try:  # on a thread: what the directory already holds is copied in
            await asyncio.to_thread(disk.attach, directory, data, bounds, lease.uid)
        except OSError as error:
            raise SandboxError(f"the container's files could not be set up at {directory}: {error}") from error
        try:
            cgroup = Cgroup.create(str(lease.uid), bounds) if self._use_cgroups else None
        except OSError as error:
            disk.detach(lease.uid)
            raise SandboxError(f"the container's cgroups could not be set up: {error}") from error
        view = host_view(str(data), [*binds, *mounts], interpreter.bin_dir, network=network)
        memory_rlimit = cgroup is None or cgroup.memory is None
        shim: tuple[str, ...] = ()
        if egress.domains:  # its one way out: the proxy, served inside by forward.py
            await egress.start(lease.uid)
            view = dataclasses.replace(view, egress=str(egress.directory))
            shim = (interpreter.executable, "-I", "-S", "-c", FORWARD)
        procs = cgroup.procs if cgroup else ()
        launch = Launch(probe().tools, view, bounds, lease.uid, procs, memory_rlimit, shim)
        return Container(
            directory=directory,
            stage=data,
            launch=launch,
            cgroup=cgroup,
            lease=lease,
            python=interpreter.executable,
            on_close=self._containers.discard,
            egress=egress if egress.domains else None,
        )

    def _egress_dir(self, uid: int) -> Path:
        """Where a container's egress socket is (a directory of its uid's alone, bound into it)."""
        return self.state_dir / "egress" / str(uid)

    def _stage(self, uid: int) -> Path:
        """Where a container's tmpfs is mounted first (its directory is bound from there)."""
        return self.state_dir / "data" / str(uid)

    def _interpreter(self) -> tuple[Interpreter, list[tuple[str, str]]]:
        if self._python is None:
            _own_dir(self.state_dir)
            # Searchable, not listable: bwrap, as a container's uid, looks up its own tmpfs and the staged Python.
            for name in ("data", "python", "egress"):
                (self.state_dir / name).mkdir(exist_ok=True)
                os.chmod(self.state_dir / name, 0o711)
            interpreter = server_interpreter()
            self._python = (interpreter, stage(interpreter, self.state_dir / "python"))
            self._sweep_stale()
        return self._python

    def _sweep_stale(self) -> None:
        """Clean up the containers a crashed server left (their uids' locks went with it): each one's tmpfs
        stays mounted, in memory, and its cgroups stay, until someone does."""
        for entry in (self.state_dir / "data").iterdir():
            if not entry.name.isdigit() or (lease := self._uids.take(int(entry.name))) is None:
                continue
            try:
                _clean(lease.uid, entry)
            finally:
                lease.release()


async def _started(container: Container) -> None:
    try:
        await container.start_kernel()
    except BaseException:
        await container.close()
        raise


def _own_dir(path: Path) -> None:
    """The state directory must be root's and writable by no one else: the uid locks and the staged mounts live
    there, and a directory someone else controls could have links planted in it."""
    path.mkdir(mode=0o755, parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
        raise SandboxError(f"{path} must be a directory of root's, writable by root alone")
    os.chmod(path, 0o755)


def _clean(uid: int, stage: Path) -> None:
    """Remove whatever is left of a container with this uid (its lock is ours now: a crashed server's, a failed
    start's): its processes, its tmpfs mounts, its cgroups, its stage."""
    kill_uid(uid)
    disk.detach(uid)
    stale = Cgroup.existing(str(uid))
    stale.kill()
    stale.remove_now()
    with contextlib.suppress(OSError):
        stage.rmdir()
