"""A skill's bundle (docs/skills.md): a folder of files with a `SKILL.md` manifest at its top, as the Skills API
takes it (a zip, or a directory's files uploaded one by one) and as a hosted shell's `inline` skill sends it (a
base64 zip). No I/O but `unpack`.

- **One top-level folder**, `SKILL.md` directly in it. Its front matter (between `---` lines) names the skill
  (`name`: 1-64 of a-z, 0-9 and single hyphens, as the Agent Skills standard has it) and says what it is for
  (`description`: 1-1024 characters). A missing or malformed manifest is a `BundleError` saying what to fix.
- **Bounded before anything is inflated**: at most `MAX_ZIP_BYTES` sent, `MAX_FILES` files, `MAX_BYTES` unpacked in
  all; the sizes a zip declares are not trusted (each member is read with a cap), so a zip bomb stops at the bound.
- **Nothing escapes the folder**: absolute paths, `..`, backslashes and control characters are refused, and so are
  links (a zip member with a symlink's mode): a skill is regular files only.
- `archive()` writes the bundle back as a zip, the same bytes for the same files (what the store keeps and
  `GET …/content` returns).
"""

from __future__ import annotations

import io
import lzma
import re
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MANIFEST = "SKILL.md"
MAX_ZIP_BYTES = 50 * 1024 * 1024  # a zip (or a directory upload) as sent
MAX_BYTES = 100 * 1024 * 1024  # its files unpacked, all together
MAX_FILES = 500  # openai-python's `files` bound (maxItems 500)
MAX_MANIFEST_BYTES = 1024 * 1024
MAX_NAME, MAX_DESCRIPTION = 64, 1024
NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # every member's time in `archive()`: the same files give the same bytes


# What reading a damaged or unusual member raises: a bad header or CRC, a compression method or encryption zipfile
# cannot read, a deflate, LZMA or bzip2 stream that does not decode.
_UNREADABLE = (
    zipfile.BadZipFile,
    NotImplementedError,
    RuntimeError,
    OSError,
    ValueError,
    EOFError,
    zlib.error,
    lzma.LZMAError,
    struct.error,
)


class BundleError(ValueError):
    """What is wrong with a bundle, as a sentence a client can act on."""


@dataclass(frozen=True, slots=True)
class Bundle:
    name: str  # the manifest's `name`
    description: str  # the manifest's `description`
    directory: str  # the top-level folder every path is under
    files: tuple[tuple[str, bytes], ...]  # (path under `directory`, bytes), sorted by path

    @property
    def size(self) -> int:
        return sum(len(data) for _, data in self.files)

    def archive(self) -> bytes:
        """The bundle as a zip of `directory/…` (deflated, fixed times): what the store keeps."""
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for path, data in self.files:
                info = zipfile.ZipInfo(f"{self.directory}/{path}", date_time=_FIXED_TIME)
                info.external_attr = (stat.S_IFREG | 0o644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, data)
        return out.getvalue()


def from_zip(data: bytes, *, named: tuple[str, str] | None = None) -> Bundle:
    """The bundle a zip holds; `BundleError` when it is not one. `named`: the name and description the request
    gave (an inline skill's), which its manifest's front matter then need not repeat."""
    if len(data) > MAX_ZIP_BYTES:
        raise BundleError(f"The skill's zip is {len(data)} bytes; at most {MAX_ZIP_BYTES} are accepted.")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        # Not `is_dir()`: it fails on a member with an empty name (which `_split` refuses by name instead).
        members = [info for info in archive.infolist() if not info.filename.endswith("/")]
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, OSError, ValueError, EOFError) as exc:
        raise BundleError(f"The skill is not a readable zip file: {exc}.") from None
    if len(members) > MAX_FILES:
        raise BundleError(f"The skill's zip holds {len(members)} files; at most {MAX_FILES} are accepted.")
    files: list[tuple[str, bytes]] = []
    total = 0
    with archive:
        for info in members:
            if stat.S_ISLNK(info.external_attr >> 16):
                raise BundleError(f"'{info.filename}' in the skill's zip is a link; a skill holds regular files only.")
            try:
                with archive.open(info) as member:
                    content = member.read(MAX_BYTES - total + 1)
            except _UNREADABLE as exc:
                raise BundleError(f"'{info.filename}' in the skill's zip cannot be read: {exc}.") from None
            total += len(content)
            if total > MAX_BYTES:
                raise BundleError(f"The skill's files come to more than {MAX_BYTES} bytes unpacked.")
            files.append((info.filename, content))
    return from_files(files, named=named)


def from_files(files: Iterable[tuple[str, bytes]], *, named: tuple[str, str] | None = None) -> Bundle:
    """The bundle of a directory's files, each named by its path inside one top-level folder
    (`my-skill/SKILL.md`, `my-skill/scripts/run.py`); `BundleError` when they are not one."""
    by_path: dict[str, bytes] = {}
    directories: set[str] = set()
    total = 0
    for raw, data in files:
        top, path = _split(raw)
        directories.add(top)
        if len(directories) > 1:  # before duplicates: `a/SKILL.md` and `b/SKILL.md` are two folders, not one file twice
            raise BundleError(f"The skill's files must be in one top-level folder; they are in {sorted(directories)}.")
        if path in by_path:
            raise BundleError(f"'{raw}' is in the skill twice.")
        by_path[path] = data
        total += len(data)
    if not by_path:
        raise BundleError(f"The skill holds no files; it needs at least {MANIFEST} in one top-level folder.")
    if len(by_path) > MAX_FILES:
        raise BundleError(f"The skill holds {len(by_path)} files; at most {MAX_FILES} are accepted.")
    if total > MAX_BYTES:
        raise BundleError(f"The skill's files come to {total} bytes; at most {MAX_BYTES} are accepted.")
    _no_clash(by_path)
    (directory,) = directories
    manifest = by_path.get(MANIFEST)
    if manifest is None:
        raise BundleError(f"The skill has no {MANIFEST} directly in its folder '{directory}'.")
    name, description = named or manifest_fields(manifest)
    return Bundle(name, description, directory, tuple(sorted(by_path.items())))


def _split(raw: str) -> tuple[str, str]:
    """(top-level folder, path under it) of a member's name; `BundleError` for one that could escape."""
    if not raw or "\\" in raw or any(ord(char) < 32 or ord(char) == 127 for char in raw):
        raise BundleError(f"{raw!r} is not a usable path in a skill (no backslashes or control characters).")
    pure = PurePosixPath(raw)
    if pure.is_absolute() or any(part in ("..", ".", "") for part in raw.split("/")):
        raise BundleError(f"'{raw}' is not a path inside the skill's folder (no absolute paths, '.' or '..').")
    if len(pure.parts) < 2:
        raise BundleError(f"'{raw}' is not inside a top-level folder; a skill's files are all in one folder.")
    return pure.parts[0], "/".join(pure.parts[1:])


def _no_clash(by_path: dict[str, bytes]) -> None:
    """No file may also be a directory of another (`a` and `a/b`): the files must make a tree."""
    for path in by_path:
        parent = path.rpartition("/")[0]
        while parent:
            if parent in by_path:
                raise BundleError(f"'{parent}' in the skill is both a file and a folder.")
            parent = parent.rpartition("/")[0]


def manifest_fields(manifest: bytes) -> tuple[str, str]:
    """`name` and `description` from a SKILL.md's front matter; `BundleError` saying what is missing."""
    if len(manifest) > MAX_MANIFEST_BYTES:
        raise BundleError(f"{MANIFEST} is {len(manifest)} bytes; at most {MAX_MANIFEST_BYTES} are accepted.")
    try:
        text = manifest.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise BundleError(f"{MANIFEST} is not UTF-8 text.") from None
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise BundleError(f"{MANIFEST} must open with front matter: a '---' line, 'name:' and 'description:', '---'.")
    try:
        end = next(n for n, line in enumerate(lines[1:], 1) if line.strip() == "---")
    except StopIteration:
        raise BundleError(f"{MANIFEST}'s front matter has no closing '---' line.") from None
    fields = front_matter(lines[1:end])
    name, description = fields.get("name", ""), fields.get("description", "")
    if not name or len(name) > MAX_NAME or not NAME.fullmatch(name):
        raise BundleError(
            f"{MANIFEST}'s 'name' must be 1-{MAX_NAME} lowercase letters, digits and single hyphens, not starting or "
            f"ending with one (got {name!r})."
        )
    if not description or len(description) > MAX_DESCRIPTION:
        raise BundleError(f"{MANIFEST}'s 'description' must be 1-{MAX_DESCRIPTION} characters.")
    # YAML allows no control character but tab and line breaks (and PostgreSQL's text holds no NUL).
    if any(ord(char) < 32 and char not in "\t\n\r" for char in description):
        raise BundleError(f"{MANIFEST}'s 'description' holds a control character.")
    return name, description


def front_matter(lines: list[str]) -> dict[str, str]:
    """The top-level `key: value` pairs of YAML front matter, as text: quoted scalars unquoted, a `>` or `|` block
    or indented continuation lines joined. Nested maps (`metadata:`) are skipped; no YAML library is needed for the
    two fields a skill must have."""
    fields: dict[str, str] = {}
    key: str | None = None
    block: str | None = None  # ">" or "|" while a block scalar's lines are read
    parts: list[str] = []

    def close() -> None:
        if key is not None:
            joined = "\n".join(parts) if block == "|" else " ".join(part.strip() for part in parts)
            fields[key] = _unquote(joined.strip())

    for line in lines:
        if line[:1] in (" ", "\t") or not line.strip():
            if key is not None:
                parts.append(line)
            continue
        close()
        key, block, parts = None, None, []
        name, colon, value = line.partition(":")
        if not colon or name.strip() in fields:
            continue
        key, value = name.strip(), value.strip()
        if value[:1] in (">", "|"):
            block = value[:1]
        elif value:
            parts = [value]
    close()
    return {name: value for name, value in fields.items() if value}


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        inner = value[1:-1]
        return inner.replace("''", "'") if value[0] == "'" else inner.replace('\\"', '"').replace("\\\\", "\\")
    return value


def unpack(bundle: Bundle, directory: Path) -> None:
    """Write the bundle's files under `directory` (which must not exist yet), readable by every uid, writable by
    none but the owner: a container binds it read-only."""
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    for path, data in bundle.files:
        target = directory / path
        for parent in reversed(target.relative_to(directory).parents[:-1]):
            (directory / parent).mkdir(mode=0o755, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o755 if data.startswith(b"#!") else 0o644)
