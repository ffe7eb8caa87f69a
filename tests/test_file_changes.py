"""The SQLite store's deletion feed between processes sharing the file (stores/sqlite.py, file_changes.py): with
inotify a store looks at the deletions table after another one announced a deletion, and not while responses are
only saved; without inotify, it polls."""

from __future__ import annotations

import asyncio
import sqlite3
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


async def test_a_write_to_a_named_file_wakes_the_watch_and_other_files_do_not(tmp_path: Path) -> None:
    path = tmp_path / "hotloop.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    changes = FileChanges.open(tmp_path, ["hotloop.db", "hotloop.db-wal"])
    assert changes is not None
    try:
        assert not await changes.wait(0.3)  # nobody writes
        (tmp_path / "notes.txt").write_text("another file in the directory")
        assert not await changes.wait(0.3)
        started = time.monotonic()
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("INSERT INTO t VALUES (1)")
        other.close()
        assert await changes.wait(5.0)
        assert time.monotonic() - started < 1.0
    finally:
        changes.close()


async def test_a_replica_looks_only_after_a_deletion_and_hears_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, replica = SQLiteStore(tmp_path / "hotloop.db"), SQLiteStore(tmp_path / "hotloop.db")
    looks: list[float] = []
    stamp = replica._file_stamp
    monkeypatch.setattr(replica, "_file_stamp", lambda: (looks.append(time.monotonic()), stamp())[1])
    heard: list[str] = []
    replica.start(heard.append, lambda: None)
    try:
        await asyncio.sleep(0.5)  # the feed has read where the deletions table stands
        looks.clear()
        for n in range(5):  # saves commit to the files, and announce nothing
            await store.save(A, *saved(f"resp_{n}"))
            await asyncio.sleep(0.3)
        assert looks == []  # polling would have looked three times
        deleted = time.monotonic()
        assert await store.delete(A, "resp_1")
        while "resp_1" not in heard:
            assert time.monotonic() - deleted < 2.0, looks
            await asyncio.sleep(0.02)
        assert len(looks) == 1
        (expired,) = await store.expire(int(time.time()) + 1, limit=1)  # a retention sweep announces too
        while expired not in heard:
            assert time.monotonic() - deleted < 4.0, looks
            await asyncio.sleep(0.02)
    finally:
        await replica.close()
        await store.close()


async def test_without_inotify_the_replica_polls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_store.FileChanges, "open", classmethod(lambda cls, directory, names: None))
    store, replica = SQLiteStore(tmp_path / "hotloop.db"), SQLiteStore(tmp_path / "hotloop.db")
    looks: list[float] = []
    stamp = replica._file_stamp
    monkeypatch.setattr(replica, "_file_stamp", lambda: (looks.append(time.monotonic()), stamp())[1])
    heard: list[str] = []
    replica.start(heard.append, lambda: None)
    try:
        await store.save(A, *saved("resp_1"))
        await asyncio.sleep(0.5)  # the feed has read where the deletions table stands (a deletion before is old)
        looks.clear()
        await asyncio.sleep(1.2)
        assert len(looks) >= 2  # idle, it looks every DELETION_POLL_S
        deleted = time.monotonic()
        assert await store.delete(A, "resp_1")
        while "resp_1" not in heard:
            assert time.monotonic() - deleted < 3.0
            await asyncio.sleep(0.02)
    finally:
        await replica.close()
        await store.close()
