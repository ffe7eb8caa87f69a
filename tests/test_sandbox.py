"""The sandbox (src/hotloop/sandbox, docs/sandbox.md) with real bubblewrap and real processes: what a container can
and cannot reach, its kernel, its shell, and issue 40's hostile cases — each contained, with a clear output, and
the server and the other containers unaffected. The first tests are pure (the fast tier); the rest start
sandboxes, as root (CI's machine), installing bubblewrap when missing."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hotloop.sandbox import Bounds, Closed, Container, Full, Sandbox, memory_limit_bytes, probe
from hotloop.sandbox.argv import Tools, bwrap_args, environment, launcher, rlimits
from hotloop.sandbox.bounds import MIB
from hotloop.sandbox.cgroups import Cgroup
from hotloop.sandbox.disk import tag
from hotloop.sandbox.files import parts
from hotloop.sandbox.interpreter import server_interpreter
from hotloop.sandbox.mounts import tagged
from hotloop.sandbox.output import Capture, shorten
from hotloop.sandbox.probe import check
from hotloop.sandbox.view import View, host_view
from sandbox_support import ensure_bubblewrap

ROOT = Path(__file__).resolve().parents[1]
SMALL = Bounds(memory_bytes=256 * MIB, processes=32, disk_bytes=16 * MIB, max_files=256, wall_seconds=20)


# -- pure: the arguments, bounds and output cuts ------------------------------------------------------------------


def _view(network: bool = False) -> View:
    return host_view("/run/stage/1", [("/opt/py", "/opt/py")], "/opt/py/bin", network=network)


@pytest.mark.fast
def test_bwrap_gets_new_namespaces_a_read_only_system_and_no_host_secrets() -> None:
    view = _view()
    args = bwrap_args(view, Bounds(), environment(view))
    assert args[:3] == ["--unshare-all", "--unshare-user", "--disable-userns"] and "--share-net" not in args
    assert {"--die-with-parent", "--new-session", "--clearenv"} <= set(args)
    binds = {args[i + 1] for i, arg in enumerate(args) if arg in ("--bind", "--ro-bind", "--ro-bind-try")}
    assert "/" not in binds and "/etc" not in binds and "/root" not in binds and "/etc/shadow" not in binds
    assert "/etc/passwd" not in binds and "/etc/resolv.conf" not in binds
    assert args[args.index("--bind") + 1 : args.index("--bind") + 3] == ["/run/stage/1", "/mnt/data"]
    assert args[-2:] == ["--remount-ro", "/"]  # last: everything bound, then the root made read-only
    assert "--share-net" in bwrap_args(_view(network=True), Bounds(), {})
    networked = {dest for _, dest in host_view("/d", [], "/usr/bin", network=True).optional}
    assert ("/etc/resolv.conf" in networked) == Path("/etc/resolv.conf").exists()
    # A server whose virtualenv lives in /tmp (a CI checkout): its bind comes after the fresh /tmp, or it is hidden.
    in_tmp = host_view("/d", [("/tmp/ci/.venv", "/tmp/ci/.venv")], "/tmp/ci/.venv/bin", network=False)
    args = bwrap_args(in_tmp, Bounds(), {})
    assert args.index("/tmp") < args.index("/tmp/ci/.venv")


@pytest.mark.fast
def test_the_environment_is_fixed_and_the_servers_never_leaks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOTLOOP_API_KEYS", "sk-secret")
    env = environment(_view())
    assert env["PATH"].startswith("/opt/py/bin:") and env["HOME"] == "/tmp" and env["MPLBACKEND"] == "Agg"
    assert not any("sk-secret" in value for value in env.values()) and "HOTLOOP_API_KEYS" not in env


@pytest.mark.fast
def test_the_launcher_joins_the_cgroups_then_drops_root_then_sets_the_rlimits() -> None:
    tools = Tools()
    argv = launcher(tools, ["python3"], uid=1234, procs=["/cg/m/cgroup.procs"], limits=["--nproc=8"], args_fd=5)
    assert argv[0] == "/bin/sh" and argv[4] == "/cg/m/cgroup.procs" and argv[5] == "--"
    tail = argv[6:]
    assert tail[:8] == [
        "/usr/bin/setpriv",
        "--pdeathsig=KILL",
        "--",
        "/usr/bin/unshare",
        "--pid",
        "--fork",
        "--kill-child",
        "--",
    ]
    assert tail[8:14] == ["/usr/bin/setpriv", "--reuid=1234", "--regid=1234", "--clear-groups", "--no-new-privs", "--"]
    assert tail[14:] == ["/usr/bin/prlimit", "--nproc=8", "--", "/usr/bin/bwrap", "--args", "5", "--", "python3"]
    assert launcher(tools, ["x"], uid=1, procs=[], limits=[], args_fd=3)[0] == "/usr/bin/setpriv"
    assert not any(limit.startswith("--as=") for limit in rlimits(Bounds(), memory=False))
    assert f"--as={Bounds().memory_bytes}" in rlimits(Bounds(), memory=True)
    assert "--cpu=60:61" in rlimits(Bounds(), memory=False)
    assert not any(limit.startswith("--cpu") for limit in rlimits(Bounds(), memory=False, cpu=False))


@pytest.mark.fast
def test_bounds_and_memory_limits() -> None:
    assert memory_limit_bytes("1g") == 1 << 30 and memory_limit_bytes("4G") == 4 << 30
    assert memory_limit_bytes("512m") == 512 << 20
    for bad in ("", "0g", "1t", "g"):
        with pytest.raises(ValueError):
            memory_limit_bytes(bad)
    with pytest.raises(ValueError):
        Bounds(processes=8)
    assert Bounds(wall_seconds=10).wall(None) == 10 and Bounds(wall_seconds=10).wall(60) == 10
    assert Bounds(wall_seconds=10).wall(2.5) == 2.5


@pytest.mark.fast
def test_output_is_cut_in_the_middle_and_says_so() -> None:
    capture = Capture(4)
    for chunk in (b"abc", b"defgh", b"ijkl"):
        capture.feed(chunk)
    assert capture.text() == "abcd\n[... 4 bytes omitted ...]\nijkl"
    whole = Capture(10)
    whole.feed(b"short")
    assert whole.text() == "short"
    cut = shorten("x" * 50 + "y" * 50, 60)
    assert len(cut) <= 60 and cut.startswith("x") and cut.endswith("y") and "omitted" in cut
    assert shorten("tiny", 60) == "tiny"


@pytest.mark.fast
def test_container_file_names_stay_inside() -> None:
    assert parts("a/./b.txt") == ["a", "b.txt"]
    for bad in ("/etc/shadow", "../x", "a/../../x", "", "."):
        with pytest.raises(ValueError):
            parts(bad)


@pytest.mark.fast
def test_the_kernels_python_is_named_by_a_normalized_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server started as `../.venv/bin/python` has the `..` in sys.executable: the sandbox, which binds only the
    interpreter's own trees, has no such path (its kernel did not start: `bwrap: execvp …/tests/../.venv/…`)."""
    up = os.path.join(os.path.dirname(sys.prefix), "tests", "..", os.path.basename(sys.prefix), "bin", "python")
    monkeypatch.setattr(sys, "executable", up)
    found = server_interpreter()
    assert found.executable == os.path.normpath(up) and found.bin_dir == os.path.dirname(os.path.normpath(up))


@pytest.mark.fast
def test_a_host_without_bubblewrap_is_refused_with_the_reason() -> None:
    support = check(bwrap="no-such-bwrap")
    assert not support.available and "bubblewrap" in support.reason


# -- real sandboxes -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def available() -> None:
    ensure_bubblewrap()
    support = probe()
    if not support.available:  # test_this_host_runs_the_sandbox fails with the reason; the rest need not
        pytest.skip(f"the sandbox cannot run here: {support.reason}")


@pytest.fixture(scope="module")
async def sandbox(available: None) -> AsyncIterator[Sandbox]:
    box = Sandbox()
    yield box
    await box.close()


async def _open(sandbox: Sandbox, directory: Path, bounds: Bounds = SMALL, **kwargs: bool) -> Container:
    return await sandbox.open(directory, bounds, **kwargs)


def test_this_host_runs_the_sandbox_with_cgroups() -> None:
    ensure_bubblewrap()
    support = probe()
    assert support.available, support.reason
    assert (support.memory, support.processes) == ("cgroup", "cgroup")  # root, with cgroup v1 (this machine kind)


ISOLATION = """
import json, os, socket
def reach(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return "connected"
    except OSError as error:
        return type(error).__name__
def readable(path):
    try:
        with open(path, "rb") as file:
            file.read(1)
        return True
    except OSError:
        return False
pids = [name for name in os.listdir("/proc") if name.isdigit()]
print(json.dumps({
    "ports": [reach(port) for port in (6379, 5432, HOST_PORT)],
    "shadow": readable("/etc/shadow"), "passwd": os.path.exists("/etc/passwd"),
    "root": sorted(os.listdir("/root")) if os.path.exists("/root") else [],
    "secret": readable(SECRET) or os.path.exists(os.path.dirname(SECRET)),
    "other": os.path.exists(OTHER) or os.path.exists("/mnt/data/b-only.txt"),
    "env": sorted(os.environ), "uid": os.getuid(), "hostname": socket.gethostname(),
    "pids": len(pids),
    "cmdlines": b" ".join(open(f"/proc/{pid}/cmdline", "rb").read() for pid in pids).decode(errors="replace"),
    "usr": os.access("/usr/bin", os.W_OK), "dev": sorted(os.listdir("/dev")),
}))
"""


async def test_a_container_reaches_nothing_of_the_server(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "server-data"
    data.mkdir()
    (data / "secret.key").write_bytes(b"the server's key")
    monkeypatch.setenv("HOTLOOP_TEST_SECRET", "sk-do-not-leak")
    listener = socket.create_server(("127.0.0.1", 0))  # a service of the server's on its loopback
    port = listener.getsockname()[1]
    a, b = await _open(sandbox, tmp_path / "a"), await _open(sandbox, tmp_path / "b")
    try:
        b.write("b-only.txt", b"b's")
        code = ISOLATION.replace("HOST_PORT", str(port)).replace("SECRET", repr(str(data / "secret.key")))
        run = await a.python(code.replace("OTHER", repr(str(tmp_path / "b"))))
        assert run.error is None, run.logs
        seen = json.loads(run.stdout)
        assert all(outcome != "connected" for outcome in seen["ports"]), seen["ports"]
        assert not seen["shadow"] and not seen["passwd"] and not seen["secret"] and not seen["other"]
        assert seen["root"] in ([], [".pyenv"])  # at most the path to the server's own Python, read-only
        assert "HOTLOOP_TEST_SECRET" not in seen["env"] and "PATH" in seen["env"]
        assert seen["uid"] not in (0, os.getuid(), b.uid) and seen["hostname"] == "sandbox"
        assert seen["pids"] <= 4 and "pytest" not in seen["cmdlines"]  # its own processes only, not the host's
        assert not seen["usr"] and "sda" not in seen["dev"] and "vda" not in seen["dev"]
        shell = await a.shell(["cat /etc/shadow", "cat /proc/1/environ | tr '\\0' '\\n' | grep -c SECRET"])
        assert shell[0].exit_code != 0 and shell[1].stdout.strip() == "0"
    finally:
        listener.close()
        await asyncio.gather(a.close(), b.close())


async def test_network_is_the_hosts_only_when_allowed(sandbox: Sandbox, tmp_path: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {listener.getsockname()[1]}), timeout=2).close()"
    closed, shared = await _open(sandbox, tmp_path / "a"), await _open(sandbox, tmp_path / "b", network=True)
    try:
        refused = await closed.python(code)
        assert refused.error is not None and "ConnectionRefusedError" in refused.error
        # Allowed means the host's network whole, its loopback too (docs/sandbox.md): the tools must say so.
        assert (await shared.python(code)).error is None
    finally:
        listener.close()
        await asyncio.gather(closed.close(), shared.close())


async def test_the_kernel_keeps_its_variables_and_shows_the_last_value(sandbox: Sandbox, tmp_path: Path) -> None:
    container = await _open(sandbox, tmp_path / "c")
    try:
        first = await container.python("x = 41\nprint('hello')")
        assert (first.stdout, first.result, first.error, first.notice) == ("hello\n", None, None, None)
        second = await container.python("x + 1")
        assert second.result == "42" and second.logs == "42"
        failed = await container.python("def f():\n    return 1 / 0\nf()")
        assert failed.error is not None and "ZeroDivisionError" in failed.error and "return 1 / 0" in failed.error
        assert "<string>" not in failed.error and "execute" not in failed.error  # none of the kernel's own frames
        syntax = await container.python("x +")
        assert syntax.error is not None and "SyntaxError" in syntax.error
        assert syntax.error.startswith('  File "<cell 4>", line 1') and "ast.py" not in syntax.error  # as a REPL does
        assert (await container.python("raise SystemExit(3)")).error is not None
        forked = await container.python("import os\nif os.fork() == 0:\n    pass  # the child must not answer\n'ok'")
        assert forked.result == "'ok'"
        wrote = await container.python(
            "import subprocess\nsubprocess.run(['echo', 'from a child'])\nopen('out.csv', 'w').write('a,b\\n')"
        )
        assert wrote.stdout == "from a child\n" and wrote.files == ("out.csv",)
        assert container.read("out.csv") == b"a,b\n" and list(container.files()) == ["out.csv"]
        before = container.files()
        assert (await container.python("x")).result == "41"  # still the same kernel
        shell = await container.shell(["cat out.csv; python3 -c 'import numpy' && echo numpy; echo c >> out.csv"])
        assert shell[0].stdout.splitlines() == ["a,b", "numpy"] and shell[0].exit_code == 0
        assert container.files()["out.csv"] != before["out.csv"]
    finally:
        await container.close()


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib is an optional extra")
async def test_figures_come_back_as_images(sandbox: Sandbox, tmp_path: Path) -> None:
    container = await _open(sandbox, tmp_path / "c")
    try:
        run = await container.python("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
        assert run.error is None and run.stderr == "", run.logs
        assert len(run.images) == 1 and run.images[0].png.startswith(b"\x89PNG")
        assert run.images[0].name in run.files
    finally:
        await container.close()


FORK_BOMB = """
import os, time
children = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        children += 1
finally:
    print("forked", children)
"""


async def test_a_fork_bomb_is_contained_and_the_others_run_meanwhile(sandbox: Sandbox, tmp_path: Path) -> None:
    bomb, other = await _open(sandbox, tmp_path / "bomb"), await _open(sandbox, tmp_path / "other")
    try:
        forked, calm = await asyncio.gather(bomb.python(FORK_BOMB), other.python("sum(range(10))"))
        assert forked.error is not None and "BlockingIOError" in forked.error, forked.logs
        assert 0 < int(forked.stdout.split()[-1]) < SMALL.processes
        assert calm.result == "45"
        assert subprocess.run(["true"], check=False).returncode == 0  # the server still forks
        # The bomb's sleepers hold every process of its container: even its shell cannot start, and says so.
        (refused,) = await bomb.shell(["echo never"])
        assert refused.exit_code != 0 and "Resource temporarily unavailable" in refused.stderr
        started = time.monotonic()
        (shell,) = await other.shell([":(){ :|:& };:; sleep 10"], timeout=2)
        assert shell.timed_out and time.monotonic() - started < 6
        assert "Resource temporarily unavailable" in shell.stderr  # bash's `fork: retry: ...` at the bound
        assert (await other.python("1 + 1")).result == "2"  # its processes went with the command's namespace
    finally:
        await asyncio.gather(bomb.close(), other.close())


async def test_a_memory_hog_is_killed_at_the_limit_and_the_kernel_restarts(sandbox: Sandbox, tmp_path: Path) -> None:
    container = await _open(sandbox, tmp_path / "c", Bounds(memory_bytes=128 * MIB, wall_seconds=20))
    try:
        hog = await container.python("x = 1\nhog = b'x' * (512 << 20)")
        assert hog.error is not None and "memory limit (128 MiB)" in hog.error and "fresh kernel" in hog.error
        after = await container.python("'x' in globals()")
        assert after.result == "False" and after.notice is not None and "memory limit" in after.notice
    finally:
        await container.close()


async def test_without_cgroups_rlimits_bound_memory_per_process(available: None, tmp_path: Path) -> None:
    box = Sandbox(cgroups=False)
    container = await _open(box, tmp_path / "c", Bounds(memory_bytes=512 * MIB, wall_seconds=20))
    try:
        hog = await container.python("x = 1\nhog = b'x' * (1 << 30)")
        assert hog.error is not None and "MemoryError" in hog.error
        assert (await container.python("x")).result == "1"  # refused, not killed: the kernel lives on
    finally:
        await box.close()


async def test_an_endless_loop_ends_at_the_wall_bound_on_a_fresh_kernel(sandbox: Sandbox, tmp_path: Path) -> None:
    container = await _open(sandbox, tmp_path / "c")
    try:
        await container.python("x = 1")
        started = time.monotonic()
        loop = await container.python("print('started', flush=True)\nwhile True:\n    pass", timeout=1)
        assert loop.timed_out and 1 <= time.monotonic() - started < 4
        assert loop.stdout == "started\n" and loop.error is not None and "ran past its 1 s" in loop.error
        after = await container.python("x")
        assert after.error is not None and "NameError" in after.error
        assert after.notice is not None and "ran past its 1 s" in after.notice
    finally:
        await container.close()


async def test_cpu_time_is_bounded_per_call(sandbox: Sandbox, tmp_path: Path) -> None:
    bounds = Bounds(cpu_seconds=1, wall_seconds=20, processes=32, memory_bytes=256 * MIB)
    container = await _open(sandbox, tmp_path / "c", bounds)
    try:
        busy = "import time\nend = time.process_time() + 0.7\nwhile time.process_time() < end:\n    pass\n'done'"
        for _ in range(2):  # 1.4 s in all, each call under its 1 s: the bound is re-armed per call
            assert (await container.python(busy)).result == "'done'"
        spin = await container.python("while True:\n    pass")
        assert not spin.timed_out and spin.error is not None and "used its 1 s of CPU time" in spin.error
    finally:
        await container.close()


async def test_writing_past_the_disk_bounds_fails_with_enospc(sandbox: Sandbox, tmp_path: Path) -> None:
    bounds = Bounds(disk_bytes=8 * MIB, max_files=32, file_bytes=4 * MIB, memory_bytes=256 * MIB, wall_seconds=20)
    container = await _open(sandbox, tmp_path / "c", bounds)
    try:
        fill = "for i in range(4):\n    open(f'part{i}', 'wb').write(b'x' * (3 << 20))"
        full = await container.python(fill)
        assert full.error is not None and "No space left on device" in full.error
        big = await container.python(
            "import glob, os\nfor name in glob.glob('part*'):\n    os.remove(name)\n"
            "open('big', 'wb').write(b'x' * (5 << 20))"
        )
        assert big.error is not None and "File too large" in big.error
        many = await container.python("import os\nfor i in range(100):\n    open(f'f{i}', 'w').close()")
        assert many.error is not None and "No space left on device" in many.error
        shell = await container.shell(["head -c 6000000 /dev/zero > /tmp/t", "rm -f part* f* big; echo ok"])
        assert shell[0].exit_code != 0 and shell[1].stdout == "ok\n"
        with pytest.raises(OSError):
            container.write("upload.bin", b"x" * (9 * MIB))
    finally:
        await container.close()


SYMLINKS = """
import os
seen = []
for name in ("shadow", "secret"):
    try:
        seen.append(open(name).read())
    except OSError as error:
        seen.append(type(error).__name__)
os.symlink("/etc/hostname", "planted")
seen, sorted(os.listdir("up"))
"""


async def test_a_symlink_cannot_reach_outside(sandbox: Sandbox, tmp_path: Path) -> None:
    secret = tmp_path / "secret.key"
    secret.write_bytes(b"the server's key")
    directory = tmp_path / "c"
    directory.mkdir()
    (directory / "shadow").symlink_to("/etc/shadow")
    (directory / "secret").symlink_to(secret)
    (directory / "up").symlink_to("../../../../..")
    container = await _open(sandbox, directory)
    try:
        run = await container.python(SYMLINKS)
        assert run.error is None, run.logs
        assert "FileNotFoundError', 'FileNotFoundError'" in (run.result or "") and "pytest" not in (run.result or "")
        for name in ("shadow", "secret", "planted", "up/etc/shadow"):
            with pytest.raises(OSError):
                container.read(name)  # the server, root, follows no link either
        assert "planted" not in run.files
    finally:
        await container.close()


async def test_fifty_containers_at_once_are_bounded(available: None, tmp_path: Path) -> None:
    box = Sandbox(max_containers=40)
    opened = await asyncio.gather(*(box.open(tmp_path / f"c{i}", SMALL) for i in range(50)), return_exceptions=True)
    try:
        containers = [item for item in opened if isinstance(item, Container)]
        refused = [item for item in opened if isinstance(item, Full)]
        assert len(containers) == 40 and len(refused) == 10, [item for item in opened if isinstance(item, Exception)]
        assert "all 40 containers" in str(refused[0])
        runs = await asyncio.gather(*(container.python("6 * 7") for container in containers))
        assert all(run.result == "42" for run in runs)
        assert len({container.uid for container in containers}) == 40
    finally:
        await box.close()
    assert box.live == 0


async def test_a_kernel_killed_mid_call_is_reported_and_replaced(sandbox: Sandbox, tmp_path: Path) -> None:
    container = await _open(sandbox, tmp_path / "c")
    try:
        killed = await container.python("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
        assert killed.error is not None and "killed by signal 9 (SIGKILL)" in killed.error and not killed.timed_out
        exited = await container.python("import os\nos._exit(3)")
        assert exited.error is not None and "exited with status 3" in exited.error
        assert exited.notice is not None and "SIGKILL" in exited.notice
        assert (await container.python("2 + 2")).result == "4"
    finally:
        await container.close()


async def test_shell_commands_give_exit_codes_timeouts_and_cut_output(sandbox: Sandbox, tmp_path: Path) -> None:
    container = await _open(sandbox, tmp_path / "c")
    try:
        started = time.monotonic()
        runs = await container.shell(
            ["echo out; echo err >&2", "exit 7", "sleep 30", "yes | head -c 100000", "sleep 30 & echo bg"],
            timeout=1,
            max_output_length=1000,
        )
        assert time.monotonic() - started < 8
        assert (runs[0].stdout, runs[0].stderr, runs[0].exit_code) == ("out\n", "err\n", 0)
        assert runs[1].exit_code == 7 and runs[2].timed_out and runs[2].exit_code is None
        assert len(runs[3].stdout) <= 1000 and "omitted" in runs[3].stdout and runs[3].exit_code == 0
        assert runs[4].stdout == "bg\n" and runs[4].exit_code == 0  # a background process does not hold it open
    finally:
        await container.close()


async def test_close_leaves_nothing_behind(sandbox: Sandbox, tmp_path: Path) -> None:
    directory = tmp_path / "c"
    container = await _open(sandbox, directory)
    uid = container.uid
    await container.python("open('kept-while-open', 'w').write('x')")
    await container.shell(["sleep 60 >/dev/null 2>&1 &"])
    await container.close()
    assert not os.path.ismount(directory) and list(directory.iterdir()) == []
    assert not (sandbox.state_dir / "data" / str(uid)).exists()
    assert not any(Path("/sys/fs/cgroup").glob(f"*/**/hotloop-sandbox/{uid}"))
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _uid_of(pid) == uid]  # zombies included
    with open(sandbox.state_dir / "uids" / str(uid), "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the uid is free for the next container
    with pytest.raises(Closed):
        await container.python("1")


def _uid_of(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


CRASHING = """
import asyncio, sys
from hotloop.sandbox import Sandbox
async def main():
    container = await Sandbox().open(sys.argv[1])
    print(container.uid, flush=True)
    await asyncio.sleep(60)
asyncio.run(main())
"""


async def test_a_crashed_servers_containers_die_with_it_and_are_swept(available: None, tmp_path: Path) -> None:
    server = subprocess.Popen([sys.executable, "-c", CRASHING, str(tmp_path / "c")], stdout=subprocess.PIPE)
    assert server.stdout is not None
    uid = int(server.stdout.readline())
    server.kill()  # no close: its tmpfs and cgroups stay behind
    server.wait()
    deadline = time.monotonic() + 5
    while _live(uid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not _live(uid)  # its processes went with it (--pdeathsig)
    assert tagged(tag(uid)) and Cgroup.existing(str(uid)).paths
    box = Sandbox()  # the next server: its first open sweeps what is left
    await box.open(tmp_path / "next", SMALL)
    try:
        assert not tagged(tag(uid)) and not Cgroup.existing(str(uid)).paths
        assert not os.path.ismount(tmp_path / "c")
    finally:
        await box.close()


def _live(uid: int) -> list[str]:
    """The processes of `uid` that are not zombies."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and _uid_of(pid) == uid:
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(pid)
    return found


async def _until(found: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not found():
        assert time.monotonic() < deadline, "not in time"
        await asyncio.sleep(0.02)


async def test_a_stopped_or_cancelled_command_ends_with_its_tree_and_the_kernel_lives_on(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """A steer (`stop`) or a cancelled call kills the command under way with all it started, within a second; the
    kernel's processes are the only ones of the container's uid left, and the kernel keeps its variables."""
    container = await _open(sandbox, tmp_path / "c")
    try:
        await container.python("x = 41")
        kernel = set(_live(container.uid))
        stop = asyncio.Event()
        call = asyncio.ensure_future(
            container.shell(["echo before; sleep 30 & sleep 31; echo after", "echo never"], stop=stop)
        )
        await _until(lambda: len(_live(container.uid)) > len(kernel) + 3)  # the monitor, init, bash, both sleeps
        started = time.monotonic()
        stop.set()
        [run] = await asyncio.wait_for(call, 5)
        assert time.monotonic() - started < 1.5 and set(_live(container.uid)) == kernel
        assert (run.stdout, run.stderr, run.exit_code, run.stopped) == ("before\n", "", 137, True)  # no launcher noise
        cancelled = asyncio.ensure_future(container.shell(["sleep 30"]))
        await _until(lambda: len(_live(container.uid)) > len(kernel) + 2)
        started = time.monotonic()
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(cancelled, 5)
        assert time.monotonic() - started < 1.5 and set(_live(container.uid)) == kernel
        [after] = await container.shell(["echo again"])
        assert (after.stdout, after.exit_code, after.stopped) == ("again\n", 0, False)
        again = await container.python("x + 1")
        assert (again.result, again.notice) == ("42", None)
    finally:
        await container.close()


@pytest.mark.parametrize("wait", [0.0, 0.3])
async def test_a_cancelled_call_interrupts_its_code_and_the_kernel_keeps_its_variables(
    sandbox: Sandbox, tmp_path: Path, wait: float
) -> None:
    """Cancelling a Python call raises KeyboardInterrupt in its code (whether it had begun or not: the interrupt is
    repeated until the cell ends); the next call runs on the same kernel, its answer its own."""
    container = await _open(sandbox, tmp_path / "c")
    try:
        await container.python("x = 41")
        call = asyncio.ensure_future(container.python("import time\nfor _ in range(300): time.sleep(0.1)\n'late'"))
        await asyncio.sleep(wait)
        started = time.monotonic()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(call, 5)
        assert time.monotonic() - started < 1.5
        again = await container.python("x + 1")
        assert (again.result, again.notice, again.error) == ("42", None, None)
    finally:
        await container.close()


async def test_a_stopped_call_keeps_what_it_printed_and_its_kernel(sandbox: Sandbox, tmp_path: Path) -> None:
    """`stop` set (a steer) interrupts the cell: the run says `stopped`, with what it printed and its
    KeyboardInterrupt; the kernel lives on. Code that will not end is stopped with its kernel, still `stopped`."""
    container = await _open(sandbox, tmp_path / "c")
    try:
        await container.python("x = 41")
        stop = asyncio.Event()
        loop = "import time\nprint('waiting', flush=True)\nfor _ in range(300): time.sleep(0.1)"
        call = asyncio.ensure_future(container.python(loop, stop=stop))
        await asyncio.sleep(0.5)
        started = time.monotonic()
        stop.set()
        run = await asyncio.wait_for(call, 5)
        assert time.monotonic() - started < 1.5
        assert (run.stopped, run.lost, run.stdout) == (True, False, "waiting\n")
        assert run.error is not None and "KeyboardInterrupt" in run.error
        again = await container.python("x + 1")
        assert (again.result, again.notice, again.stopped) == ("42", None, False)
        stubborn = (
            "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        ..."
        )
        stop = asyncio.Event()
        call = asyncio.ensure_future(container.python(stubborn, stop=stop))
        await asyncio.sleep(0.3)
        stop.set()
        run = await asyncio.wait_for(call, 10)
        assert (run.stopped, run.lost) == (True, True) and "did not end within 2 s" in (run.error or "")
        fresh = await container.python("1 + 1")
        assert fresh.result == "2" and fresh.notice is not None
    finally:
        await container.close()


async def test_code_that_outlasts_the_interrupt_has_its_kernel_stopped(sandbox: Sandbox, tmp_path: Path) -> None:
    container = await _open(sandbox, tmp_path / "c")
    try:
        stubborn = (
            "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        ..."
        )
        call = asyncio.ensure_future(container.python(stubborn))
        await asyncio.sleep(0.3)
        started = time.monotonic()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(call, 10)
        assert time.monotonic() - started < 5
        fresh = await container.python("1 + 1")
        assert fresh.result == "2" and fresh.notice is not None and "did not end when interrupted" in fresh.notice
    finally:
        await container.close()
