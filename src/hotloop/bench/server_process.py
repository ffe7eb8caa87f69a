"""The benchmarks' servers in their own processes (so the client's CPU is not the server's): `hotloop serve` (the
load scenario's, and the agent loop's unless --in-process-server), and the floor server (bench/floor.py) through the
same `ChildServer`; the CPU time and peak memory of such a process and its workers, sampled with psutil."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

import httpx
import msgspec

from hotloop.config import Upstream

UPSTREAM_MODEL = "upstream"  # the one model of a hotloop in front of --upstream


def bench_settings(
    upstream: Upstream | None = None, context_window: int | None = None, mcp_allowed_urls: Sequence[str] = ()
) -> dict[str, Any]:
    """The settings of the agent loop's own hotloop, in this process or another: hotloop-sim only, or the one
    upstream model; the simulator's context window; the MCP servers a request may name (`--mcp`: the bench's)."""
    model = "hotloop-sim" if upstream is None else UPSTREAM_MODEL
    settings: dict[str, Any] = {
        "models": [model],
        "default_model": model,
        "upstreams": {} if upstream is None else {UPSTREAM_MODEL: upstream},
        "log_level": "warning",
        "ws_ping_interval_s": 0,  # no pings in the middle of a measurement
        "mcp_allowed_urls": list(mcp_allowed_urls),
    }
    if context_window:
        settings["sim_context_window"] = context_window
    return settings


def settings_env(values: dict[str, Any]) -> dict[str, str]:
    """Settings as the HOTLOOP_* variables `hotloop serve` reads (config.py `_coerce`): a list comma-separated, a
    table (upstreams) as JSON, anything else as its text."""
    return {f"HOTLOOP_{name.upper()}": _env_value(value) for name, value in values.items()}


def _env_value(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(part) for part in value)
    if isinstance(value, dict):
        return msgspec.json.encode(value).decode()
    return str(value)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ChildServer:
    """A server command in its own process on 127.0.0.1 (a free port), with a temporary directory for its files and
    its log; ready once GET /healthz answers 200. Subclasses name the command."""

    def __init__(self, prefix: str, cpus: frozenset[int] | None = None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix=prefix)
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.cpus = cpus  # the cores it runs on (its workers inherit them); None: wherever this process may

    @property
    def directory(self) -> Path:
        return Path(self._tmp.name)

    def _spawn(self, command: list[str], env: dict[str, str]) -> None:
        # The log goes to a file: a pipe nobody reads during the run would fill up and stall the server.
        self._log = self.directory / "server.log"
        cpus = self.cpus
        pin = None if cpus is None else lambda: os.sched_setaffinity(0, cpus)  # before it counts its cores
        with self._log.open("wb") as log:
            self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=pin)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    what = "the server"  # in the errors of `wait_ready`
    ready_s = 60.0  # the longest `wait_ready` waits by default
    poll_s = 0.05  # between two of its looks

    def wait_ready(self, timeout: float | None = None) -> Self:
        """Wait until `answers()`; an OSError if the process exits first or `timeout` passes."""
        assert self.process is not None
        deadline = time.monotonic() + (self.ready_s if timeout is None else timeout)
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise OSError(f"{self.what} exited ({self.process.returncode}): {self.log_tail()}")
            if self.answers():
                return self
            time.sleep(self.poll_s)
        raise OSError(f"{self.what} did not come up")

    def answers(self) -> bool:
        """One look: GET /healthz answers 200."""
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def log_tail(self, chars: int = 2000) -> str:
        return self._log.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._tmp.cleanup()

    def __enter__(self) -> Self:
        try:
            return self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()


class ServerProcess(ChildServer):
    """`python -m hotloop serve`, hotloop-sim only, a temporary data directory unless `store_url` names another
    store; extra settings (`bench_settings`' among them) go in as HOTLOOP_* variables, the only ones it sees."""

    def __init__(self, cpus: frozenset[int] | None = None, prefix: str = "hotloop-load-", **settings: Any) -> None:
        super().__init__(prefix, cpus)
        values: dict[str, Any] = {
            "data_dir": self._tmp.name,
            "models": "hotloop-sim",
            "default_model": "hotloop-sim",
            "log_level": "warning",
            "ws_ping_interval_s": 0,  # no pings in the middle of a measurement
            **settings,
        }
        # Only the settings named here: a HOTLOOP_* variable of the caller's shell (an API key, a store) would
        # change the server being measured without the bench knowing, as the in-process server never reads them.
        env = {name: value for name, value in os.environ.items() if not name.startswith("HOTLOOP_")}
        env.update(settings_env(values))
        command = [sys.executable, "-m", "hotloop", "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        self._spawn(command, env)


class Saveable(Protocol):
    """What the floor server's process needs of its script (bench/recording.py `Recording`): to write itself to a
    file the server reads."""

    def save(self, path: Path) -> None: ...


class FloorProcess(ChildServer):
    """The floor server (bench/floor.py) replaying `recording`, as hotloop's process is run: same interpreter, same
    environment, its own process."""

    def __init__(self, recording: Saveable, cpus: frozenset[int] | None = None) -> None:
        super().__init__("hotloop-floor-", cpus)
        path = self.directory / "recording.json"
        recording.save(path)
        command = [sys.executable, "-m", "hotloop.bench.floor", "--port", str(self.port), "--recording", str(path)]
        self._spawn(command, dict(os.environ))


def process_cpu_seconds(process: Any) -> float:
    """The process's CPU time: on Linux its scheduler clock, in nanoseconds (every thread, the exited ones too);
    elsewhere user + system time in clock ticks (10 ms: a short run could read 0)."""
    try:
        return time.clock_gettime((~process.pid << 3) | 2)  # CPUCLOCK_SCHED of the whole process
    except (AttributeError, OSError):
        times = process.cpu_times()
        return float(times.user + times.system)


class ResourceMonitor:
    """CPU seconds used by a process and its children between `start` and `stop` (`process_cpu_seconds`), and the
    peak of their summed resident memory, sampled every `interval` seconds on a thread."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        import psutil

        self._root = psutil.Process(pid)
        self.interval = interval
        self.peak_rss = 0
        self._cpu_start: dict[int, float] = {}
        self._cpu_last: dict[int, float] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample_loop, name="hotloop-load-monitor", daemon=True)

    def _processes(self) -> list[Any]:
        import psutil

        try:
            return [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return []

    def _sample(self) -> None:
        import psutil

        rss = 0
        for process in self._processes():
            try:
                cpu = process_cpu_seconds(process)
                rss += process.memory_info().rss
            except psutil.Error:
                continue
            self._cpu_last[process.pid] = cpu
            self._cpu_start.setdefault(process.pid, self._cpu_last[process.pid])
        self.peak_rss = max(self.peak_rss, rss)

    def _sample_loop(self) -> None:
        while not self._done.wait(self.interval):
            self._sample()

    def start(self) -> ResourceMonitor:
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self._sample()

    @property
    def cpu_s(self) -> float:
        return sum(self._cpu_last[pid] - self._cpu_start[pid] for pid in self._cpu_last)
