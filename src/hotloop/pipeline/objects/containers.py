"""The Containers API (`/v1/containers` and `/files`): a request checked before anything is stored, then handed to
the replica's `Containers` (pipeline/containers/service.py), which the code runtime calls too. Another key's
container reads as missing (404), never as forbidden. A container's `skills` (docs/skills.md) are mounted read-only
in it at /mnt/skills/<name>."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, BinaryIO

from hotloop.errors import InvalidParam, MissingParam
from hotloop.ids import new_id
from hotloop.pipeline.containers.skills import resolve
from hotloop.pipeline.service import Service
from hotloop.skills.requested import requested
from hotloop.stores.containers import Order
from hotloop.wire.containers import (
    DEFAULT_MINUTES,
    MAX_NAME,
    MEMORY_LIMITS,
    MINUTES_MAX,
    Container,
    ContainerFile,
    CreateContainer,
    CreateFileById,
    ExpiresAfter,
    NetworkPolicy,
    allowed_domains,
    policy_of,
)
from hotloop.wire.files import FileObject
from hotloop.wire.lists import Deleted, ObjectList, listed

# -- checks at the door -------------------------------------------------------------------------------------------


def _expires(expires: ExpiresAfter | None) -> ExpiresAfter:
    if expires is None:
        return ExpiresAfter(anchor="last_active_at", minutes=DEFAULT_MINUTES)
    if expires.anchor != "last_active_at":
        raise InvalidParam("expires_after.anchor must be 'last_active_at'.", param="expires_after.anchor")
    if not 1 <= expires.minutes <= MINUTES_MAX:
        raise InvalidParam(f"expires_after.minutes must be between 1 and {MINUTES_MAX}.", param="expires_after.minutes")
    return expires


def _network(policy: Any) -> NetworkPolicy:
    """No network, or an HTTP proxy to the allowed domains alone (sandbox/egress.py, docs/sandbox.md "Network")."""
    return policy_of(allowed_domains(policy, "network_policy"))


def checked(body: CreateContainer) -> Container:
    """The container a valid create makes (its times are set as it is stored); a 400 naming the field otherwise."""
    if len(body.name) > MAX_NAME:
        raise InvalidParam(f"name holds at most {MAX_NAME} characters.", param="name")
    if body.memory_limit is not None and body.memory_limit not in MEMORY_LIMITS:
        raise InvalidParam(f"memory_limit must be one of {', '.join(MEMORY_LIMITS)}.", param="memory_limit")
    return Container(
        id=new_id("cntr"),
        created_at=0,
        last_active_at=0,
        name=body.name,
        expires_after=_expires(body.expires_after),
        memory_limit=body.memory_limit or MEMORY_LIMITS[0],
        network_policy=_network(body.network_policy),
    )


async def _sources(service: Service, owner: str, file_ids: list[str]) -> list[FileObject]:
    """The Files API files to copy in, each the owner's (404 naming `file_ids[n]` otherwise), checked before
    anything is stored."""
    limit = service.settings.containers_max_files
    if len(file_ids) > limit:
        raise InvalidParam(f"file_ids holds at most {limit} files (containers_max_files).", param="file_ids")
    return [
        await service.containers.source_file(owner, file_id, f"file_ids[{n}]") for n, file_id in enumerate(file_ids)
    ]


# -- containers -----------------------------------------------------------------------------------------------------


async def create(service: Service, owner: str, body: CreateContainer) -> Container:
    container = checked(body)
    skills = requested(body.skills, "skills")  # its shape first: a 400 before anything is read
    sources = await _sources(service, owner, body.file_ids or [])
    mounted = await resolve(service.skills, owner, skills)
    return await service.containers.create(owner, container, sources, mounted)


async def get(service: Service, owner: str, container_id: str) -> Container:
    return await service.containers.get(owner, container_id)


async def delete(service: Service, owner: str, container_id: str) -> Deleted:
    await service.containers.delete(owner, container_id)
    return Deleted(id=container_id, object="container.deleted")


async def list_containers(
    service: Service, owner: str, after: str | None, limit: int, order: Order, name: str | None
) -> ObjectList:
    page = await service.containers.list_containers(owner, after=after, limit=limit, order=order, name=name)
    return listed(page.data, page.has_more)


# -- its files ------------------------------------------------------------------------------------------------------


async def upload_file(
    service: Service, owner: str, container_id: str, filename: str | None, content: BinaryIO | None
) -> ContainerFile:
    """An uploaded file (a multipart form's `file` part), at /mnt/data/<its filename>, as the user's."""
    if content is None:
        raise MissingParam("Missing required parameter: 'file' (or give 'file_id').", param="file")
    await service.containers.get(owner, container_id)  # a missing container is a 404 before the name is judged
    return await service.containers.add_file(owner, container_id, filename or "", content, source="user", param="file")


async def copy_file(service: Service, owner: str, container_id: str, body: CreateFileById) -> ContainerFile:
    """A Files API file of the owner's copied in."""
    await service.containers.get(owner, container_id)
    source = await service.containers.source_file(owner, body.file_id)
    return await service.containers.copy_file(owner, container_id, source)


async def list_files(
    service: Service, owner: str, container_id: str, after: str | None, limit: int, order: Order
) -> ObjectList:
    page = await service.containers.list_files(owner, container_id, after=after, limit=limit, order=order)
    return listed(page.data, page.has_more)


async def get_file(service: Service, owner: str, container_id: str, file_id: str) -> ContainerFile:
    return await service.containers.get_file(owner, container_id, file_id)


async def file_content(
    service: Service, owner: str, container_id: str, file_id: str
) -> tuple[ContainerFile, AsyncIterator[bytes]]:
    """The file and its bytes, chunk by chunk (a missing one is a 404 before anything is sent)."""
    return await service.containers.content(owner, container_id, file_id)


async def delete_file(service: Service, owner: str, container_id: str, file_id: str) -> Deleted:
    await service.containers.delete_file(owner, container_id, file_id)
    return Deleted(id=file_id, object="container.file.deleted")
