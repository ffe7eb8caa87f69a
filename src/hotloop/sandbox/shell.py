"""One command of the hosted shell: `bash -c` in a fresh sandbox of the container (its own pid namespace, so a
timeout ends the command and everything it started), output read as it comes and kept bounded."""

from __future__ import annotations

import asyncio

from hotloop.sandbox.launch import EXIT_SECONDS, Launch, spawn, stop
from hotloop.sandbox.output import Capture, shorten
from hotloop.sandbox.results import ShellRun

SHELL = "/bin/bash"
CHUNK = 1 << 16


async def run_command(launch: Launch, command: str, *, timeout: float, max_output: int | None) -> ShellRun:
    """Run `command`; stdout and stderr each at most `max_output` characters (the middle cut), else
    `output_bytes` of each."""
    process = await spawn(launch, [SHELL, "-c", command])
    assert process.stdout is not None and process.stderr is not None
    keep = launch.bounds.output_bytes if max_output is None else min(4 * max_output, launch.bounds.output_bytes)
    out, err = Capture(keep), Capture(keep)
    pumps = asyncio.gather(_pump(process.stdout, out), _pump(process.stderr, err))
    try:
        code: int | None = await asyncio.wait_for(process.wait(), timeout)
    except TimeoutError:
        code = None
        await stop(process)
    try:
        await asyncio.wait_for(pumps, EXIT_SECONDS)
    except TimeoutError:
        pass  # the pipes' other ends died with the namespace; what was read is kept
    stdout, stderr = out.text(), err.text()
    if max_output is not None:
        stdout, stderr = shorten(stdout, max_output), shorten(stderr, max_output)
    return ShellRun(stdout, stderr, code)


async def _pump(stream: asyncio.StreamReader, capture: Capture) -> None:
    while chunk := await stream.read(CHUNK):
        capture.feed(chunk)
