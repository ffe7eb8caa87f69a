"""What a container's calls return, and the sandbox's errors: plain records, which the tools turn into the wire's
`code_interpreter_call` and `shell_call_output` items."""

from __future__ import annotations

import signal
from dataclasses import dataclass

KILLED_EXIT = 128 + signal.SIGKILL  # 137: a command killed with its tree, as bash reports it


@dataclass(frozen=True, slots=True)
class Image:
    name: str  # the PNG's name in /mnt/data
    png: bytes


@dataclass(frozen=True, slots=True)
class Run:
    """One code_interpreter call. `error` is the code's traceback, or why the kernel stopped; `notice` says this
    call ran on a fresh kernel and why the previous one's variables are gone. `lost`: the call did not finish in
    its kernel (the kernel could not start, or stopped during the call: past its wall or CPU bound, killed,
    exited), where a traceback is the code's own error and the kernel lives on."""

    stdout: str
    stderr: str
    result: str | None  # repr of the final expression's value, as a REPL shows it
    error: str | None
    timed_out: bool
    notice: str | None
    images: tuple[Image, ...]
    files: tuple[str, ...]  # names in /mnt/data created or changed by the call
    lost: bool = False
    stopped: bool = False  # interrupted at the caller's `stop` (a steer): what it printed is kept

    @property
    def logs(self) -> str:
        """Everything the call printed, in the order a notebook shows it: the `logs` of a code interpreter's
        output."""
        parts = (self.notice, self.stdout, self.stderr, self.result, self.error)
        return "\n".join(part.rstrip("\n") for part in parts if part)


@dataclass(frozen=True, slots=True)
class ShellRun:
    """One command of a shell call: `exit_code` is None when it ran past its timeout (the Responses API's
    outcome `{"type": "timeout"}`), else `{"type": "exit", "exit_code": exit_code}`. `stopped`: the call was stopped
    while the command ran (its tree killed: `exit_code` is `KILLED_EXIT`, as a shell reports a SIGKILLed command);
    its output is what it printed until then."""

    stdout: str
    stderr: str
    exit_code: int | None
    stopped: bool = False

    @property
    def timed_out(self) -> bool:
        return self.exit_code is None


class SandboxError(Exception):
    """The sandbox cannot do what was asked; the message says why, for the tool's output or error."""


class Unavailable(SandboxError):
    """This host cannot run the sandbox (probe.py says why): the tools that need it are refused by name."""


class Full(SandboxError):
    """Every container slot (or uid) is in use."""


class Closed(SandboxError):
    """The container was closed."""
