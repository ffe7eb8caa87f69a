"""Where a container file may be: a path under /mnt/data that names a file inside it, never outside and never
ambiguously. The sandbox looks names up without following links (sandbox/files.py); these rules make sure a name
the server stores could never mean anything else there, or on any tool that reads it later."""

from __future__ import annotations

from hotloop.errors import InvalidParam
from hotloop.wire.containers import MOUNT

MAX_PIECE_BYTES = 255  # NAME_MAX: one component
MAX_PATH_BYTES = 1024  # the whole path under the mount


def container_path(name: str, param: str) -> str:
    """The absolute container path of `name`: relative to /mnt/data, or already under it. A name with `..` or `.`,
    an empty component (`a//b`, a trailing `/`), another absolute path, a backslash, a control character (NUL
    included) or text that is not UTF-8 is refused with a 400 naming `param`."""
    rest = name.removeprefix(MOUNT + "/") if name.startswith(MOUNT + "/") else name
    if rest.startswith("/"):
        raise InvalidParam(f"A container file's path must be under {MOUNT}; got an absolute path.", param=param)
    why = _flaw(rest)
    if why is not None:
        raise InvalidParam(f"{why} A container file needs a path under {MOUNT} like 'data.csv'.", param=param)
    return f"{MOUNT}/{rest}"


def _flaw(rest: str) -> str | None:
    try:
        encoded = rest.encode("utf-8")
    except UnicodeEncodeError:
        return "The file name is not valid UTF-8."
    if not rest:
        return "The file name is empty."
    if len(encoded) > MAX_PATH_BYTES:
        return f"The path holds at most {MAX_PATH_BYTES} bytes."
    if any(ord(c) < 32 or ord(c) == 127 for c in rest):
        return "The file name holds a control character."
    if "\\" in rest:
        return "The file name holds a backslash (paths use '/')."
    for piece in rest.split("/"):
        if piece in ("", ".", ".."):
            return "The path has an empty, '.' or '..' component."
        if len(piece.encode("utf-8")) > MAX_PIECE_BYTES:
            return f"Each part of the path holds at most {MAX_PIECE_BYTES} bytes."
    return None
