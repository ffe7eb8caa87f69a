"""One command of the hosted shell: `bash -c` in a fresh sandbox of the container (its own pid namespace, so a
timeout ends the command and everything it started), output read as it comes and kept bounded. The tree ends with
the call too: at `stop` (a steer: the output so far kept) or when the task awaiting it is cancelled (a cancelled
response: nothing kept). Only the command's own namespace is killed, never the container's kernel."""

from __future__ import annotations

import asyncio

from hotloop.sandbox.launch import EXIT_SECONDS, Launch, spawn
from hotloop.sandbox.launch import stop as end
from hotloop.sandbox.output import Capture, shorten
from hotloop.sandbox.results import KILLED_EXIT, ShellRun

SHELL = "/bin/bash"
CHUNK = 1 << 16
UNSHARE = "unshare: "


async def run_command(
    launch: Launch, command: str, *, timeout: float, max_output: int | None, stop: asyncio.Event | None = None
) -> ShellRun:
    """Run `command`; stdout and stderr each at most `max_output` characters (the middle cut), else
    `output_bytes` of each. `stop` set while it runs: its tree is killed and the run says `stopped`."""
    process = await spawn(launch, [SHELL, "-c", command])
    assert process.stdout is not None and process.stderr is not None
    keep = launch.bounds.output_bytes if max_output is None else min(4 * max_output, launch.bounds.output_bytes)
    out, err = Capture(keep), Capture(keep)
    pumps = asyncio.gather(_pump(process.stdout, out), _pump(process.stderr, err))
    try:
        code, stopped = await _ended(process, timeout, stop)
    except BaseException:  # the task awaiting the call was cancelled: the command ends with it, reaped
        try:
            await asyncio.shield(end(process))
        finally:
            pumps.cancel()
        raise
    if code is None or stopped:
        await end(process)
    try:
        await asyncio.wait_for(pumps, EXIT_SECONDS)
    except TimeoutError:
        pass  # the pipes' other ends died with the namespace; what was read is kept
    stdout, stderr = out.text(), err.text()
    if code is None or stopped:
        stderr = _without_launcher(stderr)
    if max_output is not None:
        stdout, stderr = shorten(stdout, max_output), shorten(stderr, max_output)
    return ShellRun(stdout, stderr, KILLED_EXIT if stopped else code, stopped)


async def _ended(
    process: asyncio.subprocess.Process, timeout: float, stop: asyncio.Event | None
) -> tuple[int | None, bool]:
    """The command's exit code (None: past `timeout`), and whether `stop` came first."""
    exited = asyncio.ensure_future(process.wait())
    stopping = asyncio.ensure_future(stop.wait()) if stop is not None else None
    try:
        await asyncio.wait(
            {exited} if stopping is None else {exited, stopping}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for waiter in (exited, stopping):
            if waiter is not None and not waiter.done():
                waiter.cancel()
    if exited.done() and not exited.cancelled():
        return exited.result(), False
    return None, stopping is not None and stopping.done() and not stopping.cancelled()


def _without_launcher(stderr: str) -> str:
    """`unshare`, whose child was killed, re-raises the signal on itself and cannot unblock SIGKILL: its complaint
    (the last line on the command's stderr, which it shares) is the launcher's, not the command's."""
    head, _, last = stderr.rstrip("\n").rpartition("\n")
    if not last.startswith(UNSHARE):
        return stderr
    return f"{head}\n" if head else ""


async def _pump(stream: asyncio.StreamReader, capture: Capture) -> None:
    while chunk := await stream.read(CHUNK):
        capture.feed(chunk)
