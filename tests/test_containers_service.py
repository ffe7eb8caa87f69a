"""What the code runtime calls (pipeline/containers/service.py `Containers`) on both stores, with the clock moved by
hand: files written by code (new as the assistant's, or their bytes replaced, keeping their id), listed with their
sizes and paths, read back; touches; the bounds (bytes per file, files per container, containers per key); the
runtime hearing of a container deleted or expired (`on_gone`, `gone`); a create that fails stores nothing. And the
path rules every container file passes (pipeline/containers/paths.py), and a network policy's checks
(pipeline/objects/containers.py)."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hotloop.config import Settings
from hotloop.errors import HotloopError, InvalidParam, NotFound, RequestTooLarge
from hotloop.pipeline.containers.paths import container_path
from hotloop.pipeline.containers.service import Containers
from hotloop.pipeline.objects.containers import checked
from hotloop.stores.base import Store
from hotloop.wire.containers import Container, CreateContainer, ExpiresAfter, NetworkPolicy
from hotloop.wire.files import FileObject
from store_support import opened_store

A, B = "owner-a", "owner-b"
START = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with opened_store(request.param, tmp_path) as opened:
        yield opened


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def containers(store: Store, clock: Clock) -> Containers:
    settings = Settings(files_max_bytes=1000, containers_max_files=4, containers_max_per_key=3)
    return Containers(store, settings, clock)


def _spec(name: str = "box", minutes: int = 20) -> Container:
    return Container(
        id=f"cntr_{name}",
        created_at=0,
        last_active_at=0,
        name=name,
        expires_after=ExpiresAfter(anchor="last_active_at", minutes=minutes),
    )


async def _bytes(containers: Containers, owner: str, container_id: str, file_id: str) -> bytes:
    _, chunks = await containers.content(owner, container_id, file_id)
    return b"".join([chunk async for chunk in chunks])


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("data.csv", "/mnt/data/data.csv"),
        ("/mnt/data/out/plot.png", "/mnt/data/out/plot.png"),
        ("a b/ünï cödé.txt", "/mnt/data/a b/ünï cödé.txt"),
        (".hidden", "/mnt/data/.hidden"),
        ("..dots", "/mnt/data/..dots"),
    ],
)
def test_a_name_inside_the_container_is_its_path(name: str, path: str) -> None:
    assert container_path(name, "file") == path


@pytest.mark.parametrize(
    "name",
    [
        "",
        "../escape",
        "a/../../etc/passwd",
        "/etc/passwd",
        "/mnt/data/../etc/passwd",
        "/mnt/database/x",
        "/mnt/data",
        "/mnt/data/",
        "a//b",
        "dir/",
        "./a",
        "a/.",
        "nul\x00byte",
        "line\nbreak",
        "..\\..\\windows",
        "x" * 256,
        "/".join(["d"] * 600),
        "\udcff",
    ],
)
def test_a_name_that_could_mean_elsewhere_is_refused(name: str) -> None:
    with pytest.raises(InvalidParam) as refused:
        container_path(name, "file")
    assert refused.value.param == "file" and refused.value.status == 400


async def test_the_runtime_writes_lists_and_reads_a_containers_files(containers: Containers, clock: Clock) -> None:
    made = await containers.create(A, _spec())
    assert made.created_at == made.last_active_at == int(START)
    upload = await containers.add_file(A, made.id, "input.csv", io.BytesIO(b"a,b\n1,2\n"), source="user", param="file")
    assert (upload.path, upload.bytes, upload.source) == ("/mnt/data/input.csv", 8, "user")
    clock.now += 60
    plot = await containers.write_file(A, made.id, "/mnt/data/out/plot.png", b"\x89PNG")
    assert (plot.path, plot.bytes, plot.source) == ("/mnt/data/out/plot.png", 4, "assistant")
    assert (await containers.get(A, made.id)).last_active_at == int(START) + 60  # a write touches it
    changed = await containers.write_file(A, made.id, "input.csv", b"a,b\n1,2\n3,4\n")  # the code changed it
    assert (changed.id, changed.bytes, changed.source) == (upload.id, 12, "user")
    assert await _bytes(containers, A, made.id, upload.id) == b"a,b\n1,2\n3,4\n"
    listed = await containers.files(A, made.id)
    assert [(f.path, f.bytes) for f in listed] == [("/mnt/data/input.csv", 12), ("/mnt/data/out/plot.png", 4)]
    with pytest.raises(InvalidParam) as taken:
        await containers.add_file(A, made.id, "input.csv", b"again")
    assert (taken.value.param, taken.value.code) == ("path", "path_taken")
    with pytest.raises(InvalidParam) as escaping:
        await containers.write_file(A, made.id, "../../etc/shadow", b"x")
    assert escaping.value.param == "path"
    clock.now += 60
    await containers.touch(A, made.id)
    assert (await containers.get(A, made.id)).last_active_at == int(START) + 120
    await containers.delete_file(A, made.id, plot.id)
    assert [f.id for f in await containers.files(A, made.id)] == [upload.id]
    with pytest.raises(NotFound) as missing:
        await containers.get_file(A, made.id, plot.id)
    assert (missing.value.param, missing.value.code) == ("file_id", "file_not_found")


async def test_another_owner_sees_nothing(containers: Containers) -> None:
    made = await containers.create(A, _spec())
    file = await containers.write_file(A, made.id, "secret.txt", b"mine")
    for call in (
        containers.get(B, made.id),
        containers.touch(B, made.id),
        containers.files(B, made.id),
        containers.content(B, made.id, file.id),
        containers.write_file(B, made.id, "secret.txt", b"theirs"),
        containers.delete_file(B, made.id, file.id),
        containers.delete(B, made.id),
    ):
        with pytest.raises(NotFound) as missing:
            await call
        assert (missing.value.param, missing.value.code) == ("container_id", "container_not_found")
    assert await _bytes(containers, A, made.id, file.id) == b"mine"


async def test_the_bounds(containers: Containers) -> None:
    made = await containers.create(A, _spec())
    with pytest.raises(RequestTooLarge):  # files_max_bytes 1000
        await containers.write_file(A, made.id, "big.bin", b"x" * 1001)
    assert await containers.files(A, made.id) == []
    for n in range(4):
        await containers.write_file(A, made.id, f"f{n}.txt", b"x" * 1000)
    with pytest.raises(HotloopError) as full:  # containers_max_files 4
        await containers.write_file(A, made.id, "f4.txt", b"x")
    assert (full.value.status, full.value.code) == (400, "container_files_limit_reached")
    await containers.write_file(A, made.id, "f0.txt", b"replacing is not adding")
    await containers.create(A, _spec("two"))
    await containers.create(A, _spec("three"))
    with pytest.raises(HotloopError) as many:  # containers_max_per_key 3
        await containers.create(A, _spec("four"))
    assert (many.value.status, many.value.code) == (400, "containers_limit_reached")
    await containers.create(B, _spec("b's"))  # another key's bound is its own


async def test_a_create_whose_copies_fail_stores_nothing(containers: Containers, store: Store) -> None:
    files = []
    for n, name in enumerate(["a", "a/b"]):  # the second would sit beneath the first
        file = FileObject(id=f"file_{n}", bytes=1, created_at=int(START), filename=name, purpose="user_data")
        await store.put_file(A, file, io.BytesIO(b"x"))
        files.append(file)
    with pytest.raises(InvalidParam) as taken:
        await containers.create(A, _spec(), files)
    assert taken.value.param == "file_ids[1]"
    assert (await containers.list_containers(A, after=None, limit=10, order="asc")).data == []
    made = await containers.create(A, _spec(), files[:1])
    [copied] = await containers.files(A, made.id)
    assert (copied.path, copied.source, copied.bytes) == ("/mnt/data/a", "user", 1)


async def test_the_runtime_hears_of_a_container_deleted_or_expired(containers: Containers, clock: Clock) -> None:
    heard: list[str] = []

    def broken(container_id: str) -> None:
        raise RuntimeError("one handler's fault")

    containers.on_gone(broken)
    containers.on_gone(heard.append)
    short = await containers.create(A, _spec("short", minutes=1))
    long = await containers.create(A, _spec("long", minutes=30))
    doomed = await containers.create(A, _spec("doomed"))
    await containers.write_file(A, short.id, "work.txt", b"soon gone")
    await containers.delete(A, doomed.id)
    assert heard == [doomed.id]
    clock.now += 61
    with pytest.raises(NotFound):  # idle past its minute: gone at once, before the sweep
        await containers.get(A, short.id)
    assert await containers.gone([short.id, long.id, doomed.id]) == {short.id, doomed.id}
    assert await containers.sweep() == 1
    assert heard == [doomed.id, short.id]
    assert await containers.sweep() == 0
    clock.now += 30 * 60
    assert await containers.sweep() == 1 and heard[-1] == long.id


def test_a_network_policy_is_none_or_an_allowlist_of_domains() -> None:
    """No network by default; an allowlist's domains are checked and kept (lowercase, once each)."""
    made = checked(CreateContainer(name="net", network_policy={"type": "disabled"}))
    assert made.network_policy == NetworkPolicy(type="disabled") == checked(CreateContainer(name="n")).network_policy
    assert made.id.startswith("cntr_") and made.expires_after == ExpiresAfter(anchor="last_active_at", minutes=20)
    allowed = {"type": "allowlist", "allowed_domains": ["PyPI.org", "*.pythonhosted.org", "pypi.org", "localhost"]}
    assert checked(CreateContainer(name="n", network_policy=allowed)).network_policy == NetworkPolicy(
        type="allowlist", allowed_domains=["pypi.org", "*.pythonhosted.org", "localhost"]
    )
    refusals = [
        ({"type": "allowlist", "allowed_domains": []}, "network_policy.allowed_domains"),
        ({"type": "allowlist"}, "network_policy.allowed_domains"),
        ({"type": "allowlist", "allowed_domains": ["a..org"]}, "network_policy.allowed_domains[0]"),
        ({"type": "allowlist", "allowed_domains": ["http://a.org"]}, "network_policy.allowed_domains[0]"),
        (
            {"type": "allowlist", "allowed_domains": ["a.org"], "domain_secrets": [{"domain": "a.org"}]},
            "network_policy.domain_secrets",
        ),
        ({"type": "allowlist", "allowed_domains": ["a.org"], "proxy": "x"}, "network_policy.proxy"),
        ({"type": "disabled", "allowed_domains": ["a.org"]}, "network_policy"),
        ({"type": "open"}, "network_policy.type"),
        ("none", "network_policy"),
    ]
    for policy, param in refusals:
        with pytest.raises(InvalidParam) as refused:
            checked(CreateContainer(name="net", network_policy=policy))
        assert refused.value.param == param
    assert checked(CreateContainer(name="s", skills=[])).name == "s"
