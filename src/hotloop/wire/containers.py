"""The Containers API's wire shapes (OpenAI's container, its container file and the request bodies; their lists and
deletions are wire/lists.py's), no I/O."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from hotloop.errors import InvalidParam

MOUNT = "/mnt/data"  # where a container's files are, inside it (a container file's `path` starts with it)
SKILLS_MOUNT = "/mnt/skills"  # where its skills are, each a read-only folder named for the skill (docs/skills.md)
MEMORY_LIMITS = ("1g", "4g", "16g", "64g")  # OpenAI's; the default is the first
# `expires_after.minutes`: OpenAI documents no bounds; from a minute to a week (a week of idling is no sandbox).
DEFAULT_MINUTES, MINUTES_MAX = 20, 10_080
LIST_LIMIT_MAX = 100  # OpenAI's bound for both lists (default 20)
MAX_NAME = 256


MAX_DOMAINS = 100  # a network policy's allowed_domains
# A host name (RFC 1035 labels, any case, a single label such as `localhost` too), optionally `*.` for what is under it.
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
DOMAIN = re.compile(rf"(\*\.)?{_LABEL}(\.{_LABEL})*")


def allowed_domains(policy: Any, param: str) -> tuple[str, ...]:
    """The domains a network policy allows: () for none (`disabled`, or no policy), else its `allowlist`'s
    `allowed_domains`, checked; a 400 naming the field that is wrong (`param`: the policy's). `domain_secrets` are
    refused: hotloop injects no secrets into a container's requests."""
    if policy is None:
        return ()
    if not isinstance(policy, dict):
        raise InvalidParam("'network_policy' must be an object.", param=param, code="invalid_type")
    kind = policy.get("type")
    if kind == "disabled":
        if set(policy) != {"type"}:
            raise InvalidParam("A 'disabled' network policy takes no other field.", param=param)
        return ()
    if kind != "allowlist":
        raise InvalidParam("'network_policy.type' must be 'disabled' or 'allowlist'.", param=f"{param}.type")
    for key in policy:
        if key not in ("type", "allowed_domains", "domain_secrets"):
            raise InvalidParam(f"Unknown parameter: '{param}.{key}'.", param=f"{param}.{key}", code="unknown_parameter")
    if policy.get("domain_secrets"):
        raise InvalidParam(
            "hotloop injects no secrets into a container's requests: leave 'domain_secrets' out.",
            param=f"{param}.domain_secrets",
        )
    domains = policy.get("allowed_domains")
    if not isinstance(domains, list) or not domains or not all(isinstance(one, str) for one in domains):
        raise InvalidParam(
            "'allowed_domains' must list the domains the container may reach.",
            param=f"{param}.allowed_domains",
            code="invalid_type" if not isinstance(domains, list) else "invalid_value",
        )
    if len(domains) > MAX_DOMAINS:
        raise InvalidParam(f"'allowed_domains' lists at most {MAX_DOMAINS} domains.", param=f"{param}.allowed_domains")
    for n, domain in enumerate(domains):
        if len(domain) > 253 or not DOMAIN.fullmatch(domain):
            raise InvalidParam(
                f"{domain!r} is not a domain name (letters, digits, hyphens and dots; '*.' for what is under one).",
                param=f"{param}.allowed_domains[{n}]",
            )
    return tuple(dict.fromkeys(domain.lower() for domain in domains))


class ExpiresAfter(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    anchor: str
    minutes: int


class NetworkPolicy(msgspec.Struct, kw_only=True, omit_defaults=True):
    """As a container shows it: `disabled`, or `allowlist` with its domains."""

    type: str
    allowed_domains: list[str] | None = None


def policy_of(domains: tuple[str, ...]) -> NetworkPolicy:
    """A container's network policy as it shows it: `allowlist` with its domains, or `disabled`."""
    return NetworkPolicy(type="allowlist", allowed_domains=list(domains)) if domains else NetworkPolicy(type="disabled")


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
    network_policy: Any = None  # checked by `allowed_domains`, which names the field that is wrong
    skills: list[Any] | None = None


class CreateFileById(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """`POST /containers/{id}/files` as JSON: a Files API file copied in (an upload is a multipart form)."""

    file_id: str


container_decoder = msgspec.json.Decoder(Container)
file_decoder = msgspec.json.Decoder(ContainerFile)
