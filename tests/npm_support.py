"""The pinned npm CLIs the end-to-end tests drive (tests/codex, tests/cline): installed by npm into their own folder
on first use, never globally (the npm registry must be reachable the first time)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from hotloop.wire.request import CreateRequest, decode_item

NPM_TIMEOUT_S = 300


def npm_installed(folder: Path, command: str) -> Path:
    """`folder`'s package.json installed (once), and the path of its `node_modules/.bin/<command>`."""
    binary = folder / "node_modules" / ".bin" / command
    if not binary.exists():
        npm = shutil.which("npm")
        assert npm is not None, f"npm is needed to install {command} ({folder / 'package.json'})"
        subprocess.run(
            [npm, "install", "--prefix", str(folder), "--no-audit", "--no-fund"],
            check=True,
            timeout=NPM_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    assert binary.exists(), f"npm did not install {binary}"
    return binary


def run_cli(name: str, command: list[str], env: dict[str, str], cwd: Path, timeout: float) -> str:
    """One run of the CLI, which must exit 0 (its output's tail in the failure); its stdout."""
    result = subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    report = f"{name} exit {result.returncode}\nstdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"
    assert result.returncode == 0, report
    return result.stdout


def events_of(stdout: str) -> list[dict[str, Any]]:
    """The JSON events a CLI's `--json` output holds, a line each."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def input_items(request: CreateRequest) -> list[dict[str, Any]]:
    """The request's input items as JSON objects (the pipeline keeps each one raw until it normalizes it)."""
    if not isinstance(request.input, list):
        return []
    items = [decode_item(item) for item in request.input]
    return [item for item in items if isinstance(item, dict)]
