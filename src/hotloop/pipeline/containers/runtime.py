"""The code runtime: where a response's code runs (pipeline/steps/code_runs.py). A container of the Containers API
(pipeline/containers/service.py: its record and its files, in the store) runs on a replica as a sandbox container
(hotloop/sandbox/: an isolated process tree with a persistent Python kernel), opened at its first run there.

- **Its files are the store's.** Opening a container writes its files from the store into the sandbox's
  /mnt/data; after each run, the files the code created or changed go back to the store (`source: "assistant"`)
  before the run's result does. A replica that closes a live container loses only its kernel's variables (the next
  run says so: a fresh kernel), never a file; another replica can open it as well.
- **Live containers are a bounded cache**: at most `max_live` per replica, the least recently run closed first;
  one whose container was deleted or expired (any replica's sweep) is closed when the runtime hears of it or at its
  next check (`gone`, every `CHECK_S`).
- **`auto`**: a response whose tool says `{type: "auto"}` gets a container at its first run (named after the
  response's tool, `memory_limit`, `file_ids` and a hosted shell's `skills` as declared), or reuses the one its
  context ran in last.
- **Skills** (docs/skills.md): each of a container's skills is unpacked once per replica into the sandbox's state
  directory (one folder per distinct zip, shared by the live containers that have it, removed when the last one
  closes) and bound read-only at /mnt/skills/<name>.
- Code errors are the code's: the run completes and its logs hold the traceback. A run past its wall time, or a
  kernel that died, ends `failed` with what it printed and why.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import shutil
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from hotloop.errors import HotloopError, NotFound
from hotloop.ids import new_id
from hotloop.pipeline.containers.service import Containers
from hotloop.pipeline.containers.skills import SkillSource, resolve
from hotloop.pipeline.containers.staged import StagedSkills
from hotloop.sandbox import Bounds, Container, Run, Sandbox, SandboxError, ShellRun, memory_limit_bytes
from hotloop.tools.code_interpreter import Declared
from hotloop.wire.code_interpreter import WrittenFile
from hotloop.wire.containers import Container as ContainerRecord
from hotloop.wire.containers import ExpiresAfter, policy_of
from hotloop.wire.tool_items import CodeInterpreterImage, CodeInterpreterLogs, CodeInterpreterStatus

log = logging.getLogger("hotloop.code_interpreter")
CHECK_S = 30.0  # how often live containers are checked against the store (deleted or expired elsewhere)
AUTO_NAME = "code_interpreter"
SHELL_NAME = "shell"  # a hosted shell's `container_auto` container
AUTO_MINUTES = 20  # OpenAI's idle expiry of a container

Outputs = list[CodeInterpreterLogs | CodeInterpreterImage]


@dataclass(frozen=True, slots=True)
class Ran:
    status: CodeInterpreterStatus
    outputs: Outputs | None
    container_id: str | None
    files: tuple[WrittenFile, ...] = ()  # the files the run wrote, kept in the store


@dataclass(frozen=True, slots=True)
class Frame:
    """A call in its container (`CodeRuntime._in`): `keep()` after the call puts what it did to the files in the
    store."""

    runtime: CodeRuntime
    owner: str
    container_id: str
    live: Container
    before: dict[str, tuple[int, int]]

    async def keep(self) -> tuple[WrittenFile, ...]:
        return await self.runtime._keep(self.owner, self.container_id, self.live, self.before)


@dataclass(frozen=True, slots=True)
class Shelled:
    """A hosted shell call's commands, run: each one's output (`exit_code` None: past its timeout), and where."""

    runs: list[ShellRun]
    container_id: str


class NoSandbox(HotloopError):
    """The sandbox cannot run here: the code is not run (the tool is refused at the door where this is known)."""

    status = 501
    type = "server_error"
    code = "sandbox_unavailable"


class CodeRuntime:
    def __init__(self, containers: Containers, skills: SkillSource, sandbox: Sandbox, work: Path) -> None:
        """`work`: the live containers' host directories (each a tmpfs the sandbox binds there). Its bounds are
        the containers' settings: `code_timeout_s`, `containers_live_max`, `containers_egress_private`."""
        self.containers = containers
        self.skills = skills
        self.sandbox = sandbox
        self.staged = StagedSkills(sandbox.state_dir / "skills")
        self.work = work
        settings = containers.settings
        self.wall_s = settings.code_timeout_s
        self.max_live = settings.containers_live_max
        self.private_egress = settings.containers_egress_private
        self._live: OrderedDict[str, Container] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}
        self._checker: asyncio.Task[None] | None = None
        containers.on_gone(self._gone)

    def refusal(self) -> str | None:
        """Why no code can run on this replica (its sandbox cannot start here), or None."""
        support = self.sandbox.support()
        return None if support.available else f"its sandbox cannot run on this host ({support.reason})"

    async def run(
        self, owner: str, declared: Declared, container_id: str | None, code: str, stop: asyncio.Event | None = None
    ) -> Ran:
        """Run `code` in the container (`None`: a new `auto` one); `stop` set (a steer) interrupts it. Raises
        `HotloopError` for a container that is not the owner's or is gone, and `NoSandbox`."""
        async with self._in(owner, declared, container_id, AUTO_NAME) as frame:
            before = time.monotonic()
            result = await frame.live.python(code, timeout=self.wall_s, stop=stop)
            log.debug("code run in %s: %.1f ms", frame.container_id, (time.monotonic() - before) * 1e3)
            kept = await frame.keep()
        # A kernel lost during the run (its wall or CPU bound, its memory bound, a signal) fails the call
        # (docs/code-interpreter.md, "failed"); the code's own traceback completes it; a steer's interrupt leaves
        # it incomplete, with what it printed.
        status: CodeInterpreterStatus = "completed"
        if result.stopped:
            status = "incomplete"
        elif result.lost:
            status = "failed"
        return Ran(status, outputs_of(result), frame.container_id, kept)

    async def shell(
        self,
        owner: str,
        declared: Declared,
        container_id: str | None,
        commands: list[str],
        timeout_s: float | None,
        max_output_length: int | None,
        stop: asyncio.Event | None = None,
    ) -> Shelled:
        """Run a hosted shell call's `commands` in the container (`None`: a new `container_auto` one), one after
        the other, each within `timeout_s` (None, or past it: the wall bound, `code_timeout_s`); the files they
        created or changed go to the store before the result does, as a code run's; `stop` set (a steer): the
        command under way is killed and the rest not run (fewer runs than commands). Raises as `run`."""
        async with self._in(owner, declared, container_id, SHELL_NAME) as frame:
            runs = await frame.live.shell(commands, timeout=timeout_s, max_output_length=max_output_length, stop=stop)
            await frame.keep()
        return Shelled(runs, frame.container_id)

    @asynccontextmanager
    async def _in(self, owner: str, declared: Declared, container_id: str | None, name: str) -> AsyncIterator[Frame]:
        """A call's frame: its container found (or made), one call at a time in it (its kernel's or its shell's),
        opened, its files noted before the call; touched after it. An `auto` container made for the call that
        could not be opened is deleted again (nothing ran in it).

        The container: the named one (`NotFound` when gone), the `auto` one the context last ran in while it is
        still there (its opening reads its record: one read finds it gone or the key's), else a new `auto` one."""
        named = declared.container_id is not None
        last = declared.container_id or container_id
        while True:
            made = last is None
            target = last or await self._auto(owner, declared, name)
            async with self._locks.setdefault(target, asyncio.Lock()):
                try:
                    live = await self._open(owner, target)
                except NotFound:
                    if named or made:
                        raise
                    last = None  # the context's container expired or was deleted: a new one
                    continue
                except BaseException:
                    if made:
                        with contextlib.suppress(HotloopError):
                            await asyncio.shield(self.containers.delete(owner, target))
                    raise
                yield Frame(self, owner, target, live, live.files())
                await self.containers.touch(owner, target)
                return

    async def _auto(self, owner: str, declared: Declared, name: str) -> str:
        now = int(time.time())
        record = ContainerRecord(
            id=new_id("cntr"),
            created_at=now,
            name=name,
            expires_after=ExpiresAfter(anchor="last_active_at", minutes=AUTO_MINUTES),
            last_active_at=now,
            memory_limit=declared.memory_limit,
            network_policy=policy_of(declared.allowed_domains),
        )
        copies = [await self.containers.source_file(owner, file_id) for file_id in declared.file_ids]
        skills = await resolve(self.skills, owner, declared.skills)
        created = await self.containers.create(owner, record, copies, skills)
        return created.id

    async def _open(self, owner: str, container_id: str) -> Container:
        """The container's live sandbox: this replica's, or opened now with the store's files."""
        record = await self.containers.get(owner, container_id)  # NotFound: not the owner's, or gone
        live = self._live.get(container_id)
        if live is not None and not live.closed:
            self._live.move_to_end(container_id)
            return live
        while len(self._live) >= self.max_live:
            await self._close(*self._live.popitem(last=False))
        directory = self.work / container_id
        directory.mkdir(parents=True, exist_ok=True)
        bounds = Bounds(memory_bytes=memory_limit_bytes(record.memory_limit), wall_seconds=self.wall_s)
        try:
            mounts = await self.staged.stage(container_id, await self.containers.skills(owner, container_id))
            domains = tuple(record.network_policy.allowed_domains or ())  # none: no network at all
            live = await self.sandbox.open(
                directory, bounds, mounts=mounts, allowed_domains=domains, private_egress=self.private_egress
            )
        except BaseException as exc:
            self.staged.release(container_id)
            if isinstance(exc, SandboxError):
                raise NoSandbox(f"The container could not be started: {exc}") from None
            raise
        try:
            for file in await self.containers.files(owner, container_id):
                _, chunks = await self.containers.content(owner, container_id, file.id)
                live.write(relative(file.path), b"".join([chunk async for chunk in chunks]))
        except BaseException:  # a container half filled is no container: closed, and the next run opens it again
            await self._close(container_id, live)
            raise
        self._live[container_id] = live
        self._start_checks()
        return live

    async def _keep(
        self, owner: str, container_id: str, live: Container, before: dict[str, tuple[int, int]]
    ) -> tuple[WrittenFile, ...]:
        """What the call did to the container's files, into the store (what the Containers API then lists): the
        files it created or changed, kept; those it deleted, deleted."""
        after = live.files()
        names = tuple(name for name, stat in after.items() if before.get(name) != stat)
        kept: list[WrittenFile] = []
        for name in names:
            try:
                data = live.read(name)
            except (OSError, SandboxError) as exc:  # gone again, a link, too large: not kept, said in the log
                log.info("container %s: %s not kept: %s", container_id, name, exc)
                continue
            try:
                file = await self.containers.write_file(owner, container_id, name, data)
            except HotloopError as exc:  # past the container's file bounds
                log.info("container %s: %s not kept: %s", container_id, name, exc.message)
                continue
            kept.append(WrittenFile(container_id, file.id, file.path))
        if deleted := before.keys() - after.keys():
            await self._forget(owner, container_id, deleted)
        return tuple(kept)

    async def _forget(self, owner: str, container_id: str, names: set[str]) -> None:
        """The files the call deleted go from the store too (a file the store never had is no matter)."""
        for file in await self.containers.files(owner, container_id):
            if relative(file.path) in names:
                with contextlib.suppress(HotloopError):
                    await self.containers.delete_file(owner, container_id, file.id)

    def _gone(self, container_id: str) -> None:
        live = self._live.pop(container_id, None)
        self._locks.pop(container_id, None)
        if live is not None:
            asyncio.get_running_loop().create_task(self._close(container_id, live))

    async def _close(self, container_id: str, live: Container) -> None:
        await live.close()
        self.staged.release(container_id)
        await asyncio.to_thread(shutil.rmtree, self.work / container_id, True)

    def _start_checks(self) -> None:
        if self._checker is None or self._checker.done():
            self._checker = asyncio.get_running_loop().create_task(self._check_forever())

    async def _check_forever(self) -> None:
        while self._live:
            await asyncio.sleep(CHECK_S)
            try:
                for container_id in await self.containers.gone(list(self._live)):
                    self._gone(container_id)
            except HotloopError as exc:  # the store is down: the next check
                log.warning("live containers not checked: %s", exc.message)

    async def stop(self) -> None:
        if self._checker is not None:
            self._checker.cancel()
        await asyncio.gather(*(self._close(cid, live) for cid, live in list(self._live.items())))
        self._live.clear()


def relative(path: str) -> str:
    """A container file's path (/mnt/data/…) as the sandbox names it (relative to /mnt/data)."""
    return path.removeprefix("/mnt/data/")


def outputs_of(result: Run) -> Outputs:
    """The run as a code_interpreter_call's outputs: its logs, then each figure as a PNG data URL."""
    outputs: Outputs = [CodeInterpreterLogs(logs=result.logs)] if result.logs else []
    for image in result.images:
        outputs.append(CodeInterpreterImage(url="data:image/png;base64," + base64.b64encode(image.png).decode()))
    return outputs
