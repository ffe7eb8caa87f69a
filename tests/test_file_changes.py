"""The SQLite store's deletion feed between processes sharing the file (stores/sqlite.py, file_changes.py): with
inotify a store looks at the deletions table after another one announced a deletion, and not while responses are
only saved; without inotify, it polls."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from hotloop.stores import sqlite as sqlite_store
from hotloop.stores.file_changes import FileChanges
from hotloop.stores.sqlite import SQLiteStore
from hotloop.wire.items import InputText, Message, OutputText
from hotloop.wire.response import Response

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
A = "owner-a"


def saved(rid: str) -> tuple[Response, list[Message]]:
    reply = Message(role="assistant", content=[OutputText(text="ok")], id=f"msg_{rid}", status="completed")
    response = Response(id=rid, created_at=int(time.time()), status="completed", model="m", output=[reply])
    return response, [Message(role="user", content=[InputText(text="hi")])]


async def test_a_write_to_a_named_file_wakes_the_watch_once_and_other_files_do_not(tmp_path: Path) -> None:
    changes = FileChanges.open(tmp_path, ["hotloop.db-deletions"])
    assert changes is not None
    try:
        assert not await changes.wait(0.3)  # nobody writes
        (tmp_path / "notes.txt").write_text("another file in the directory")
        assert not await changes.wait(0.3)
        started = time.monotonic()
        (tmp_path / "hotloop.db-deletions").write_bytes(b"1")  # created, written, closed: one change
        assert await changes.wait(5.0)
        assert time.monotonic() - started < 1.0
        assert not await changes.wait(0.3)  # nothing left over to wake the next wait
        (tmp_path / "hotloop.db-deletions").write_bytes(b"1")  # written again
        assert await changes.wait(5.0)
    finally:
        changes.close()


class Pair:
    """Two stores on one file (two worker processes'): `replica`'s feed started, each of its looks at the files
    (the start of a look at the deletions table) timed in `looks`, what it hears in `heard`."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.store, self.replica = SQLiteStore(tmp_path / "hotloop.db"), SQLiteStore(tmp_path / "hotloop.db")
        self.looks: list[float] = []
        stamp = self.replica._file_stamp
        monkeypatch.setattr(self.replica, "_file_stamp", lambda: (self.looks.append(time.monotonic()), stamp())[1])
        self.heard: list[str] = []
        self.replica.start(self.heard.append, lambda: None)

    async def hears(self, response_id: str, since: float, within: float) -> None:
        while response_id not in self.heard:
            assert time.monotonic() - since < within, self.looks
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        await self.replica.close()
        await self.store.close()


async def test_a_replica_looks_only_after_a_deletion_and_hears_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pair = Pair(tmp_path, monkeypatch)
    try:
        await asyncio.sleep(0.5)  # the feed has read where the deletions table stands
        pair.looks.clear()
        for n in range(5):  # saves commit to the files, and announce nothing
            await pair.store.save(A, *saved(f"resp_{n}"))
            await asyncio.sleep(0.3)
        assert pair.looks == []  # polling would have looked three times
        deleted = time.monotonic()
        assert await pair.store.delete(A, "resp_1")
        await pair.hears("resp_1", deleted, within=2.0)
        assert len(pair.looks) == 1
        (expired,) = await pair.store.expire(int(time.time()) + 1, limit=1)  # a retention sweep announces too
        await pair.hears(expired, deleted, within=4.0)
    finally:
        await pair.close()


async def test_without_inotify_the_replica_polls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_store.FileChanges, "open", classmethod(lambda cls, directory, names: None))
    pair = Pair(tmp_path, monkeypatch)
    try:
        await pair.store.save(A, *saved("resp_1"))
        await asyncio.sleep(0.5)  # the feed has read where the deletions table stands (a deletion before is old)
        pair.looks.clear()
        await asyncio.sleep(1.2)
        assert len(pair.looks) >= 2  # idle, it looks every DELETION_POLL_S
        deleted = time.monotonic()
        assert await pair.store.delete(A, "resp_1")
        await pair.hears("resp_1", deleted, within=3.0)
    finally:
        await pair.close()
