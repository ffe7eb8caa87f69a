"""A skill's bundle (skills/bundle.py) and a Skills API upload read as one (skills/upload.py), no I/O: a folder with a
SKILL.md whose front matter names and describes it; the same files give the same zip; what could escape the folder
(`..`, absolute paths, backslashes, control characters, links), files outside one folder, a missing or malformed
manifest are refused with a sentence; bounds hold before anything is inflated (a zip bomb stops at `MAX_BYTES`, a
member that lies about its size is unreadable); and nothing a client can send raises anything but `BundleError`."""

from __future__ import annotations

import io
import random
import stat
import zipfile

import pytest

from hotloop.skills import bundle
from hotloop.skills.bundle import BundleError, from_files, from_zip, manifest_fields
from hotloop.skills.upload import from_upload, is_zip

pytestmark = pytest.mark.fast

MANIFEST = b"---\nname: pdf-tools\ndescription: Reads and fills PDF forms.\n---\n# PDF tools\n\nRun scripts/fill.py.\n"
FILES = [
    ("pdf-tools/SKILL.md", MANIFEST),
    ("pdf-tools/scripts/fill.py", b"#!/usr/bin/env python3\nprint('filled')\n"),
    ("pdf-tools/reference/forms.md", b"# Forms\n"),
]


def _zip(members: list[tuple[str, bytes]], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=method) as archive:
        for name, data in members:
            info = zipfile.ZipInfo(name)  # as a ZipInfo, an empty name is written too
            info.compress_type = method
            archive.writestr(info, data)
    return out.getvalue()


def _refused(match: str, files: list[tuple[str, bytes]]) -> None:
    with pytest.raises(BundleError, match=match):
        from_files(files)


def test_a_folder_with_a_manifest_is_a_bundle() -> None:
    made = from_files(FILES)
    assert (made.name, made.description, made.directory) == ("pdf-tools", "Reads and fills PDF forms.", "pdf-tools")
    assert [path for path, _ in made.files] == ["SKILL.md", "reference/forms.md", "scripts/fill.py"]
    assert made.size == sum(len(data) for _, data in FILES)


def test_the_same_files_give_the_same_zip_and_it_reads_back() -> None:
    archive = from_files(FILES).archive()
    assert from_files(list(reversed(FILES))).archive() == archive  # the order sent does not matter
    with zipfile.ZipFile(io.BytesIO(archive)) as read:
        assert sorted(read.namelist()) == sorted(name for name, _ in FILES)
        assert all(read.read(name) == data for name, data in FILES)
        assert all(stat.S_ISREG(info.external_attr >> 16) for info in read.infolist())
    assert from_zip(archive) == from_files(FILES)


@pytest.mark.parametrize(
    ("front", "name", "description"),
    [
        ("name: a\ndescription: b", "a", "b"),
        ('name: \'quoted-name\'\ndescription: "It\'s \\"here\\""', "quoted-name", 'It\'s "here"'),
        ("name: a\ndescription: >\n  folded\n  over lines", "a", "folded over lines"),
        ("name: a\ndescription: |\n  kept\n  lines", "a", "kept\n  lines"),
        ("name: a\nmetadata:\n  name: not-this\ndescription: b\nlicense: MIT", "a", "b"),
        ("description: first\nname: a\ndescription: second", "a", "first"),
    ],
)
def test_front_matter_is_read_as_yaml_writes_it(front: str, name: str, description: str) -> None:
    assert manifest_fields(f"---\n{front}\n---\nbody".encode()) == (name, description)


def test_a_manifest_with_a_bom_and_crlf_lines_reads() -> None:
    assert manifest_fields(b"\xef\xbb\xbf---\r\nname: a\r\ndescription: b\r\n---\r\n") == ("a", "b")


@pytest.mark.parametrize(
    ("manifest", "match"),
    [
        (b"# no front matter\n", "must open with front matter"),
        (b"---\nname: a\ndescription: b\n", "no closing"),
        (b"---\ndescription: b\n---\n", "'name' must be"),
        (b"---\nname: Big-Name\ndescription: b\n---\n", "'name' must be"),
        (b"---\nname: two--hyphens\ndescription: b\n---\n", "'name' must be"),
        (b"---\nname: -edge\ndescription: b\n---\n", "'name' must be"),
        (b"---\nname: " + b"a" * 65 + b"\ndescription: b\n---\n", "'name' must be"),
        (b"---\nname: a\n---\n", "'description' must be"),
        (b"---\nname: a\ndescription: " + b"d" * 1025 + b"\n---\n", "'description' must be"),
        (b"---\nname: a\ndescription: \xff\n---\n", "not UTF-8"),
        (b"---\nname: a\ndescription: nul\x00here\n---\n", "control character"),
        (b"---\nname: a\ndescription: \x1b[31mred\n---\n", "control character"),
        (b"", "must open with front matter"),
    ],
)
def test_a_bad_manifest_says_what_to_fix(manifest: bytes, match: str) -> None:
    _refused(match, [("a/SKILL.md", manifest)])


def test_a_huge_manifest_is_refused_before_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle, "MAX_MANIFEST_BYTES", 100)
    _refused("at most 100", [("a/SKILL.md", MANIFEST + b"x" * 100)])


@pytest.mark.parametrize(
    "name",
    [
        "../evil/SKILL.md",
        "pdf-tools/../../etc/passwd",
        "pdf-tools/./x",
        "/etc/passwd",
        "pdf-tools//x",
        "pdf-tools/x/",
        "pdf-tools\\x",
        "pdf-tools/nul\x00",
        "pdf-tools/tab\there",
        "pdf-tools/del\x7f",
        "",
        "..",
    ],
)
def test_a_path_that_could_escape_the_folder_is_refused(name: str) -> None:
    with pytest.raises(BundleError):
        from_files([*FILES, (name, b"x")])
    if name.endswith("/") or "\x00" in name:
        return  # in a zip: a folder's entry (skipped), and a name zipfile cuts at its NUL (`pdf-tools/nul`)
    with pytest.raises(BundleError):
        from_zip(_zip([*FILES, (name, b"x")]))


def test_files_must_make_one_folder_holding_the_manifest() -> None:
    _refused("no files", [])
    _refused("one top-level folder", [*FILES, ("other/SKILL.md", MANIFEST)])
    _refused("not inside a top-level folder", [("SKILL.md", MANIFEST)])
    _refused("twice", [*FILES, ("pdf-tools/SKILL.md", MANIFEST)])
    _refused("both a file and a folder", [*FILES, ("pdf-tools/scripts", b"a file where a folder is")])
    _refused("no SKILL.md directly", [("pdf-tools/docs/SKILL.md", MANIFEST)])
    _refused("no SKILL.md directly", [("pdf-tools/skill.md", MANIFEST)])


def test_the_bounds_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle, "MAX_FILES", 3)
    _refused("at most 3", [*FILES, ("pdf-tools/four", b"4")])
    with pytest.raises(BundleError, match="at most 3"):
        from_zip(_zip([*FILES, ("pdf-tools/four", b"4")]))
    monkeypatch.setattr(bundle, "MAX_FILES", 500)
    monkeypatch.setattr(bundle, "MAX_BYTES", 200)
    _refused("at most 200", [*FILES, ("pdf-tools/big", b"b" * 200)])
    monkeypatch.setattr(bundle, "MAX_ZIP_BYTES", 50)
    with pytest.raises(BundleError, match="at most 50"):
        from_zip(_zip(FILES))


def test_a_zip_bomb_stops_at_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A member that inflates past MAX_BYTES is cut off there: at most MAX_BYTES + 1 bytes are ever inflated."""
    monkeypatch.setattr(bundle, "MAX_BYTES", 64 * 1024)
    bomb = _zip([*FILES, ("pdf-tools/zeros", bytes(10 * 1024 * 1024))])
    assert len(bomb) < 64 * 1024  # ten megabytes of zeros deflate to some ten kilobytes
    with pytest.raises(BundleError, match="more than 65536 bytes unpacked"):
        from_zip(bomb)
    # Many members, each under the bound, add up past it.
    spread = _zip([*FILES, *((f"pdf-tools/z{n}", bytes(20 * 1024)) for n in range(8))])
    with pytest.raises(BundleError, match="more than 65536 bytes unpacked"):
        from_zip(spread)


def _patched(data: bytes, name: str, *, local: dict[int, bytes], central: dict[int, bytes]) -> bytes:
    """The zip with bytes of `name`'s local header and central directory entry replaced (offset: new bytes)."""
    out = bytearray(data)
    with zipfile.ZipFile(io.BytesIO(data)) as read:
        header, at = read.getinfo(name).header_offset, read.start_dir
    for offset, value in local.items():
        out[header + offset : header + offset + len(value)] = value
    while (at := data.find(b"PK\x01\x02", at)) != -1:
        length = int.from_bytes(data[at + 28 : at + 30], "little")
        if data[at + 46 : at + 46 + length] == name.encode():
            for offset, value in central.items():
                out[at + offset : at + offset + len(value)] = value
        at += 46 + length
    return bytes(out)


def test_a_member_that_lies_about_its_size_is_unreadable(monkeypatch: pytest.MonkeyPatch) -> None:
    """A member declaring 10 bytes that inflates to a megabyte: only the declared bytes are inflated, and its CRC
    then fails (the uncompressed size is at offset 22 of its local header, 24 of its central directory entry)."""
    monkeypatch.setattr(bundle, "MAX_BYTES", 64 * 1024)
    ten = (10).to_bytes(4, "little")
    liar = _patched(
        _zip([*FILES, ("pdf-tools/liar", bytes(1024 * 1024))]), "pdf-tools/liar", local={22: ten}, central={24: ten}
    )
    with zipfile.ZipFile(io.BytesIO(liar)) as read:
        assert read.getinfo("pdf-tools/liar").file_size == 10
    with pytest.raises(BundleError, match="'pdf-tools/liar' in the skill's zip cannot be read"):
        from_zip(liar)


def test_a_link_in_a_zip_is_refused() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in FILES:
            archive.writestr(name, data)
        link = zipfile.ZipInfo("pdf-tools/passwd")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, "/etc/passwd")
    with pytest.raises(BundleError, match="is a link"):
        from_zip(out.getvalue())


def test_a_zip_of_files_outside_one_folder_is_refused() -> None:
    with pytest.raises(BundleError, match="not inside a top-level folder"):
        from_zip(_zip([("SKILL.md", MANIFEST), ("run.py", b"")]))
    with pytest.raises(BundleError, match="one top-level folder"):
        from_zip(_zip([*FILES, ("other/x", b"")]))


def test_a_zip_with_folders_as_entries_and_any_compression_reads() -> None:
    for method in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
        made = from_zip(_zip([("pdf-tools/", b""), ("pdf-tools/scripts/", b""), *FILES], method))
        assert made == from_files(FILES)


def test_an_encrypted_or_unreadable_member_is_a_bundle_error() -> None:
    encrypted = b"\x01\x00"  # the general purpose flags (local header: offset 6; central entry: 8)
    data = _patched(_zip(FILES), "pdf-tools/SKILL.md", local={6: encrypted}, central={8: encrypted})
    with pytest.raises(BundleError, match="cannot be read"):
        from_zip(data)
    for junk in (b"", b"PK", b"not a zip at all", b"PK\x05\x06" + bytes(18)):
        with pytest.raises(BundleError):
            from_zip(junk)


def test_damaged_zips_raise_nothing_but_bundle_errors() -> None:
    """Bytes flipped and zips cut short, with every compression zipfile reads: each is a bundle or a BundleError
    (before the fix: zlib.error, NotImplementedError and IndexError escaped, each a 500)."""
    rng = random.Random(7)
    for method in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
        good = _zip(FILES, method)
        for _ in range(1500):
            data = bytearray(good)
            for _ in range(rng.randint(1, 6)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            if rng.random() < 0.1:
                data = data[: rng.randrange(len(data))]
            try:
                from_zip(bytes(data))
            except BundleError:
                pass


# -- an upload's parts ----------------------------------------------------------------------------------------------


def test_an_upload_is_one_zip_or_the_folders_files() -> None:
    archive = _zip(FILES)
    assert from_upload([("pdf-tools.zip", archive)]) == from_files(FILES)
    assert from_upload([("upload", archive)]) == from_files(FILES)  # a zip by its bytes, whatever its name
    assert from_upload(FILES) == from_files(FILES)
    assert from_upload(FILES[:1]).name == "pdf-tools"  # a folder of one file
    # A zip inside the folder is one of its files.
    inner = from_upload([*FILES, ("pdf-tools/assets/data.zip", archive)])
    assert dict(inner.files)["assets/data.zip"] == archive
    assert is_zip("a.ZIP", b"") and not is_zip("pdf-tools/a.zip", archive)


@pytest.mark.parametrize(
    ("parts", "match"),
    [
        ([], "No files were sent"),
        ([("notes.txt", b"hello")], "neither a zip"),
        ([("SKILL.md", MANIFEST)], "neither a zip"),
        ([("a.zip", _zip(FILES)), ("b.zip", _zip(FILES))], "not several zips"),
        ([("a.zip", _zip(FILES)), *FILES], "not both"),
        ([("broken.zip", b"PK\x03\x04 cut short")], "not a readable zip"),
    ],
)
def test_an_upload_that_is_no_bundle_says_what_to_send(parts: list[tuple[str, bytes]], match: str) -> None:
    with pytest.raises(BundleError, match=match):
        from_upload(parts)
