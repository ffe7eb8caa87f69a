"""`Containers`: a replica's containers — the Containers API's operations on the store with their bounds, what the
code runtime calls, and the sweep of idle ones.

Every operation is owner-scoped (the API key's owner tag, `Session.owner`): a container that is not the owner's,
was deleted, or idled past its expiry raises `NotFound` (404 `container_not_found`, param `container_id`), as if
it never was. What the runtime calls:

    sources = [await containers.source_file(owner, file_id) for file_id in file_ids]  # the owner's Files API files
    container = await containers.create(owner, record, sources)    # `record`: a wire Container, its id `cntr_…`
    container = await containers.get(owner, container_id)          # NotFound when gone
    await containers.touch(owner, container_id)                    # it ran code: last_active_at = now
    for file in await containers.files(owner, container_id):       # every file: id, path, bytes, source
        file, chunks = await containers.content(owner, container_id, file.id)   # its bytes, chunk by chunk
    await containers.write_file(owner, container_id, "out/plot.png", data)  # the code wrote or changed a file:
                                                                   # new (`source: "assistant"`) or its bytes replaced
    await containers.add_file(owner, container_id, path, data, source="assistant")  # new only (400 if taken)
    await containers.delete_file(owner, container_id, file_id)
    containers.on_gone(callback)        # callback(container_id) once this replica deleted or expired a container
    await containers.gone(container_ids)    # which are gone, whichever replica deleted or expired them

`path` is relative to /mnt/data or absolute under it (pipeline/containers/paths.py); `data` is bytes or a binary
file (read off the event loop a megabyte at a time). A file holds at most `files_max_bytes` (413 beyond), a
container `containers_max_files` files (400 `container_files_limit_reached`).

A container is touched by the runtime and by every change to its files through the API; reads (retrieve, list,
content) leave `last_active_at` alone, so a client polling a container does not keep it alive.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import BinaryIO

import msgspec

from hotloop.config import Settings
from hotloop.errors import HotloopError, InvalidParam, NotFound, RequestTooLarge
from hotloop.ids import new_id
from hotloop.pipeline.containers.paths import container_path
from hotloop.stores.base import Store
from hotloop.stores.containers import EXPIRY_BATCH, ContainerFilePage, ContainerPage, ContainerSkill, Order, Placed
from hotloop.stores.files import chunks_of
from hotloop.wire.containers import Container, ContainerFile
from hotloop.wire.files import FileObject

log = logging.getLogger("hotloop.containers")
FILES_PAGE = 1000  # `files()` reads a container's files this many a query
GoneHandler = Callable[[str], None]


def missing_container(container_id: str) -> NotFound:
    return NotFound(f"No container found with id '{container_id}'.", param="container_id", code="container_not_found")


def missing_file(file_id: str) -> NotFound:
    return NotFound(f"No container file found with id '{file_id}'.", param="file_id", code="file_not_found")


class Containers:
    def __init__(self, store: Store, settings: Settings, clock: Callable[[], float] = time.time) -> None:
        """`clock`: epoch seconds (tests move it; the sweep and every expiry read it)."""
        self.store = store
        self.settings = settings
        self.clock = clock
        self._gone_handlers: list[GoneHandler] = []
        self._sweeper: asyncio.Task[None] | None = None

    def _now(self) -> int:
        return int(self.clock())

    # -- containers ---------------------------------------------------------------------------------------------

    async def create(
        self,
        owner: str,
        container: Container,
        copies: Sequence[FileObject] = (),
        skills: Sequence[tuple[ContainerSkill, bytes]] = (),
    ) -> Container:
        """Store a checked container (pipeline/objects/containers.py checks a request's), its times set to now, with
        copies of the owner's Files API files (`source: "user"`, at /mnt/data/<filename>) and its skills (each with
        its zip: pipeline/containers/skills.py); all of it or nothing. Past `containers_max_per_key` live
        containers: 400 `containers_limit_reached`."""
        now = self._now()
        container = msgspec.structs.replace(container, created_at=now, last_active_at=now)
        limit = self.settings.containers_max_per_key
        expires_at = now + container.expires_after.minutes * 60
        if not await self.store.put_container(owner, container, expires_at, limit, skills):
            raise HotloopError(
                f"This key holds {limit} containers already (containers_max_per_key): delete one, or let one expire.",
                code="containers_limit_reached",
            )
        try:
            for n, file in enumerate(copies):
                await self.copy_file(owner, container.id, file, f"file_ids[{n}]")
        except BaseException:
            await asyncio.shield(self.store.delete_container(owner, container.id, now))
            raise
        return container

    async def get(self, owner: str, container_id: str) -> Container:
        found = await self.store.get_container(owner, container_id, self._now())
        if found is None:
            raise missing_container(container_id)
        return found

    async def list_containers(
        self, owner: str, *, after: str | None, limit: int, order: Order, name: str | None = None
    ) -> ContainerPage:
        return await self.store.list_containers(owner, self._now(), after=after, limit=limit, order=order, name=name)

    async def delete(self, owner: str, container_id: str) -> None:
        """Delete it with its files; this replica's `on_gone` handlers hear of it."""
        if not await self.store.delete_container(owner, container_id, self._now()):
            raise missing_container(container_id)
        self._announce([container_id])

    async def listed_skills(self, owner: str, container_id: str) -> list[ContainerSkill]:
        """The container's skills, without their zips; none when the container is gone or not the owner's."""
        stored = await self.store.container_skills(owner, container_id, self._now())
        return [one.skill for one in stored or ()]

    async def skills(self, owner: str, container_id: str) -> list[tuple[ContainerSkill, bytes]]:
        """The container's skills, each with its zip (NotFound when the container is gone)."""
        stored = await self.store.container_skills(owner, container_id, self._now())
        if stored is None:
            raise missing_container(container_id)
        return [(one.skill, b"".join([c async for c in self.store.container_file_content(one.blob)])) for one in stored]

    async def touch(self, owner: str, container_id: str) -> None:
        if not await self.store.touch_container(owner, container_id, self._now()):
            raise missing_container(container_id)

    # -- its files ----------------------------------------------------------------------------------------------

    async def add_file(
        self,
        owner: str,
        container_id: str,
        path: str,
        content: bytes | BinaryIO,
        *,
        source: str = "assistant",
        param: str = "path",
    ) -> ContainerFile:
        """A new file at `path` (400 naming `param` when the path is bad or taken)."""
        file = self._new_file(container_id, container_path(path, param), source)
        return await self._put(owner, file, self._capped(chunks_of(content)), replace=False, param=param)

    async def write_file(self, owner: str, container_id: str, path: str, content: bytes | BinaryIO) -> ContainerFile:
        """The container's code wrote `path`: its file gets these bytes (keeping its id, source and created_at), or
        a new file is made (`source: "assistant"`)."""
        file = self._new_file(container_id, container_path(path, "path"), "assistant")
        return await self._put(owner, file, self._capped(chunks_of(content)), replace=True, param="path")

    async def source_file(self, owner: str, file_id: str, param: str = "file_id") -> FileObject:
        """A Files API file of the owner's to copy in (`create`'s copies, `copy_file`): 404 naming `param` when it
        is not the owner's, 400 when its name could not be a container file's."""
        found = await self.store.get_file(owner, file_id)
        if found is None:
            raise NotFound(f"No file found with id '{file_id}'.", param=param, code="file_not_found")
        container_path(found.filename, param)
        return found

    async def copy_file(
        self, owner: str, container_id: str, source: FileObject, param: str = "file_id"
    ) -> ContainerFile:
        """A Files API file of the owner's copied in at /mnt/data/<its filename>, as the user's (its bytes copied
        inside the store)."""
        if source.bytes > self.settings.files_max_bytes:
            raise RequestTooLarge(self.settings.files_max_bytes)
        file = self._new_file(container_id, container_path(source.filename, param), "user")
        return await self._put(owner, file, source, replace=False, param=param)

    def _new_file(self, container_id: str, path: str, source: str) -> ContainerFile:
        return ContainerFile(
            id=new_id("cfile"), container_id=container_id, created_at=self._now(), bytes=0, path=path, source=source
        )

    async def _capped(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """The chunks, cut off with 413 once they pass `files_max_bytes` (the store then keeps none of them)."""
        limit, seen = self.settings.files_max_bytes, 0
        async for chunk in chunks:
            seen += len(chunk)
            if seen > limit:
                raise RequestTooLarge(limit)
            yield chunk

    async def _put(
        self,
        owner: str,
        file: ContainerFile,
        content: AsyncIterator[bytes] | FileObject,
        *,
        replace: bool,
        param: str,
    ) -> ContainerFile:
        max_files = self.settings.containers_max_files
        placed = await self.store.put_container_file(
            owner, file, content, now=self._now(), max_files=max_files, replace=replace
        )
        if placed.file is None:
            raise _refusal(placed, file, max_files, param)
        return placed.file

    async def files(self, owner: str, container_id: str) -> list[ContainerFile]:
        """Every file of the container, oldest first."""
        found: list[ContainerFile] = []
        after = None
        while True:
            page = await self.list_files(owner, container_id, after=after, limit=FILES_PAGE, order="asc")
            found += page.data
            if not page.has_more:
                return found
            after = page.data[-1].id

    async def list_files(
        self, owner: str, container_id: str, *, after: str | None, limit: int, order: Order
    ) -> ContainerFilePage:
        page = await self.store.list_container_files(
            owner, container_id, self._now(), after=after, limit=limit, order=order
        )
        if page is None:
            raise missing_container(container_id)
        return page

    async def get_file(self, owner: str, container_id: str, file_id: str) -> ContainerFile:
        stored = await self.store.get_container_file(owner, container_id, file_id, self._now())
        if stored is None:
            await self.get(owner, container_id)  # 404 for the container before the file
            raise missing_file(file_id)
        return stored.file

    async def content(self, owner: str, container_id: str, file_id: str) -> tuple[ContainerFile, AsyncIterator[bytes]]:
        """The file and its bytes, chunk by chunk (a missing one is a 404 before any is read)."""
        stored = await self.store.get_container_file(owner, container_id, file_id, self._now())
        if stored is None:
            await self.get(owner, container_id)
            raise missing_file(file_id)
        return stored.file, self.store.container_file_content(stored.blob)

    async def delete_file(self, owner: str, container_id: str, file_id: str) -> None:
        if not await self.store.delete_container_file(owner, container_id, file_id, self._now()):
            await self.get(owner, container_id)
            raise missing_file(file_id)

    # -- their end ----------------------------------------------------------------------------------------------

    def on_gone(self, handler: GoneHandler) -> None:
        """Call `handler(container_id)` whenever this replica deletes a container or its sweep expires one (the
        runtime stops its sandbox). Another replica's deletions are not heard here: `gone` asks the store."""
        self._gone_handlers.append(handler)

    async def gone(self, container_ids: Sequence[str]) -> set[str]:
        """Which of these containers are gone (deleted, or idle past their expiry), on any replica."""
        live = await self.store.live_containers(container_ids, self._now())
        return set(container_ids) - live

    def _announce(self, container_ids: Sequence[str]) -> None:
        for container_id in container_ids:
            for handler in self._gone_handlers:
                try:
                    handler(container_id)
                except Exception:  # one handler's fault must not stop the others, nor the sweep
                    log.exception("a container's gone handler failed for %s", container_id)

    async def sweep(self) -> int:
        """One pass: every container past its expiry deleted with its files, a few a step; how many."""
        deleted = 0
        while expired := await self.store.expire_containers(self._now(), EXPIRY_BATCH):
            deleted += len(expired)
            self._announce(expired)
            if len(expired) < EXPIRY_BATCH:
                break
        return deleted

    async def _sweep_forever(self) -> None:
        while True:
            try:
                await self.sweep()
            except HotloopError as exc:  # the store is down: try again next time
                log.warning("the expired containers' sweep failed: %s", exc.message)
            except Exception:  # a fault of one pass must not end the sweeping
                log.exception("the expired containers' sweep failed")
            await asyncio.sleep(self.settings.containers_sweep_s)

    def start(self) -> None:
        """Every replica sweeps (replicas racing delete each container once: a step deletes only what is there)."""
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever(), name="hotloop-containers")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None


def _refusal(placed: Placed, file: ContainerFile, max_files: int, param: str) -> HotloopError:
    match placed.outcome:
        case "missing":
            return missing_container(file.container_id)
        case "full":
            return HotloopError(
                f"The container holds {max_files} files already (containers_max_files): delete one first.",
                param=param,
                code="container_files_limit_reached",
            )
        case "gone":
            return NotFound("The file to copy was deleted meanwhile.", param=param, code="file_not_found")
        case _:
            return InvalidParam(
                f"The path {file.path} is taken: a file is at it, at a directory above it, or beneath it.",
                param=param,
                code="path_taken",
            )
