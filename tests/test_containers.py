"""The Containers API over HTTP (pipeline/objects/containers.py, transports/containers.py), driven by openai-python
unmodified on both stores (SQLite, PostgreSQL): containers created, listed, retrieved and deleted; their files
uploaded, copied from the Files API, listed, retrieved, read and deleted; another key's container is a 404; bad
input is a 400 naming the parameter and stores nothing; a file name that would reach outside /mnt/data is refused;
50 containers created at once; an idle container expires and its files go with it; the Redis store answers 501."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types import ContainerCreateResponse, ContainerRetrieveResponse
from openai.types.containers import FileCreateResponse

from conftest import RunningServer, start_server
from http_support import error_of
from store_support import drop_namespace, namespace, store_url

KEYS = ["key-a", "key-b", "key-c"]
MAX_BYTES = 2 * 1024 * 1024


def _start(kind: str, tmp: Path, **settings: Any) -> RunningServer:
    ns = namespace()
    running = start_server(
        tmp,
        api_keys=KEYS,
        models=["hotloop-sim"],
        store_url=store_url(kind, ns, tmp),
        files_max_bytes=MAX_BYTES,
        **settings,
    )
    running.kind, running.ns = kind, ns  # type: ignore[attr-defined]
    return running


def _stop(running: RunningServer) -> None:
    running.stop()
    asyncio.run(drop_namespace(running.kind, running.ns))  # type: ignore[attr-defined]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = _start(request.param, tmp_path_factory.mktemp(f"containers-{request.param}"))
    yield running
    _stop(running)


def _client(server: RunningServer, key: str = "key-a") -> openai.OpenAI:
    return server.client(api_key=key)


def _count(server: RunningServer, key: str = "key-a") -> int:
    with server.http(key) as http:
        return len(http.get("/containers", params={"limit": 100}).json()["data"])


def test_a_container_round_trips_through_openai_python(server: RunningServer) -> None:
    client = _client(server)
    made = client.containers.create(name="analysis", expires_after={"anchor": "last_active_at", "minutes": 5})
    assert isinstance(made, ContainerCreateResponse) and made.id.startswith("cntr_")
    assert (made.object, made.status, made.name, made.memory_limit) == ("container", "running", "analysis", "1g")
    assert made.expires_after is not None and (made.expires_after.anchor, made.expires_after.minutes) == (
        "last_active_at",
        5,
    )
    assert made.network_policy is not None and made.network_policy.type == "disabled"
    assert made.last_active_at == made.created_at
    found = client.containers.retrieve(made.id)
    assert isinstance(found, ContainerRetrieveResponse) and found.model_dump() == made.model_dump()
    time.sleep(1.05)  # created_at is in seconds: a second apart, so the lists' order is theirs
    big = client.containers.create(name="big", memory_limit="4g")
    assert big.memory_limit == "4g" and big.expires_after is not None and big.expires_after.minutes == 20
    assert [c.id for c in client.containers.list(limit=1)][:2] == [big.id, made.id]  # the SDK follows the cursor
    assert [c.id for c in client.containers.list(name="analysis")] == [made.id]
    assert [c.id for c in client.containers.list(order="asc")][-2:] == [made.id, big.id]
    with server.http("key-a") as http:
        assert http.delete(f"/containers/{big.id}").json() == {
            "id": big.id,
            "object": "container.deleted",
            "deleted": True,
        }
    client.containers.delete(made.id)
    with pytest.raises(openai.NotFoundError) as missing:
        client.containers.retrieve(made.id)
    assert missing.value.code == "container_not_found"
    assert made.id not in [c.id for c in client.containers.list()]


def test_files_are_uploaded_copied_listed_read_and_deleted(server: RunningServer) -> None:
    client = _client(server)
    source = client.files.create(file=("prices.csv", b"item,price\ntea,3\n"), purpose="user_data")
    container = client.containers.create(name="files", file_ids=[source.id])
    [copied] = client.containers.files.list(container.id)
    assert (copied.path, copied.source, copied.bytes, copied.container_id) == (
        "/mnt/data/prices.csv",
        "user",
        source.bytes,
        container.id,
    )
    data = bytes(range(256)) * 4096 + b"tail"  # a megabyte and then some: two chunks
    uploaded = client.containers.files.create(container.id, file=("notes/raw.bin", data))
    assert isinstance(uploaded, FileCreateResponse) and uploaded.id.startswith("cfile_")
    assert (uploaded.object, uploaded.path, uploaded.bytes, uploaded.source) == (
        "container.file",
        "/mnt/data/notes/raw.bin",
        len(data),
        "user",
    )
    other = client.files.create(file=("extra.txt", b"copied by id"), purpose="assistants")
    by_id = client.containers.files.create(container.id, file_id=other.id)
    assert (by_id.path, by_id.bytes) == ("/mnt/data/extra.txt", 12)
    assert (
        client.containers.files.retrieve(uploaded.id, container_id=container.id).model_dump() == uploaded.model_dump()
    )
    assert client.containers.files.content.retrieve(uploaded.id, container_id=container.id).content == data
    form_source = client.files.create(file=("form.txt", b"named in a form"), purpose="user_data")
    with server.http("key-a") as http:  # `file_id` as a form field copies too
        in_form = http.post(f"/containers/{container.id}/files", files={"file_id": (None, form_source.id)}).json()
    assert (in_form["path"], in_form["bytes"], in_form["source"]) == ("/mnt/data/form.txt", 15, "user")
    client.containers.files.delete(in_form["id"], container_id=container.id)
    every = [f.id for f in client.containers.files.list(container.id, limit=1, order="asc")]
    assert set(every) == {copied.id, uploaded.id, by_id.id} and len(every) == 3
    client.files.delete(source.id)  # the container's copy is its own
    copy = client.containers.files.content.retrieve(copied.id, container_id=container.id)
    assert copy.content == b"item,price\ntea,3\n"
    with server.http("key-a") as http:
        reply = http.delete(f"/containers/{container.id}/files/{by_id.id}")
        assert reply.json() == {"id": by_id.id, "object": "container.file.deleted", "deleted": True}
        error_of(http.get(f"/containers/{container.id}/files/{by_id.id}"), 404, "file_not_found", "file_id")
        error_of(http.get(f"/containers/{container.id}/files/{by_id.id}/content"), 404, "file_not_found", "file_id")
    client.containers.files.delete(uploaded.id, container_id=container.id)
    assert [f.id for f in client.containers.files.list(container.id)] == [copied.id]
    client.containers.delete(container.id)
    with pytest.raises(openai.NotFoundError) as gone:
        client.containers.files.retrieve(copied.id, container_id=container.id)
    assert gone.value.code == "container_not_found"


def test_another_keys_container_is_not_found(server: RunningServer) -> None:
    mine = _client(server).containers.create(name="private")
    file = _client(server).containers.files.create(mine.id, file=("secret.txt", b"mine"))
    a_file = _client(server).files.create(file=("a.txt", b"a's"), purpose="user_data")
    with server.http("key-b") as other:
        for reply, param in (
            (other.get(f"/containers/{mine.id}"), "container_id"),
            (other.delete(f"/containers/{mine.id}"), "container_id"),
            (other.get(f"/containers/{mine.id}/files"), "container_id"),
            (other.get(f"/containers/{mine.id}/files/{file.id}"), "container_id"),
            (other.get(f"/containers/{mine.id}/files/{file.id}/content"), "container_id"),
            (other.delete(f"/containers/{mine.id}/files/{file.id}"), "container_id"),
            (other.post(f"/containers/{mine.id}/files", files={"file": ("x.txt", b"theirs")}), "container_id"),
        ):
            error_of(reply, 404, "container_not_found", param)
        assert mine.id not in [c["id"] for c in other.get("/containers").json()["data"]]
        # a's Files API file is no file of b's: neither copied into b's container nor into a new one.
        theirs = other.post("/containers", json={"name": "b's"}).json()["id"]
        copy = other.post(f"/containers/{theirs}/files", json={"file_id": a_file.id})
        error_of(copy, 404, "file_not_found", "file_id")
        refused = other.post("/containers", json={"name": "b2", "file_ids": [a_file.id]})
        error_of(refused, 404, "file_not_found", "file_ids[0]")
    assert _client(server).containers.files.content.retrieve(file.id, container_id=mine.id).content == b"mine"


EXP, MINUTES, SKILL = "expires_after", "expires_after.minutes", "skills[0].skill_id"


def test_bad_input_names_the_parameter_and_stores_nothing(server: RunningServer) -> None:
    before = _count(server)
    file = _client(server).files.create(file=("ok.txt", b"ok"), purpose="user_data")
    cases: list[tuple[Any, int, str, str | None]] = [
        ({"name": "x", "colour": "red"}, 400, "unknown_parameter", "colour"),
        ({}, 400, "missing_required_parameter", "name"),
        ({"name": 7}, 400, "invalid_type", "name"),
        ({"name": "x" * 257}, 400, "invalid_value", "name"),
        ({"name": "x", "memory_limit": "2g"}, 400, "invalid_value", "memory_limit"),
        ({"name": "x", "expires_after": {"anchor": "created_at", "minutes": 5}}, 400, "invalid_value", EXP + ".anchor"),
        ({"name": "x", "expires_after": {"anchor": "last_active_at", "minutes": 0}}, 400, "invalid_value", MINUTES),
        (
            {"name": "x", "expires_after": {"anchor": "last_active_at", "minutes": 10_081}},
            400,
            "invalid_value",
            MINUTES,
        ),
        ({"name": "x", "expires_after": {"anchor": "last_active_at"}}, 400, "missing_required_parameter", MINUTES),
        ({"name": "x", "network_policy": {"type": "open"}}, 400, "invalid_value", "network_policy.type"),
        (
            {"name": "x", "network_policy": {"type": "allowlist", "allowed_domains": ["pypi.org", "-bad.org"]}},
            400,
            "invalid_value",
            "network_policy.allowed_domains[1]",
        ),
        (
            {
                "name": "x",
                "network_policy": {"type": "allowlist", "allowed_domains": ["a.org"], "domain_secrets": [{}]},
            },
            400,
            "invalid_value",
            "network_policy.domain_secrets",
        ),
        ({"name": "x", "skills": [{"type": "skill_reference", "skill_id": "sk_1"}]}, 404, "skill_not_found", SKILL),
        ({"name": "x", "skills": [{"type": "inline", "name": "a"}]}, 400, "invalid_value", "skills[0].description"),
        ({"name": "x", "file_ids": [file.id, "file-nope"]}, 404, "file_not_found", "file_ids[1]"),
        ([1, 2], 400, "invalid_type", None),
    ]
    with server.http("key-a") as http:
        for body, status, code, param in cases:
            error_of(http.post("/containers", json=body), status, code, param)
        error_of(http.post("/containers", content=b"{not json"), 400, "invalid_json", None)
    assert _count(server) == before


def test_bad_files_name_the_parameter_and_store_nothing(server: RunningServer) -> None:
    container = _client(server).containers.create(name="bad files")
    files = f"/containers/{container.id}/files"
    with server.http("key-a") as http:
        error_of(http.post(files, json={}), 400, "missing_required_parameter", "file_id")
        error_of(http.post(files, json={"file_id": 1}), 400, "invalid_type", "file_id")
        error_of(http.post(files, json={"file_id": "f", "x": 1}), 400, "unknown_parameter", "x")
        error_of(http.post(files, json={"file_id": "file-nope"}), 404, "file_not_found", "file_id")
        no_part = http.post(files, files={"other": (None, "x")})
        error_of(no_part, 400, "missing_required_parameter", "file")
        both = http.post(files, files={"file": ("a.txt", b"a")}, data={"file_id": "file-x"})
        error_of(both, 400, "invalid_value", "file_id")
        big = http.post(files, files={"file": ("big.bin", b"x" * (MAX_BYTES + 1))})
        error_of(big, 413, "request_too_large", None)
        first = http.post(files, files={"file": ("same.txt", b"1")})
        assert first.status_code == 200, first.text
        error_of(http.post(files, files={"file": ("same.txt", b"2")}), 400, "path_taken", "file")
        error_of(http.post(files, files={"file": ("same.txt/under", b"3")}), 400, "path_taken", "file")
        listed = http.get(files).json()["data"]
        assert [f["path"] for f in listed] == ["/mnt/data/same.txt"]
        assert http.get(f"{files}/{listed[0]['id']}/content").content == b"1"


@pytest.mark.parametrize(
    "name",
    [
        b"../../etc/passwd",
        b"/etc/passwd",
        b"/mnt/data/../../etc/cron.d/evil",
        b"notes/../../../root/.ssh/authorized_keys",
        b"..\\..\\windows\\system32",
        b"nul\x00.txt",
        b"tab\there",
        b"dir/",
        b"a//b",
        b"./.",
        b"..",
    ],
)
def test_a_file_name_that_reaches_outside_is_refused(server: RunningServer, name: bytes) -> None:
    """An uploaded file is bytes, never a link: what its name could make of it is all there is to refuse. The
    sandbox writes a container's files without following links (sandbox/files.py); a stored name never leaves
    /mnt/data. The form is sent as raw bytes, so the name reaches the server as written (httpx would escape a NUL)."""
    client = _client(server)
    container = client.containers.create(name="escape")
    form = b'--b\r\nContent-Disposition: form-data; name="file"; filename="%s"\r\n\r\n#!/bin/sh\r\n--b--\r\n' % name
    with server.http("key-a") as http:
        reply = http.post(
            f"/containers/{container.id}/files",
            content=form,
            headers={"content-type": "multipart/form-data; boundary=b"},
        )
        error_of(reply, 400, "invalid_value", "file")
    # A Files API file may carry such a name; copying it in is refused the same way.
    source = client.files.create(file=("../../etc/passwd", b"root::0:0"), purpose="user_data")
    with pytest.raises(openai.BadRequestError) as refused:
        client.containers.files.create(container.id, file_id=source.id)
    assert refused.value.param == "file_id"
    with pytest.raises(openai.BadRequestError) as at_create:
        client.containers.create(name="escape 2", file_ids=[source.id])
    assert at_create.value.param == "file_ids[0]"
    assert list(client.containers.files.list(container.id)) == []


def test_fifty_containers_created_at_once(server: RunningServer) -> None:
    async def create_all() -> list[str]:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="key-c", max_retries=0) as client:
            made = await asyncio.gather(*(client.containers.create(name=f"c{n}") for n in range(50)))
            return [container.id for container in made]

    ids = asyncio.run(create_all())
    assert len(set(ids)) == 50
    listed = [c.id for c in _client(server, "key-c").containers.list(limit=100)]
    assert sorted(listed) == sorted(ids)
    with server.http("key-c") as http:
        for container_id in ids:
            assert http.delete(f"/containers/{container_id}").status_code == 200


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_an_idle_container_expires_with_its_files(kind: str, tmp_path: Path) -> None:
    """The server's clock is moved an hour on (`Containers.clock`): the container reads as gone at once, and the
    sweep (every 0.1 s here) deletes it with its files."""
    running = _start(kind, tmp_path, containers_sweep_s=0.1, containers_max_per_key=2)
    try:
        client = _client(running)
        idle = client.containers.create(name="idle", expires_after={"anchor": "last_active_at", "minutes": 1})
        kept = client.containers.create(name="kept", expires_after={"anchor": "last_active_at", "minutes": 120})
        file = client.containers.files.create(idle.id, file=("result.txt", b"soon gone"))
        heard: list[str] = []
        containers = running.service.containers
        containers.on_gone(heard.append)
        containers.clock = lambda: time.time() + 3600
        with running.http("key-a") as http:
            error_of(http.get(f"/containers/{idle.id}"), 404, "container_not_found", "container_id")
            deadline = time.monotonic() + 10
            while idle.id not in heard:
                assert time.monotonic() < deadline, heard
                time.sleep(0.05)
            containers.clock = time.time
            error_of(
                http.get(f"/containers/{idle.id}/files/{file.id}/content"), 404, "container_not_found", "container_id"
            )
        assert [c.id for c in client.containers.list()] == [kept.id]
        again = client.containers.create(name="again")  # the expired one no longer counts (max 2)
        assert again.id != idle.id
    finally:
        _stop(running)


def test_the_redis_store_answers_501_by_name(tmp_path: Path) -> None:
    running = _start("redis", tmp_path)
    try:
        with running.http("key-a") as http:
            error_of(http.post("/containers", json={"name": "x"}), 501, "containers_not_supported", None)
            error_of(http.get("/containers"), 501, "containers_not_supported", None)
            error_of(http.get("/containers/cntr_x/files"), 501, "containers_not_supported", None)
    finally:
        _stop(running)
