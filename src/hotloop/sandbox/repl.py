"""The Python kernel that runs inside a container's sandbox, as `python -I -c <this file> <data dir>`: one
persistent namespace, one JSON line per request on stdin, one JSON line per reply on stdout. Standard library only
and self-contained: nothing of hotloop is importable in there. The host (kernel.py) treats every reply as
untrusted, since the code it runs can write to the same pipe."""

from __future__ import annotations

import ast
import builtins
import json
import linecache
import os
import signal
import sys
import traceback
import types
import warnings
from typing import Any, BinaryIO

KERNEL = os.getpid()
OWN = sys._getframe().f_code.co_filename  # "<string>" under -c: the frames a traceback leaves out
DATA = sys.argv[1] if len(sys.argv) > 1 else "/mnt/data"
CAPTURE = ("/tmp/.kernel-stdout", "/tmp/.kernel-stderr")
RESULT_CHARS = 100_000  # the shown value of a final expression, at most
# Whether a cell's code runs now: only then does the host's SIGINT (a call stopped: kernel.py `interrupt`) raise
# KeyboardInterrupt; outside a cell it would end the kernel, so it is ignored there.
running = False


def setup() -> tuple[BinaryIO, BinaryIO, tuple[int, int], dict[str, Any]]:
    """Keep the pipes to the host on private fds, fd 0 on /dev/null, and open the two capture files that fds 1
    and 2 point to during a call (so a subprocess's output is captured as well as print's)."""
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    capture = (os.open(CAPTURE[0], flags, 0o600), os.open(CAPTURE[1], flags, 0o600))
    redirect(capture)
    # Agg cannot show a figure; the figures come back as files instead, so the warning would only be noise.
    warnings.filterwarnings("ignore", message=".*non-interactive.*cannot be shown")
    # The code's globals are a module of their own named __main__ (pickle and multiprocessing look classes up
    # there), apart from this kernel's: a variable the code names `cell` or `main` cannot replace the kernel's.
    main_module = types.ModuleType("__main__")
    main_module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main_module
    signal.signal(signal.SIGINT, interrupted)
    return requests, replies, capture, main_module.__dict__


def interrupted(signum: int, frame: Any) -> None:
    if running:
        raise KeyboardInterrupt


def redirect(capture: tuple[int, int]) -> None:
    """fds 1 and 2 back on the capture files, whatever the last call pointed them at."""
    os.dup2(capture[0], 1)
    os.dup2(capture[1], 2)


def captured(fd: int, limit: int) -> str:
    """What went to the capture file since the last call, its middle cut past `limit` bytes; then empty it."""
    try:
        return _cut(fd, limit)
    finally:
        os.ftruncate(fd, 0)


def _cut(fd: int, limit: int) -> str:
    size = os.fstat(fd).st_size
    if size <= limit:
        text = os.pread(fd, size, 0).decode(errors="replace")
    else:
        half = limit // 2
        head = os.pread(fd, half, 0).decode(errors="replace")
        tail = os.pread(fd, half, size - half).decode(errors="replace")
        text = f"{head}\n[... {size - 2 * half} bytes omitted ...]\n{tail}"
    return text


def flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__  # the code may have swapped them


def figures(cell: int) -> list[str]:
    """Save every open matplotlib figure as a PNG in the data directory, if the code used pyplot at all."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return []
    names: list[str] = []
    for index, number in enumerate(pyplot.get_fignums(), 1):
        name = f"figure_{cell}_{index}_{os.urandom(3).hex()}.png"
        try:
            pyplot.figure(number).savefig(os.path.join(DATA, name), format="png")
            names.append(name)
        except Exception:
            traceback.print_exc()
    pyplot.close("all")
    return names


def execute(code: str, cell: int, namespace: dict[str, Any]) -> str | None:
    """Run one cell as a REPL does: its last statement, when an expression, is evaluated and its repr returned."""
    name = f"<cell {cell}>"
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    tree = ast.parse(code, name)
    last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    if last is not None:
        tree.body.pop()
    exec(compile(tree, name, "exec"), namespace)
    if last is None:
        return None
    value = eval(compile(ast.Expression(last.value), name, "eval"), namespace)
    if value is None:
        return None
    namespace["_"] = value
    shown = repr(value)
    return shown if len(shown) <= RESULT_CHARS else shown[:RESULT_CHARS] + "..."


def failure(error: BaseException) -> str:
    """The traceback as Python prints it, without this kernel's own frames (nor `ast.parse`'s, where a cell's
    SyntaxError is raised: the host's paths are none of the code's business)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in (OWN, ast.__file__):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb))


def cell(request: dict[str, Any], number: int, namespace: dict[str, Any], capture: tuple[int, int]) -> dict[str, Any]:
    """Run one request; its reply."""
    global running
    redirect(capture)
    result: str | None = None
    error: str | None = None
    try:
        running = True
        result = execute(request["code"], number, namespace)
        running = False
    except BaseException as raised:  # SystemExit and KeyboardInterrupt end the cell, never the kernel
        running = False
        if os.getpid() != KERNEL:
            os._exit(1)
        try:
            error = failure(raised)
        except BaseException:
            error = f"{type(raised).__name__} (its traceback could not be formatted)"
    if os.getpid() != KERNEL:
        # A process the code forked without exec came back here: it must never answer in the kernel's name.
        os._exit(0)
    images = figures(number)
    flush()
    limit = int(request.get("output_bytes", 1 << 20))
    return {
        "stdout": captured(capture[0], limit),
        "stderr": captured(capture[1], limit),
        "result": result,
        "error": error,
        "images": images,
    }


def main() -> None:
    requests, replies, capture, namespace = setup()
    replies.write(b'{"ready": true}\n')
    replies.flush()
    for number, line in enumerate(requests, 1):
        reply = cell(json.loads(line), number, namespace, capture)
        replies.write(json.dumps(reply).encode() + b"\n")
        replies.flush()


if __name__ == "__main__":
    main()
