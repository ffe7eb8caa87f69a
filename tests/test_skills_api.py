"""The Skills API over HTTP (pipeline/objects/skills.py, transports/skills.py), driven by openai-python unmodified on
both stores (SQLite, PostgreSQL): a skill created from a zip and from a directory upload (openai-python's
`files=[(path, bytes), …]`), retrieved, listed and paged, its default version changed, its versions created, listed,
retrieved, read and deleted, its zips read back whole; another key's skill is a 404; every bad upload is a 4xx
naming `files` (or the field) and stores nothing; 40 creates at once keep the per-key bound; the Redis store answers
501."""

from __future__ import annotations

import asyncio
import io
import os
import sqlite3
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import openai
import pytest
from openai.types import DeletedSkill, Skill, SkillList
from openai.types.skills import DeletedSkillVersion, SkillVersion, SkillVersionList

from conftest import RunningServer, start_server
from hotloop.skills import bundle
from http_support import error_of
from store_support import drop_namespace, namespace, postgres_url, store_url

KEYS = ["key-a", "key-b", "key-c", "key-d"]
PER_KEY = 30


def _start(kind: str, tmp: Path, **settings: Any) -> RunningServer:
    ns = namespace()
    running = start_server(tmp, api_keys=KEYS, models=["hotloop-sim"], store_url=store_url(kind, ns, tmp), **settings)
    running.kind, running.ns, running.tmp = kind, ns, tmp  # type: ignore[attr-defined]
    return running


def _stop(running: RunningServer) -> None:
    running.stop()
    asyncio.run(drop_namespace(running.kind, running.ns))  # type: ignore[attr-defined]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = _start(request.param, tmp_path_factory.mktemp(f"skills-{request.param}"), skills_max_per_key=PER_KEY)
    yield running
    _stop(running)


def _stored(server: RunningServer) -> tuple[int, int, int]:
    """(skills, versions, chunks) in the server's store, read beside the server: what a refused request must leave."""
    queries = [f"SELECT COUNT(*) FROM {table}" for table in ("skills", "skill_versions", "file_chunks")]
    if server.kind == "sqlite":  # type: ignore[attr-defined]
        with sqlite3.connect(server.tmp / server.ns / "hotloop.db") as conn:  # type: ignore[attr-defined]
            a, b, c = (conn.execute(query).fetchone()[0] for query in queries)
            return a, b, c

    async def count() -> tuple[int, int, int]:
        conn = await asyncpg.connect(postgres_url(), server_settings={"search_path": server.ns})  # type: ignore[attr-defined]
        try:
            a, b, c = [await conn.fetchval(query) for query in queries]
            return a, b, c
        finally:
            await conn.close()

    return asyncio.run(count())


def _manifest(name: str = "pdf-tools", description: str = "Reads and fills PDF forms.") -> bytes:
    return f"---\nname: {name}\ndescription: {description}\n---\n# {name}\n\nRun scripts/fill.py.\n".encode()


def _files(folder: str = "pdf-tools", **fields: str) -> list[tuple[str, bytes]]:
    return [
        (f"{folder}/SKILL.md", _manifest(**fields)),
        (f"{folder}/scripts/fill.py", b"#!/usr/bin/env python3\nprint('filled')\n"),
        (f"{folder}/assets/blank.bin", bytes(range(256)) * 64),
    ]


def _zip(files: list[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files:
            archive.writestr(name, data)
    return out.getvalue()


def _unzipped(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _client(server: RunningServer, key: str = "key-a") -> openai.OpenAI:
    return server.client(api_key=key)


def test_a_skill_from_a_zip_round_trips_through_openai_python(server: RunningServer) -> None:
    client = _client(server)
    files = _files()
    made = client.skills.create(files=("pdf-tools.zip", _zip(files)))
    assert isinstance(made, Skill) and made.id.startswith("skill_")
    assert (made.object, made.name, made.description) == ("skill", "pdf-tools", "Reads and fills PDF forms.")
    assert (made.default_version, made.latest_version) == ("1", "1")
    assert client.skills.retrieve(made.id).model_dump() == made.model_dump()
    content = client.skills.content.retrieve(made.id)
    assert content.response.headers["content-type"] == "application/zip"
    assert _unzipped(content.content) == dict(files)
    assert content.content == bundle.from_files(files).archive()  # the normalized zip, whatever was sent
    deleted = client.skills.delete(made.id)
    assert isinstance(deleted, DeletedSkill)
    assert deleted.model_dump() == {"id": made.id, "deleted": True, "object": "skill.deleted"}
    with pytest.raises(openai.NotFoundError) as gone:
        client.skills.retrieve(made.id)
    assert (gone.value.code, gone.value.param) == ("skill_not_found", "skill_id")


def test_a_skill_from_a_directory_upload(server: RunningServer) -> None:
    """openai-python sends a list as `files[]` parts, each filename the file's path in the folder."""
    client = _client(server)
    files = _files("pdf-tools")
    made = client.skills.create(files=files)
    assert (made.name, made.default_version) == ("pdf-tools", "1")
    assert _unzipped(client.skills.content.retrieve(made.id).content) == dict(files)
    one = client.skills.create(files=[("lone/SKILL.md", _manifest("lone", "One file."))])  # a folder of one file
    assert (one.name, one.description) == ("lone", "One file.")
    with server.http("key-a") as http:  # one `files` part with a path is a folder too
        reply = http.post("/skills", files={"files": ("raw/SKILL.md", _manifest("raw", "Sent raw."))})
        assert reply.status_code == 200, reply.text
        assert reply.json()["name"] == "raw"
        for skill_id in (made.id, one.id, reply.json()["id"]):
            assert http.delete(f"/skills/{skill_id}").status_code == 200


def test_skills_are_listed_and_paged(server: RunningServer) -> None:
    client = _client(server, "key-c")
    ids = {client.skills.create(files=_files(f"s{n}", name=f"s{n}")).id for n in range(3)}
    newest_first = [s.id for s in client.skills.list(limit=1)]  # the SDK follows the cursor, a skill a page
    assert set(newest_first) == ids and len(newest_first) == 3
    assert [s.id for s in client.skills.list(order="asc")] == list(reversed(newest_first))
    with server.http("key-c") as http:
        page = http.get("/skills", params={"limit": 2}).json()
        assert (page["object"], page["has_more"], len(page["data"])) == ("list", True, 2)
        assert (page["first_id"], page["last_id"]) == (newest_first[0], newest_first[1])
        rest = http.get("/skills", params={"limit": 2, "after": page["last_id"]}).json()
        assert [s["id"] for s in rest["data"]] == newest_first[2:] and not rest["has_more"]
        assert http.get("/skills", params={"after": "skill_nope"}).json()["data"] == []
        error_of(http.get("/skills", params={"limit": 101}), 400, "invalid_value", "limit")
        error_of(http.get("/skills", params={"order": "up"}), 400, "invalid_value", "order")
        for skill_id in ids:
            http.delete(f"/skills/{skill_id}")


def test_versions_are_made_listed_read_and_deleted(server: RunningServer) -> None:
    client = _client(server)
    skill = client.skills.create(files=_files(description="First."))
    second = client.skills.versions.create(skill.id, files=("v2.zip", _zip(_files(description="Second."))))
    assert isinstance(second, SkillVersion) and second.id.startswith("skillver_")
    assert (second.object, second.skill_id, second.version, second.description) == (
        "skill.version",
        skill.id,
        "2",
        "Second.",
    )
    found = client.skills.retrieve(skill.id)
    assert (found.default_version, found.latest_version, found.description) == ("1", "2", "First.")
    # `default=True` makes the new version the default: the skill takes its name and description.
    third = client.skills.versions.create(skill.id, default=True, files=_files("renamed", name="renamed"))
    assert third.version == "3" and third.name == "renamed"
    found = client.skills.retrieve(skill.id)
    assert (found.default_version, found.latest_version, found.name) == ("3", "3", "renamed")
    assert client.skills.versions.retrieve("2", skill_id=skill.id).model_dump() == second.model_dump()
    assert client.skills.versions.retrieve("latest", skill_id=skill.id).version == "3"
    listed = [v.version for v in client.skills.versions.list(skill.id, limit=1)]  # paged by version id
    assert listed == ["3", "2", "1"]
    assert [v.version for v in client.skills.versions.list(skill.id, order="asc")] == ["1", "2", "3"]
    v2 = client.skills.versions.content.retrieve("2", skill_id=skill.id)
    assert _unzipped(v2.content) == dict(_files(description="Second."))
    assert _unzipped(client.skills.content.retrieve(skill.id).content) == dict(_files("renamed", name="renamed"))
    # The default moves back; the skill's name follows it.
    moved = client.skills.update(skill.id, default_version="1")
    assert (moved.default_version, moved.latest_version, moved.name, moved.description) == (
        "1",
        "3",
        "pdf-tools",
        "First.",
    )
    assert _unzipped(client.skills.content.retrieve(skill.id).content) == dict(_files(description="First."))
    deleted = client.skills.versions.delete("3", skill_id=skill.id)
    assert isinstance(deleted, DeletedSkillVersion)
    assert deleted.model_dump() == {
        "id": third.id,
        "deleted": True,
        "object": "skill.version.deleted",
        "version": "3",
    }
    assert client.skills.retrieve(skill.id).latest_version == "2"
    assert client.skills.versions.create(skill.id, files=_files()).version == "4"  # a number is never given twice
    with server.http("key-a") as http:
        base = f"/skills/{skill.id}/versions"
        error_of(http.delete(f"{base}/1"), 400, "default_version_in_use", "version")  # the default stays
        error_of(http.get(f"{base}/3"), 404, "skill_version_not_found", "version")
        error_of(http.get(f"{base}/3/content"), 404, "skill_version_not_found", "version")
        error_of(http.delete(f"{base}/3"), 404, "skill_version_not_found", "version")
        for malformed in ("abc", "0", "01", "1.5", "99999999999"):
            error_of(http.get(f"{base}/{malformed}"), 400, "invalid_value", "version")
        error_of(
            http.post(base, files={"files": ("x.zip", _zip(_files()))}, data={"default": "yes"}),
            400,
            "invalid_value",
            "default",
        )
        assert http.get(f"{base}/2/content").headers["content-type"] == "application/zip"
    client.skills.delete(skill.id)
    with pytest.raises(openai.NotFoundError) as gone:
        client.skills.versions.retrieve("1", skill_id=skill.id)
    assert (gone.value.code, gone.value.param) == ("skill_not_found", "skill_id")


def test_every_shape_validates_against_openai_pythons_types(server: RunningServer) -> None:
    """openai-python builds its models without validating them: each body is validated here, strictly."""
    with server.http("key-a") as http:
        made = http.post("/skills", files=[(FILES, f) for f in _files()]).json()
        skill_id = made["id"]
        version = http.post(f"/skills/{skill_id}/versions", files={"files": ("v.zip", _zip(_files()))}).json()
        for model, body in (
            (Skill, made),
            (Skill, http.get(f"/skills/{skill_id}").json()),
            (Skill, http.post(f"/skills/{skill_id}", json={"default_version": "2"}).json()),
            (SkillList, http.get("/skills").json()),
            (SkillVersion, version),
            (SkillVersion, http.get(f"/skills/{skill_id}/versions/1").json()),
            (SkillVersionList, http.get(f"/skills/{skill_id}/versions").json()),
            (DeletedSkillVersion, http.delete(f"/skills/{skill_id}/versions/1").json()),
            (DeletedSkill, http.delete(f"/skills/{skill_id}").json()),
        ):
            parsed = model.model_validate(body, strict=True)
            assert parsed.model_dump(exclude_unset=True) == body


def test_the_default_version_must_be_one_of_the_skills(server: RunningServer) -> None:
    skill = _client(server).skills.create(files=_files())
    before = _stored(server)
    with server.http("key-a") as http:
        one = f"/skills/{skill.id}"
        error_of(http.post(one, json={"default_version": "2"}), 404, "skill_version_not_found", "default_version")
        error_of(http.post(one, json={"default_version": "two"}), 400, "invalid_value", "default_version")
        error_of(http.post(one, json={"default_version": 1}), 400, "invalid_type", "default_version")
        error_of(http.post(one, json={}), 400, "missing_required_parameter", "default_version")
        error_of(http.post(one, json={"default_version": "1", "x": 1}), 400, "unknown_parameter", "x")
        error_of(http.post(one, content=b"{not json"), 400, "invalid_json", None)
        error_of(http.post("/skills/skill_nope", json={"default_version": "1"}), 404, "skill_not_found", "skill_id")
        assert http.post(one, json={"default_version": "latest"}).json()["default_version"] == "1"
        assert http.delete(one).status_code == 200
    assert _stored(server)[0] == before[0] - 1


def test_another_keys_skill_is_not_found(server: RunningServer) -> None:
    mine = _client(server).skills.create(files=_files())
    with server.http("key-b") as other:
        one = f"/skills/{mine.id}"
        for reply in (
            other.get(one),
            other.post(one, json={"default_version": "1"}),
            other.delete(one),
            other.get(f"{one}/content"),
            other.get(f"{one}/versions"),
            other.post(f"{one}/versions", files={"files": ("x.zip", _zip(_files()))}),
            other.get(f"{one}/versions/1"),
            other.get(f"{one}/versions/1/content"),
            other.delete(f"{one}/versions/1"),
        ):
            error_of(reply, 404, "skill_not_found", "skill_id")
        assert mine.id not in [s["id"] for s in other.get("/skills").json()["data"]]
    assert _client(server).skills.retrieve(mine.id).latest_version == "1"  # nothing of it changed
    _client(server).skills.delete(mine.id)


def test_an_id_no_skill_can_have_is_missing(server: RunningServer) -> None:
    """A NUL in an id or a cursor (which PostgreSQL's text cannot hold) reads as an unknown id, never a 500."""
    skill = _client(server).skills.create(files=_files())
    with server.http("key-a") as http:
        for reply in (
            http.get("/skills/%00"),
            http.get("/skills/skill_%00x/versions"),
            http.post("/skills/%00", json={"default_version": "1"}),
            http.delete("/skills/%00"),
            http.get("/skills/%00/content"),
            http.get("/skills/%00/versions/1/content"),
            http.post("/skills/%00/versions", files={"files": ("s.zip", _zip(_files()))}),
        ):
            error_of(reply, 404, "skill_not_found", "skill_id")
        assert http.get("/skills", params={"after": "skill_\x00"}).json()["data"] == []
        assert http.get(f"/skills/{skill.id}/versions", params={"after": "\x00"}).json()["data"] == []
        error_of(http.get(f"/skills/{skill.id}/versions/1%00"), 400, "invalid_value", "version")
        assert http.delete(f"/skills/{skill.id}").status_code == 200


def _link_zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in _files():
            archive.writestr(name, data)
        link = zipfile.ZipInfo("pdf-tools/passwd")
        link.external_attr = 0o120777 << 16  # a symlink's mode
        archive.writestr(link, "/etc/passwd")
    return out.getvalue()


FILES = "files[]"  # openai-python's name for a list's parts
BAD_UPLOADS: list[tuple[str, list[tuple[str, tuple[str, bytes] | tuple[None, str]]], str, str]] = [
    ("no files", [("other", (None, "x"))], "unknown_parameter", "other"),
    ("files as text", [("files", (None, "pdf-tools/SKILL.md"))], "invalid_value", "files"),
    (
        "an unknown file field",
        [*((FILES, f) for f in _files()), ("file", ("x.zip", b"PK"))],
        "unknown_parameter",
        "file",
    ),
    ("two zips", [(FILES, ("a.zip", _zip(_files()))), (FILES, ("b.zip", _zip(_files())))], "invalid_value", "files"),
    (
        "a zip and loose files",
        [(FILES, ("a.zip", _zip(_files()))), *((FILES, f) for f in _files())],
        "invalid_value",
        "files",
    ),
    ("a single file not a zip", [("files", ("notes.txt", b"just text"))], "invalid_value", "files"),
    ("a broken zip", [("files", ("skill.zip", b"PK\x03\x04 and then nothing"))], "invalid_value", "files"),
    (
        "a traversal",
        [*((FILES, f) for f in _files()), (FILES, ("pdf-tools/../../etc/cron.d/x", b"x"))],
        "invalid_value",
        "files",
    ),
    ("an absolute path", [*((FILES, f) for f in _files()), (FILES, ("/etc/passwd", b"x"))], "invalid_value", "files"),
    (
        "a traversal in a zip",
        [("files", ("s.zip", _zip([*_files(), ("pdf-tools/../evil", b"x")])))],
        "invalid_value",
        "files",
    ),
    ("a link in a zip", [("files", ("s.zip", _link_zip()))], "invalid_value", "files"),
    ("a duplicate path", [*((FILES, f) for f in _files()), (FILES, _files()[0])], "invalid_value", "files"),
    (
        "two folders",
        [*((FILES, f) for f in _files()), (FILES, ("other/SKILL.md", _manifest()))],
        "invalid_value",
        "files",
    ),
    ("no folder", [(FILES, ("SKILL.md", _manifest())), (FILES, ("run.py", b""))], "invalid_value", "files"),
    ("no SKILL.md", [(FILES, f) for f in _files()[1:]], "invalid_value", "files"),
    ("no front matter", [(FILES, ("pdf-tools/SKILL.md", b"# just a title\n"))], "invalid_value", "files"),
    ("a bad name", [(FILES, ("pdf-tools/SKILL.md", _manifest(name="PDF Tools")))], "invalid_value", "files"),
    ("no description", [(FILES, ("pdf-tools/SKILL.md", b"---\nname: pdf-tools\n---\n"))], "invalid_value", "files"),
    ("an empty zip", [("files", ("empty.zip", _zip([])))], "invalid_value", "files"),
    (
        "a NUL in the description",  # PostgreSQL's text cannot hold one: refused with the bundle, not a 500
        [(FILES, ("pdf-tools/SKILL.md", b"---\nname: pdf-tools\ndescription: a\x00b\n---\n"))],
        "invalid_value",
        "files",
    ),
]


@pytest.mark.parametrize(("case", "form", "code", "param"), BAD_UPLOADS, ids=[case[0] for case in BAD_UPLOADS])
def test_a_bad_upload_names_the_field_and_stores_nothing(
    server: RunningServer, case: str, form: list[Any], code: str, param: str
) -> None:
    skill = _client(server, "key-c").skills.create(files=_files())
    before = _stored(server)
    with server.http("key-c") as http:
        for path in ("/skills", f"/skills/{skill.id}/versions"):
            error_of(http.post(path, files=form), 400, code, param)
    assert _stored(server) == before
    _client(server, "key-c").skills.delete(skill.id)


def test_no_upload_at_all_is_a_400_naming_files(server: RunningServer) -> None:
    before = _stored(server)
    with pytest.raises(openai.BadRequestError) as refused:
        _client(server).skills.create()  # openai-python sends `{}` as JSON
    assert (refused.value.code, refused.value.param) == ("missing_required_parameter", "files")
    with server.http("key-a") as http:
        error_of(
            http.post("/skills", content=b"", headers={"content-type": "application/zip"}),
            400,
            "missing_required_parameter",
            "files",
        )
        broken = b'--b\r\nContent-Disposition: form-data; name="files"; filename="a.zip"\r\n\r\nPK'  # no end
        error_of(
            http.post("/skills", content=broken, headers={"content-type": "multipart/form-data; boundary=b"}),
            400,
            "missing_required_parameter",  # the part never ended: no part was read
            "files",
        )
        error_of(
            http.post("/skills", files={"default": (None, "true"), "files": ("s.zip", _zip(_files()))}),
            400,
            "unknown_parameter",
            "default",
        )  # a version create's field, not a skill's
        error_of(
            http.post("/skills/skill_nope/versions", files={"files": ("s.zip", _zip(_files()))}),
            404,
            "skill_not_found",
            "skill_id",
        )
    assert _stored(server) == before


def test_an_upload_past_the_bounds_is_refused(server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The body is cut off with 413 past bundle.MAX_ZIP_BYTES (declared or not), a form of more than
    bundle.MAX_FILES parts is a 400 naming `files`, and a zip bomb stops at bundle.MAX_BYTES: nothing is stored."""
    monkeypatch.setattr(bundle, "MAX_ZIP_BYTES", 64 * 1024)
    monkeypatch.setattr(bundle, "MAX_FILES", 3)
    monkeypatch.setattr(bundle, "MAX_BYTES", 256 * 1024)
    before = _stored(server)
    noise = os.urandom(256 * 1024)  # bytes that do not deflate
    with server.http("key-a") as http:
        big_zip = _zip([*_files(), ("pdf-tools/noise", noise)])
        error_of(http.post("/skills", files={"files": ("s.zip", big_zip)}), 413, "request_too_large", None)
        loose = [*((FILES, f) for f in _files()[:2]), (FILES, ("pdf-tools/noise", noise))]
        error_of(http.post("/skills", files=loose), 413, "request_too_large", None)

        def chunked() -> Iterator[bytes]:  # no content-length: cut off as it arrives
            yield b'--b\r\nContent-Disposition: form-data; name="files"; filename="s.zip"\r\n\r\n'
            for _ in range(64):
                yield noise[:4096]
            yield b"\r\n--b--\r\n"

        error_of(
            http.post("/skills", content=chunked(), headers={"content-type": "multipart/form-data; boundary=b"}),
            413,
            "request_too_large",
            None,
        )
        four = [*((FILES, f) for f in _files()), (FILES, ("pdf-tools/four", b"4"))]
        error_of(http.post("/skills", files=four), 400, "invalid_value", "files")
        bomb = _zip([*_files(), ("pdf-tools/zeros", bytes(8 * 1024 * 1024))])  # 8 MB of zeros in some 8 KB
        assert len(bomb) < 64 * 1024
        error_of(http.post("/skills", files={"files": ("bomb.zip", bomb)}), 400, "invalid_value", "files")
    assert _stored(server) == before


def test_forty_creates_at_once_keep_the_bound(server: RunningServer) -> None:
    async def create_all() -> list[Any]:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="key-d", max_retries=0) as client:
            return await asyncio.gather(
                *(client.skills.create(files=_files(f"s{n}", name=f"s{n}")) for n in range(PER_KEY + 10)),
                return_exceptions=True,
            )

    made = asyncio.run(create_all())
    ids = [skill.id for skill in made if isinstance(skill, Skill)]
    refused = [error for error in made if not isinstance(error, Skill)]
    assert len(set(ids)) == PER_KEY, refused[:1]
    assert all(isinstance(error, openai.BadRequestError) and error.code == "skills_limit_reached" for error in refused)
    assert sorted(s.id for s in _client(server, "key-d").skills.list(limit=100)) == sorted(ids)
    with server.http("key-d") as http:
        for skill_id in ids:
            assert http.delete(f"/skills/{skill_id}").status_code == 200


def test_the_redis_store_answers_501_by_name(tmp_path: Path) -> None:
    running = _start("redis", tmp_path)
    try:
        with running.http("key-a") as http:
            error_of(
                http.post("/skills", files={"files": ("s.zip", _zip(_files()))}), 501, "skills_not_supported", None
            )
            error_of(http.get("/skills"), 501, "skills_not_supported", None)
            error_of(http.get("/skills/skill_x/versions/1/content"), 501, "skills_not_supported", None)
    finally:
        _stop(running)
