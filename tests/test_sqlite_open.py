"""Worker processes (`--workers N`) open one new SQLite database at the same moment and every one of them starts:
switching a new database to WAL is contended, and SQLite answers that with `database is locked` at once."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

# Each process opens `count` new databases, the i-th of them at `start + i * STEP`, as every other process does.
OPEN = """
import sys, time
from pathlib import Path
from hotloop.stores.sqlite import SQLiteStore
root, start, count, step = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
for i in range(count):
    time.sleep(max(0.0, start + i * step - time.time()))
    SQLiteStore(root / str(i) / "hotloop.db")
"""
PROCESSES, DATABASES, STEP = 6, 40, 0.05


def test_processes_opening_a_new_database_at_once_all_start(tmp_path: Path) -> None:
    start = time.time() + 1.5  # after every interpreter has imported the store
    args = [str(tmp_path), str(start), str(DATABASES), str(STEP)]
    opening = [
        subprocess.Popen([sys.executable, "-c", OPEN, *args], stderr=subprocess.PIPE, text=True)
        for _ in range(PROCESSES)
    ]
    for process in opening:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
