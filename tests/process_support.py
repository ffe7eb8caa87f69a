"""Real `hotloop serve` processes for tests that need signals, crashes or several replicas."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from hotloop.bench.server_process import free_port

SIM = "hotloop-sim"


def eventually(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Whether `check()` holds within `timeout` (polled every 10 ms): for what another thread or process does."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def wait_healthy(
    name: str, url: str, process: subprocess.Popen[str], output: Callable[[], str], timeout: float
) -> None:
    """Poll `url` until it answers 200; fail with the process's output if it exits first, or after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if process.poll() is not None:
            raise AssertionError(f"{name} exited with {process.returncode}:\n{output()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} did not come up")
        time.sleep(0.05)


class ServerProcess:
    """`python -m hotloop serve` on a free port, serving hotloop-sim; settings go in as HOTLOOP_* variables."""

    def __init__(self, data_dir: Path, port: int | None = None, **settings: Any) -> None:
        self.port = port or free_port()
        self.data_dir = data_dir
        env = {**os.environ, "HOTLOOP_DATA_DIR": str(data_dir)}
        defaults: dict[str, Any] = {
            "models": SIM,
            "default_model": SIM,
            "log_level": "warning",
            "sim_ttft_ms": 5,
            "sim_tps": 2000,
            "workers": 1,  # one process unless a test asks for more (None: the default, one per core)
        }
        for name, value in {**defaults, **settings}.items():
            if value is None:
                continue
            if isinstance(value, list):
                value = ",".join(value)
            elif isinstance(value, bool):
                value = "true" if value else "false"
            env[f"HOTLOOP_{name.upper()}"] = str(value)
        command = [sys.executable, "-m", "hotloop", "serve", "--port", str(self.port)]
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._output: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/responses"

    def wait_ready(self, timeout: float = 60) -> ServerProcess:
        wait_healthy("server", f"http://127.0.0.1:{self.port}/healthz", self.process, self.output, timeout)
        return self

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.process.send_signal(sig)

    def wait(self, timeout: float = 60) -> int:
        """Wait for exit; returns the exit code (the output is kept for `output()`)."""
        self._output, _ = self.process.communicate(timeout=timeout)
        return self.process.returncode

    def output(self) -> str:
        if self._output is None and self.process.poll() is not None and self.process.stdout is not None:
            self._output = self.process.stdout.read()
        return self._output or ""

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.wait(timeout=30)

    def __enter__(self) -> ServerProcess:
        return self.wait_ready()

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
