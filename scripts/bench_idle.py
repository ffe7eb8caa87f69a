"""What the default server spends with no traffic (docs/benchmarks-history.md, "Idle CPU of the default server").
`python scripts/bench_idle.py [--settle-s 5] [--seconds 20] [--workers N]`.

Starts `hotloop serve` with its defaults (hotloop-sim, SQLite in a temporary data directory, one worker per core
unless `--workers`), waits until it answers, lets it settle, then reads each of its processes' CPU clock
(`process_cpu_seconds`: the scheduler's, in nanoseconds, on Linux) before and after `--seconds` of silence. Prints
ms of CPU per second for each process and the whole server.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import psutil

from hotloop.bench.server_process import process_cpu_seconds


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(port: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("the server did not start")


def cpu_by_process(root: psutil.Process) -> dict[int, tuple[str, float]]:
    found = {}
    for process in [root, *root.children(recursive=True)]:
        try:
            role = "supervisor" if process.pid == root.pid and root.children() else "worker"
            found[process.pid] = (role, process_cpu_seconds(process))
        except psutil.Error:
            continue
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--settle-s", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=0, help="0: the default, one per core")
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="hotloop-idle-") as data:
        env = {**os.environ, "HOTLOOP_DATA_DIR": data, "HOTLOOP_LOG_LEVEL": "warning"}
        if args.workers:
            env["HOTLOOP_WORKERS"] = str(args.workers)
        command = [sys.executable, "-m", "hotloop", "serve", "--host", "127.0.0.1", "--port", str(port)]
        server = subprocess.Popen(command, env=env, start_new_session=True)
        try:
            wait_ready(port)
            time.sleep(args.settle_s)
            root = psutil.Process(server.pid)
            before = cpu_by_process(root)
            time.sleep(args.seconds)
            after = cpu_by_process(root)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(30)
    total = 0.0
    print(f"idle CPU over {args.seconds:g} s (load average {os.getloadavg()[0]:.2f}):")
    for pid, (role, cpu) in sorted(after.items()):
        if pid not in before:
            continue
        ms_per_s = (cpu - before[pid][1]) * 1000 / args.seconds
        total += ms_per_s
        print(f"  {role:<10} pid {pid:<8} {ms_per_s:6.3f} ms/s")
    print(f"  {'the server':<23} {total:6.3f} ms/s")


if __name__ == "__main__":
    main()
