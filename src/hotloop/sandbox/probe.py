"""Whether this host can run the sandbox, and how it holds each bound — asked once; where it cannot, the reason,
for the tools that need it to be refused by name (never run unsandboxed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from hotloop.sandbox import cgroups, mounts
from hotloop.sandbox.argv import Tools
from hotloop.sandbox.view import host_view

PROBE_UID = 65534  # nobody: the probe's trial sandbox needs no uid of its own
PROBE_SECONDS = 20.0


@dataclass(frozen=True, slots=True)
class Support:
    """`reason` is empty when `available`. `memory` and `processes` say what holds those bounds: "cgroup" (the
    whole tree) or "rlimit" (RLIMIT_AS per process; RLIMIT_NPROC per uid, one uid per container)."""

    available: bool
    reason: str
    tools: Tools
    memory: str = "rlimit"
    processes: str = "rlimit"


@cache
def probe() -> Support:
    """This host's support, found once per process (it runs a trial sandbox: ~10 ms)."""
    return check()


def check(*, bwrap: str = "bwrap", cgroup_root: str = str(cgroups.ROOT)) -> Support:
    """The checks behind `probe`, uncached, with the programs and cgroup mount to look for."""
    found = _tools(bwrap)
    if isinstance(found, str):
        return Support(False, found, Tools())
    if sys.platform != "linux":
        return Support(False, "the sandbox runs on Linux only", found)
    if os.geteuid() != 0:
        return Support(False, _NOT_ROOT, found)
    why = _mount_works() or _trial(found)
    if why:
        return Support(False, why, found)
    memory, pids = cgroups.available(Path(cgroup_root))
    return Support(True, "", found, "cgroup" if memory else "rlimit", "cgroup" if pids else "rlimit")


_NOT_ROOT = (
    f"the sandbox needs the server to run as root (it runs as uid {os.geteuid()}): each container gets a uid of "
    "its own, a bounded tmpfs and cgroups, then drops every privilege (docs/sandbox.md)"
)


def _tools(bwrap: str) -> Tools | str:
    paths = [shutil.which(name) for name in (bwrap, "setpriv", "prlimit", "unshare", "sh")]
    if paths[0] is None:
        return "bubblewrap (bwrap) is not installed: install Debian's 'bubblewrap' package"
    if None in paths:
        return "setpriv, prlimit and unshare (util-linux) are needed to start the sandbox"
    return Tools(*(path for path in paths if path is not None))


def _mount_works() -> str:
    """The container's disk bound is a tmpfs the server mounts: without mount(2) there is no bound."""
    with tempfile.TemporaryDirectory(prefix="hotloop-probe-") as directory:
        try:
            mounts.tmpfs(directory, tag="hotloop-probe", size=1 << 20, inodes=16, uid=PROBE_UID)
            mounts.detach(directory)
        except OSError as error:
            return f"the server cannot mount the containers' bounded tmpfs: {error}"
    return ""


def _trial(tools: Tools) -> str:
    """Run `true` in a minimal sandbox as an unprivileged uid: user namespaces off, a runtime's seccomp profile
    forbidding them, or an unmountable /proc all show here, in bwrap's own words."""
    view = host_view("/nonexistent", (), "/usr/bin", network=False)
    command = [tools.unshare, "--pid", "--fork", "--kill-child", "--"]
    command += [tools.setpriv, f"--reuid={PROBE_UID}", f"--regid={PROBE_UID}", "--clear-groups", "--no-new-privs"]
    command += [tools.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent"]
    for source, dest in view.required:
        command += ["--ro-bind", source, dest]
    for target, dest in view.symlinks:
        command += ["--symlink", target, dest]
    command += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--", "/usr/bin/true"]
    try:
        done = subprocess.run(command, capture_output=True, timeout=PROBE_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bubblewrap could not be run: {error}"
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
        return f"bubblewrap cannot create the sandbox's namespaces here ({said}): user namespaces are off or forbidden"
    return ""
