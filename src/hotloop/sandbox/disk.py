"""A container's /mnt/data: a tmpfs of `disk_bytes` and `max_files`, mounted by the server on the container's
directory, so the bound is the kernel's (ENOSPC), not a count taken after the fact (docs/sandbox.md, "Disk")."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from hotloop.sandbox import mounts
from hotloop.sandbox.bounds import Bounds


def tag(uid: int) -> str:
    """The tmpfs's source name: how its mounts are found again, at close or after a crash."""
    return f"hotloop-sandbox-{uid}"


def attach(directory: Path, stage: Path, bounds: Bounds, uid: int) -> None:
    """Mount the container's tmpfs at `stage` (where bwrap, running as `uid`, can reach it) and bind it on
    `directory` (where the server reads and writes the container's files). What `directory` held is copied in
    first and stays underneath, seen again after `detach`."""
    stage.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.mkdir(parents=True, exist_ok=True)
    mounts.tmpfs(str(stage), tag=tag(uid), size=bounds.disk_bytes, inodes=bounds.max_files + 1, uid=uid)
    try:
        if any(directory.iterdir()):
            shutil.copytree(directory, stage, symlinks=True, dirs_exist_ok=True)
            own(stage, uid)
        mounts.bind(str(stage), str(directory), readonly=False)
    except BaseException:
        detach(uid)
        raise


def own(root: Path, uid: int) -> None:
    """Give everything under `root` to the container's uid, never following a link."""
    os.chown(root, uid, uid, follow_symlinks=False)
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            os.chown(os.path.join(parent, name), uid, uid, follow_symlinks=False)


def detach(uid: int) -> None:
    """Unmount every mount of the container's tmpfs (its stage and the bind on its directory); its files go."""
    for point in mounts.tagged(tag(uid)):
        with contextlib.suppress(OSError):
            mounts.detach(point)


def used(directory: Path) -> int:
    """Bytes the container's files take, as its tmpfs counts them."""
    usage = os.statvfs(directory)
    return (usage.f_blocks - usage.f_bfree) * usage.f_frsize
