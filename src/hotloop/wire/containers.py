"""The Containers API's wire shapes (OpenAI's container, its container file and the request bodies; their lists and
deletions are wire/lists.py's), no I/O."""

from __future__ import annotations

from typing import Any

import msgspec

MOUNT = "/mnt/data"  # where a container's files are, inside it (a container file's `path` starts with it)
SKILLS_MOUNT = "/mnt/skills"  # where its skills are, each a read-only folder named for the skill (docs/skills.md)
MEMORY_LIMITS = ("1g", "4g", "16g", "64g")  # OpenAI's; the default is the first
# `expires_after.minutes`: OpenAI documents no bounds; from a minute to a week (a week of idling is no sandbox).
DEFAULT_MINUTES, MINUTES_MAX = 20, 10_080
LIST_LIMIT_MAX = 100  # OpenAI's bound for both lists (default 20)
MAX_NAME = 256


class ExpiresAfter(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    anchor: str
    minutes: int


class NetworkPolicy(msgspec.Struct, kw_only=True, omit_defaults=True):
    """As a container shows it: `disabled`, or `allowlist` with its domains."""

    type: str
    allowed_domains: list[str] | None = None


class RequestedPolicy(NetworkPolicy, kw_only=True, forbid_unknown_fields=True):
    """As a create asks for it: `domain_secrets` too, which hotloop refuses (it injects no secrets)."""

    domain_secrets: list[Any] | None = None


class Container(msgspec.Struct, kw_only=True):
    id: str
    created_at: int
    name: str
    expires_after: ExpiresAfter
    last_active_at: int
    memory_limit: str = MEMORY_LIMITS[0]
    network_policy: NetworkPolicy = msgspec.field(default_factory=lambda: NetworkPolicy(type="disabled"))
    status: str = "running"  # a container that is not running (deleted, expired) reads as missing
    object: str = "container"


class ContainerFile(msgspec.Struct, kw_only=True):
    id: str
    container_id: str
    created_at: int
    bytes: int
    path: str  # absolute, under MOUNT
    source: str  # `user` (uploaded or copied from the Files API) or `assistant` (the container's code wrote it)
    object: str = "container.file"


# -- request bodies: unknown fields are refused with a 400 naming them (transports decode with these) -----------------


class CreateContainer(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str
    expires_after: ExpiresAfter | None = None
    file_ids: list[str] | None = None
    memory_limit: str | None = None
    network_policy: RequestedPolicy | None = None
    skills: list[Any] | None = None


class CreateFileById(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """`POST /containers/{id}/files` as JSON: a Files API file copied in (an upload is a multipart form)."""

    file_id: str


container_decoder = msgspec.json.Decoder(Container)
file_decoder = msgspec.json.Decoder(ContainerFile)
