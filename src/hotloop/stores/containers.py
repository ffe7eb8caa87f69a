"""What a store keeps for the Containers API: containers, owned by one API key, and their files, whose bytes are kept
in chunks as the Files API keeps a file's (stores/files.py: the same `file_chunks` table, keyed by each container
file's `blob`). SQLite and PostgreSQL keep them; the Redis store keeps none (`ContainersNotKept`).

A container lives until it is deleted or idles past its `expires_at` (`last_active_at` plus its
`expires_after.minutes`); one past it reads as missing at once, and the sweep (pipeline/containers/service.py)
deletes it with its files and their bytes. Every time is passed in (`now`, epoch seconds), so a test moves it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Literal, Protocol

import msgspec

from hotloop.errors import HotloopError
from hotloop.wire.containers import Container, ContainerFile
from hotloop.wire.files import FileObject

EXPIRY_BATCH = 10  # containers deleted per step (each with its files' chunks): a step stays short
Order = Literal["asc", "desc"]
# What placing a file came to: `added` or `replaced` (`file` is what is stored); `missing`: no such live container
# of the owner; `full`: it holds its most files already; `taken`: a file is at that path, or at a directory of it,
# or under it as a directory (the container's files must make a tree its code can see); `gone`: the Files API file
# to copy was deleted meanwhile.
Outcome = Literal["added", "replaced", "missing", "full", "taken", "gone"]


class ContainersNotKept(HotloopError):
    """501: the Redis store keeps no files, so no containers either."""

    status = 501
    type = "server_error"
    code = "containers_not_supported"

    def __init__(self) -> None:
        super().__init__(
            "This server's store keeps no containers: the Containers API needs the SQLite or PostgreSQL store "
            "(store_url)."
        )


class ContainerPage(msgspec.Struct):
    data: list[Container]
    has_more: bool


class ContainerFilePage(msgspec.Struct):
    data: list[ContainerFile]
    has_more: bool


class Placed(msgspec.Struct, frozen=True):
    outcome: Outcome
    file: ContainerFile | None = None


class ContainerSkill(msgspec.Struct, frozen=True):
    """A skill mounted read-only in a container (docs/skills.md): what the model is told of it, and where it came
    from (`skill_id`/`version` for a Skills API skill; None for an inline one). Its bundle is a zip kept with the
    container (its own copy: deleting the skill later leaves a container that has it whole)."""

    name: str
    description: str
    bytes: int  # the zip's size
    skill_id: str | None = None
    version: str | None = None


class StoredSkill(msgspec.Struct, frozen=True):
    """A container's skill and the key of its zip's bytes in `file_chunks`."""

    skill: ContainerSkill
    blob: str


class StoredFile(msgspec.Struct, frozen=True):
    """A container file and the key of its bytes in `file_chunks` (a replaced file's bytes get a new key)."""

    file: ContainerFile
    blob: str


def parents(path: str) -> list[str]:
    """The directories above `path` inside the container, as container file paths (`/mnt/data/a/b` → `/mnt/data/a`):
    no file may be at one of them. The mount itself is not one (no file is at it)."""
    pieces = path.split("/")
    return ["/".join(pieces[:n]) for n in range(4, len(pieces))]  # "", "mnt", "data", then the first piece


class ContainerStore(Protocol):
    """Owner-scoped like responses: another owner's container, or one past its `expires_at`, reads as missing."""

    async def put_container(
        self,
        owner: str,
        container: Container,
        expires_at: int,
        max_per_owner: int,
        skills: Sequence[tuple[ContainerSkill, bytes]] = (),
    ) -> bool:
        """Insert a new container with its skills (each with its zip), unless the owner holds `max_per_owner` live
        ones already (False: nothing stored)."""
        ...

    async def container_skills(self, owner: str, container_id: str, now: int) -> list[StoredSkill] | None:
        """A live container's skills, in the order it was made with; None when it is not the owner's or not live.
        Their zips read with `container_file_content(blob)`."""
        ...

    async def get_container(self, owner: str, container_id: str, now: int) -> Container | None: ...

    async def list_containers(
        self, owner: str, now: int, *, after: str | None, limit: int, order: Order, name: str | None
    ) -> ContainerPage:
        """A page by creation time in `order`, after container id `after` (an unknown id: an empty page)."""
        ...

    async def delete_container(self, owner: str, container_id: str, now: int) -> bool:
        """Delete it with its files and skills and their bytes; False when it is not there (or no longer live)."""
        ...

    async def touch_container(self, owner: str, container_id: str, now: int) -> bool:
        """It was used: `last_active_at` becomes `now`, `expires_at` moves with it. False: not a live container."""
        ...

    async def expire_containers(self, now: int, limit: int) -> list[str]:
        """Delete up to `limit` containers (any owner's) past their `expires_at`, with their files and skills; their
        ids."""
        ...

    async def live_containers(self, container_ids: Sequence[str], now: int) -> set[str]:
        """Which of these containers are still there and live (any owner's)."""
        ...

    async def put_container_file(
        self,
        owner: str,
        file: ContainerFile,
        content: AsyncIterator[bytes] | FileObject,
        *,
        now: int,
        max_files: int,
        replace: bool,
    ) -> Placed:
        """Store a file's bytes, then, in one step, its row (its `bytes` counted as written): readable whole or not
        at all, and the container's `last_active_at` moved to `now`. `content`: the bytes chunk by chunk, or a Files
        API file of the owner's whose bytes are copied inside the store. `replace`: a file already at `file.path`
        gets the new bytes (it keeps its id, source and created_at) instead of the outcome `taken`. Anything but
        `added` or `replaced` leaves nothing stored; so does a failure."""
        ...

    async def get_container_file(self, owner: str, container_id: str, file_id: str, now: int) -> StoredFile | None: ...

    async def list_container_files(
        self, owner: str, container_id: str, now: int, *, after: str | None, limit: int, order: Order
    ) -> ContainerFilePage | None:
        """A page by creation time in `order`; None when the container is not the owner's or not live."""
        ...

    def container_file_content(self, blob: str) -> AsyncIterator[bytes]:
        """The bytes of a file `get_container_file` found, chunk by chunk."""
        ...

    async def delete_container_file(self, owner: str, container_id: str, file_id: str, now: int) -> bool:
        """Delete it and its bytes (the container's `last_active_at` moves to `now`); False when it is not there."""
        ...
