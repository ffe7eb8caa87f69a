"""What a sandbox sees of the host: the system read-only, the server's Python, one writable directory, and nothing
else — found on the host once, then turned into bwrap's arguments by argv.py."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DATA = "/mnt/data"  # the container's one writable directory, and every process's working directory

# The top-level names a merged-/usr Debian makes links into /usr; on an older layout they are directories, bound.
SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Of /etc, only what programs need to start, to verify TLS and to find fonts (matplotlib asks fontconfig): never
# passwd, shadow, the hostname or anything of the server's own configuration.
ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl/certs",
    "ca-certificates",
    "localtime",
    "fonts",
)
# Name resolution, bound only when the network is allowed.
ETC_NETWORK = ("resolv.conf", "hosts", "nsswitch.conf", "host.conf", "gai.conf")


@dataclass(frozen=True, slots=True)
class View:
    """Every host path a sandbox can reach. `required` binds fail the start when missing; `optional` ones (the
    /etc pieces) are bound when present."""

    data: str  # the host directory bound writable at DATA
    required: tuple[tuple[str, str], ...]  # (host source, path inside), read-only
    optional: tuple[tuple[str, str], ...]  # (host source, path inside), read-only, when present
    symlinks: tuple[tuple[str, str], ...]  # (target, path inside)
    network: bool
    path: str  # $PATH inside
    egress: str | None = None  # the host directory of the container's egress proxy (egress.py), when it has one


def host_view(
    data: str, python: Sequence[tuple[str, str]], bin_dir: str, *, network: bool, root: Path = Path("/")
) -> View:
    """The view of this host: /usr and its top-level links, the harmless /etc pieces, the server's Python
    (`python`: (source, path inside) pairs, interpreter.py) and `data` at /mnt/data."""
    required: list[tuple[str, str]] = [("/usr", "/usr")]
    symlinks: list[tuple[str, str]] = []
    for name in SYSTEM_LINKS:
        host = root / name
        if host.is_symlink():
            symlinks.append((os.readlink(host), f"/{name}"))
        elif host.is_dir():
            required.append((f"/{name}", f"/{name}"))
    required.extend(python)
    etc = ETC + (ETC_NETWORK if network else ())
    optional = tuple((f"/etc/{name}", f"/etc/{name}") for name in etc if (root / "etc" / name).exists())
    path = ":".join(dict.fromkeys([bin_dir, "/usr/local/bin", "/usr/bin", "/bin"]))
    return View(data, tuple(required), optional, tuple(symlinks), network, path)
