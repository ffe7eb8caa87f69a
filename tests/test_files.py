"""The Files API over HTTP (pipeline/objects/files.py, transports/files.py), driven by openai-python unmodified:
upload, retrieve, list with its filters and cursor, content, delete; one key never sees another's files (404, as
if they did not exist); bad uploads get a 4xx naming the field and store nothing; an upload past `files_max_bytes`
is cut off with 413, declared or not; a large upload leaves the other clients alone."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types import FileObject as OpenAIFile

from conftest import RunningServer, start_server
from http_support import error_of

KEYS = ["key-a", "key-b"]


@pytest.fixture(scope="module")
def files_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(
        tmp_path_factory.mktemp("files"), api_keys=KEYS, models=["hotloop-sim"], files_max_bytes=48 * 1024 * 1024
    )
    yield running
    running.stop()


def _client(server: RunningServer, key: str = "key-a") -> openai.OpenAI:
    return server.client(api_key=key)


def test_a_file_round_trips_through_openai_python(files_server: RunningServer) -> None:
    client = _client(files_server)
    data = os.urandom(3 * 1024 * 1024 + 7)
    made = client.files.create(file=("notes.bin", data), purpose="assistants")
    assert isinstance(made, OpenAIFile) and made.id.startswith("file")
    assert (made.bytes, made.filename, made.purpose, made.status, made.expires_at) == (
        len(data),
        "notes.bin",
        "assistants",
        "processed",
        None,
    )
    assert client.files.retrieve(made.id) == made
    assert client.files.content(made.id).content == data
    listed = [f.id for f in client.files.list(purpose="assistants")]
    assert made.id in listed
    deleted = client.files.delete(made.id)
    assert deleted.deleted and deleted.id == made.id
    with pytest.raises(openai.NotFoundError) as missing:
        client.files.retrieve(made.id)
    assert missing.value.code == "file_not_found"


def test_a_name_beyond_latin_1_is_downloaded_under_both_its_names(files_server: RunningServer) -> None:
    """A header is latin-1 on the wire: the name goes as ASCII and as RFC 6266's UTF-8 `filename*`."""
    client = _client(files_server)
    made = client.files.create(file=("données-文件 1.txt", b"x"), purpose="assistants")
    raw = client.files.with_raw_response.content(made.id)
    assert raw.headers["content-disposition"] == (
        "attachment; filename=\"donn_es-__ 1.txt\"; filename*=UTF-8''donn%C3%A9es-%E6%96%87%E4%BB%B6%201.txt"
    )
    assert raw.content == b"x"


def test_lists_page_newest_first_with_a_cursor(files_server: RunningServer) -> None:
    client = _client(files_server, "key-b")
    made = []
    for n in range(3):
        made.append(client.files.create(file=(f"p{n}.txt", b"page %d" % n), purpose="user_data").id)
        time.sleep(1.05)  # created_at is in seconds: each a second apart, so their order is theirs
    first = client.files.list(purpose="user_data", limit=2)
    assert [f.id for f in first.data] == made[::-1][:2] and first.has_more
    assert [f.id for f in client.files.list(purpose="user_data", limit=2, after=made[1])] == [made[0]]
    assert [f.id for f in client.files.list(purpose="user_data", order="asc")] == made
    every = [f.id for f in client.files.list(purpose="user_data", limit=1)]  # the SDK follows the cursor
    assert every == made[::-1]


def test_one_key_never_sees_anothers_file(files_server: RunningServer) -> None:
    mine = _client(files_server, "key-a").files.create(file=("secret.txt", b"mine"), purpose="assistants")
    with httpx.Client(base_url=files_server.base_url, headers={"Authorization": "Bearer key-b"}) as other:
        for reply in (
            other.get(f"/files/{mine.id}"),
            other.get(f"/files/{mine.id}/content"),
            other.delete(f"/files/{mine.id}"),
        ):
            error_of(reply, 404, "file_not_found", "file_id")
        assert mine.id not in [f["id"] for f in other.get("/files").json()["data"]]
    assert _client(files_server).files.retrieve(mine.id).id == mine.id  # still there


def _count(server: RunningServer, key: str = "key-a") -> int:
    with server.http(key) as http:
        return len(http.get("/files").json()["data"])


def test_bad_uploads_name_the_field_and_store_nothing(files_server: RunningServer) -> None:
    before = _count(files_server)
    with files_server.http("key-a") as http:
        error_of(
            http.post("/files", files={"file": ("e.txt", b"")}, data={"purpose": "assistants"}),
            400,
            "empty_file",
            "file",
        )
        error_of(http.post("/files", files={"file": ("a.txt", b"x")}), 400, "missing_required_parameter", "purpose")
        no_file = http.post("/files", files={"purpose": (None, "assistants")})  # multipart, no file part
        error_of(no_file, 400, "missing_required_parameter", "file")
        error_of(http.post("/files", data={"purpose": "assistants"}), 400, "invalid_value", "file")  # not multipart
        bad_purpose = http.post("/files", files={"file": ("a.txt", b"x")}, data={"purpose": "sorcery"})
        error_of(bad_purpose, 400, "invalid_value", "purpose")
        expiry = {"purpose": "batch", "expires_after[anchor]": "created_at", "expires_after[seconds]": "60"}
        error_of(
            http.post("/files", files={"file": ("a.txt", b"x")}, data=expiry),
            400,
            "invalid_value",
            "expires_after.seconds",
        )
        error_of(http.post("/files", json={"purpose": "assistants"}), 400, "invalid_value", "file")
        broken = http.post(
            "/files", content=b"--x\r\nnot a form", headers={"content-type": "multipart/form-data; boundary=x"}
        )
        assert broken.status_code == 400, broken.text
    assert _count(files_server) == before


def test_expires_after_sets_expires_at(files_server: RunningServer) -> None:
    made = _client(files_server).files.create(
        file=("soon.txt", b"soon"), purpose="batch", expires_after={"anchor": "created_at", "seconds": 3600}
    )
    assert made.expires_at == made.created_at + 3600


def test_an_upload_past_the_cap_is_cut_off_declared_or_not(files_server: RunningServer) -> None:
    before = _count(files_server)
    big = b"x" * (48 * 1024 * 1024 + 1)
    with files_server.http("key-a") as http:
        declared = http.post("/files", files={"file": ("big.bin", big)}, data={"purpose": "assistants"})
        error_of(declared, 413, "request_too_large", None)

        def chunked() -> Iterator[bytes]:  # no content-length: the server counts as it reads
            yield b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nassistants\r\n'
            yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n\r\n'
            for _ in range(50):
                yield b"y" * (1024 * 1024)
            yield b"\r\n--b--\r\n"

        streamed = http.post("/files", content=chunked(), headers={"content-type": "multipart/form-data; boundary=b"})
        error_of(streamed, 413, "request_too_large", None)
    assert _count(files_server) == before


def test_a_large_upload_leaves_other_clients_alone(files_server: RunningServer) -> None:
    """While 40 MB upload and are stored, other requests are answered: the form is parsed as it arrives and the
    bytes go to the store a chunk at a time, off the event loop."""
    done = threading.Event()
    slowest = 0.0

    def upload() -> None:
        try:
            _client(files_server).files.create(file=("big.bin", os.urandom(40 * 1024 * 1024)), purpose="assistants")
        finally:
            done.set()

    thread = threading.Thread(target=upload)
    thread.start()
    with files_server.http("key-b") as http:
        while not done.is_set():
            started = time.monotonic()
            assert http.get("/files", params={"limit": 1}).status_code == 200
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.02)
    thread.join()
    assert slowest < 1.0, slowest  # a frozen loop would hold these for the whole upload


def test_the_redis_store_answers_501_by_name(tmp_path: Path) -> None:
    from store_support import drop_namespace, namespace, store_url

    ns = namespace()
    server = start_server(tmp_path, models=["hotloop-sim"], store_url=store_url("redis", ns, tmp_path))
    try:
        with server.http() as http:
            reply = http.post("/files", files={"file": ("a.txt", b"x")}, data={"purpose": "assistants"})
            error_of(reply, 501, "files_not_supported", None)
            error_of(http.get("/files"), 501, "files_not_supported", None)
    finally:
        server.stop()
        import asyncio

        asyncio.run(drop_namespace("redis", ns))
