"""A Skills API upload read as a bundle (bundle.py): the `files` parts of a multipart form, each a filename and its
bytes, are one zip of the skill's folder, or that folder's files, each named by its path in it
(`my-skill/SKILL.md`, as openai-python sends `files=[("my-skill/SKILL.md", data), …]`). No I/O.

A part is a zip when its name holds no folder and it ends in `.zip` or its bytes open as a zip does: a zip inside
the skill's folder (`my-skill/assets/data.zip`, or a `.docx`) is one of its files like any other."""

from __future__ import annotations

from collections.abc import Sequence

from hotloop.skills.bundle import MANIFEST, Bundle, BundleError, from_files, from_zip

_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a local file header, or an empty zip's end record


def is_zip(name: str, data: bytes) -> bool:
    return "/" not in name and (name.lower().endswith(".zip") or data[:4] in _ZIP_MAGIC)


def from_upload(parts: Sequence[tuple[str, bytes]]) -> Bundle:
    """The bundle the parts make; `BundleError` saying what to send instead when they make none."""
    if not parts:
        raise BundleError(
            f"No files were sent: send the skill's folder's files (each named by its path, e.g. 'my-skill/{MANIFEST}') "
            "or one zip of the folder, as 'files'."
        )
    zips = [name for name, data in parts if is_zip(name, data)]
    if len(parts) == 1:
        name, data = parts[0]
        if zips:
            return from_zip(data)
        if "/" not in name:
            raise BundleError(
                f"{name!r} is neither a zip of the skill's folder nor a file inside one: send a zip, or name each "
                f"file by its path in the folder (e.g. 'my-skill/{MANIFEST}')."
            )
    elif zips:
        raise BundleError(
            f"Send one zip of the skill, or its folder's files, not both and not several zips (got {sorted(zips)} "
            f"among {len(parts)} files)."
        )
    return from_files(parts)
