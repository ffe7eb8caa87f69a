"""The skills this replica's live containers have, unpacked where the sandbox can bind them read-only
(docs/skills.md): one folder per distinct zip, shared by every live container that has it, removed when the last of
them closes. Each worker process keeps its own folder (`<root>/<pid>`) and clears those of processes that are
gone: a crashed worker's leftovers go, a live one's stay bound."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import itertools
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from hotloop.sandbox import SandboxError
from hotloop.skills.bundle import BundleError, from_zip, unpack
from hotloop.stores.containers import ContainerSkill
from hotloop.wire.containers import SKILLS_MOUNT


class StagedSkills:
    def __init__(self, root: Path) -> None:
        self.root = root  # searchable by every uid (the sandbox's state directory)
        self._folder: Path | None = None
        self._staged: dict[str, tuple[Path, asyncio.Task[None]]] = {}  # digest → its folder, being unpacked
        self._users: dict[str, int] = {}  # digest → live containers that have it
        self._of: dict[str, tuple[str, ...]] = {}  # container id → the digests it holds
        self._generation = itertools.count()

    async def stage(self, container_id: str, skills: Sequence[tuple[ContainerSkill, bytes]]) -> list[tuple[str, str]]:
        """Each skill's folder, unpacked now unless another live container has it already, as the sandbox's read-only
        binds ((host folder, /mnt/skills/<name>) each); `release` the container when it closes. SandboxError when
        a folder cannot be written."""
        if not skills:
            return []
        digests = [hashlib.sha256(data).hexdigest() for _, data in skills]
        self.release(container_id)
        self._of[container_id] = tuple(digests)
        for digest in digests:
            self._users[digest] = self._users.get(digest, 0) + 1
        try:
            folders = [await self._unpacked(digest, data) for digest, (_, data) in zip(digests, skills, strict=True)]
        except BaseException:
            self.release(container_id)
            raise
        return [
            (str(folder), f"{SKILLS_MOUNT}/{skill.name}") for folder, (skill, _) in zip(folders, skills, strict=True)
        ]

    def release(self, container_id: str) -> None:
        """The container closed: a folder no live container has any more is removed, off the event loop, once it
        is unpacked (a thread cannot be stopped halfway)."""
        for digest in self._of.pop(container_id, ()):
            self._users[digest] -= 1
            if self._users[digest] == 0:
                del self._users[digest]
                folder, task = self._staged.pop(digest)
                task.add_done_callback(functools.partial(_removed, folder))

    async def _unpacked(self, digest: str, data: bytes) -> Path:
        staged = self._staged.get(digest)
        if staged is None:
            # A new name each time: a folder removed a moment ago may still be on its way out.
            folder = self._root() / f"{digest[:32]}.{next(self._generation)}"
            staged = (folder, asyncio.ensure_future(asyncio.to_thread(_unpack, data, folder)))
            self._staged[digest] = staged
        await asyncio.shield(staged[1])
        return staged[0]

    def _root(self) -> Path:
        if self._folder is None:
            self.root.mkdir(mode=0o711, parents=True, exist_ok=True)
            for entry in self.root.iterdir():  # another worker's, crashed
                if entry.name.isdigit() and not _alive(int(entry.name)):
                    shutil.rmtree(entry, ignore_errors=True)
            self._folder = self.root / str(os.getpid())
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder.mkdir(mode=0o711)
        return self._folder


def _unpack(data: bytes, folder: Path) -> None:
    try:
        unpack(from_zip(data, named=("stored", "stored")), folder)
    except (BundleError, OSError) as error:
        shutil.rmtree(folder, ignore_errors=True)
        raise SandboxError(f"a skill could not be unpacked for the container: {error}") from None


def _removed(folder: Path, _: object) -> None:
    asyncio.get_running_loop().run_in_executor(None, shutil.rmtree, folder, True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
