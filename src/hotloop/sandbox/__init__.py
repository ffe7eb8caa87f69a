"""Server-run code in containers (issue 40): each container an isolated process tree under bubblewrap, with its own
uid, cgroups and bounded /mnt/data, a persistent Python kernel and shell commands (docs/sandbox.md). A layer with
no HTTP and no tools: the code_interpreter tool, the hosted shell and the Containers API are built on it."""

from hotloop.sandbox.bounds import Bounds, memory_limit_bytes
from hotloop.sandbox.container import Container
from hotloop.sandbox.probe import Support, probe
from hotloop.sandbox.results import Closed, Full, Image, Run, SandboxError, ShellRun, Unavailable
from hotloop.sandbox.sandbox import Sandbox

__all__ = [
    "Bounds",
    "Closed",
    "Container",
    "Full",
    "Image",
    "Run",
    "Sandbox",
    "SandboxError",
    "ShellRun",
    "Support",
    "Unavailable",
    "memory_limit_bytes",
    "probe",
]
