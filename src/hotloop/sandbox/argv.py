"""The command lines that start a process in a container, built without I/O: the launcher (cgroups, uid, rlimits)
and bwrap's own arguments (docs/sandbox.md, "How a process starts")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hotloop.sandbox import egress
from hotloop.sandbox.bounds import Bounds
from hotloop.sandbox.view import DATA, View

HOSTNAME = "sandbox"
# BLAS libraries start one thread per host core, and every thread counts against `Bounds.processes`: on a
# 64-core host numpy alone would spend the whole bound.
BLAS_THREADS = "2"
# What HTTP clients read their proxy from: pip, curl and requests the lowercase or uppercase name, urllib both.
PROXY_VARIABLES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")

# Run as root before anything else: the shell writes its own pid into each cgroup's `cgroup.procs`, so every process
# it becomes (setpriv, prlimit, bwrap, the command) and all they fork are in the cgroups from their first
# instruction; then it execs the rest of its arguments.
_JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


@dataclass(frozen=True, slots=True)
class Tools:
    """The host programs a launch runs, by absolute path (found by probe.py)."""

    bwrap: str = "/usr/bin/bwrap"
    setpriv: str = "/usr/bin/setpriv"
    prlimit: str = "/usr/bin/prlimit"
    unshare: str = "/usr/bin/unshare"
    shell: str = "/bin/sh"


def environment(view: View) -> dict[str, str]:
    """The whole environment inside: fixed, never the server's (it holds keys); the egress proxy's address where the
    container has one (forward.py serves it)."""
    proxy = {} if view.egress is None else dict.fromkeys(PROXY_VARIABLES, f"http://127.0.0.1:{egress.PORT}")
    return {
        **proxy,
        "PATH": view.path,
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": "/tmp/matplotlib",
        "OPENBLAS_NUM_THREADS": BLAS_THREADS,
        "OMP_NUM_THREADS": BLAS_THREADS,
        "MKL_NUM_THREADS": BLAS_THREADS,
    }


def bwrap_args(view: View, bounds: Bounds, env: Mapping[str, str]) -> list[str]:
    """bwrap's options: every namespace new (the network's too unless allowed), the view bound, a fresh /tmp and
    /dev/shm of `disk_bytes`, the root read-only, the working directory /mnt/data."""
    args = ["--unshare-all", "--unshare-user", "--disable-userns"]
    if view.network:
        args.append("--share-net")
    args += ["--die-with-parent", "--new-session", "--hostname", HOSTNAME, "--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    # The fresh /tmp first: a tree bound under it after (a server whose virtualenv lives in /tmp) stays visible.
    size = str(bounds.disk_bytes)
    args += ["--proc", "/proc", "--dev", "/dev", "--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs"]
    args += ["/dev/shm"]
    for source, dest in view.required:
        args += ["--ro-bind", source, dest]
    for target, dest in view.symlinks:
        args += ["--symlink", target, dest]
    for source, dest in view.optional:
        args += ["--ro-bind-try", source, dest]
    if view.egress is not None:  # the proxy's socket: the container's one way out (egress.py)
        args += ["--bind", view.egress, egress.INSIDE]
    args += ["--bind", view.data, DATA, "--chdir", DATA, "--remount-ro", "/"]
    return args


def rlimits(bounds: Bounds, *, memory: bool, cpu: bool = True) -> list[str]:
    """prlimit's options. RLIMIT_AS only when `memory` (no memory cgroup holds the whole tree): it bounds each
    process alone, and breaks programs that reserve address space they never touch. RLIMIT_CPU only when `cpu`:
    it counts a process's whole life, so a kernel that lives across calls has its CPU time counted per call by
    the host instead (kernel.py)."""
    options = [f"--nproc={bounds.processes}"]
    if cpu:
        options.append(f"--cpu={bounds.cpu_seconds}:{bounds.cpu_seconds + 1}")  # SIGXCPU, SIGKILL a second later
    options += [f"--fsize={bounds.file_bytes}", f"--nofile={bounds.open_files}", "--core=0"]
    if memory:
        options.append(f"--as={bounds.memory_bytes}")
    return options


def launcher(
    tools: Tools, command: Sequence[str], *, uid: int, procs: Sequence[str], limits: Sequence[str], args_fd: int
) -> list[str]:
    """The host command, each step exec'ing the next:
    - join the cgroups (`procs`: their cgroup.procs files);
    - die with the server (a SIGKILL when the thread that started it ends);
    - a pid namespace of its own with bwrap's monitor as its pid 1 (`unshare` waits for it): bwrap's monitor
      exits without reaping its sandbox's init, which a host whose pid 1 never reaps keeps as a zombie of the
      container's uid, counted against its process bound; the kernel reaps a pid namespace's every process when
      its pid 1 ends;
    - drop to `uid` (no groups, no new privileges) and set the rlimits;
    - bwrap, its options read from `args_fd` (the host paths they name never show in the sandbox's
      /proc/1/cmdline; bwrap 0.8 takes the command itself only on its command line)."""
    tail = [tools.setpriv, "--pdeathsig=KILL", "--", tools.unshare, "--pid", "--fork", "--kill-child", "--"]
    tail += [tools.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", "--"]
    tail += [tools.prlimit, *limits, "--", tools.bwrap, "--args", str(args_fd), "--", *command]
    if not procs:
        return tail
    return [tools.shell, "-c", _JOIN, "sh", *procs, "--", *tail]
