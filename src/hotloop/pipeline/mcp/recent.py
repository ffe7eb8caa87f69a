"""The MCP calls this process ran lately, for the console (console/snapshot.py): each call as it starts and ends."""

from __future__ import annotations

import time
from collections import deque

import msgspec

RECENT_CALLS = 50


class CallRecord(msgspec.Struct):
    item_id: str
    server_label: str
    name: str
    owner: str  # the key's owner tag (never the key)
    started_at: float  # time.time()
    status: str = "in_progress"  # in_progress | completed | failed
    seconds: float | None = None
    error: str | None = None  # the error's type when it failed


class RecentCalls:
    """The last `RECENT_CALLS` calls, newest last; a record changes in place when its call ends."""

    def __init__(self, size: int = RECENT_CALLS) -> None:
        self.records: deque[CallRecord] = deque(maxlen=size)

    def begin(self, item_id: str, server_label: str, name: str, owner: str) -> CallRecord:
        record = CallRecord(item_id, server_label, name, owner, time.time())
        self.records.append(record)
        return record

    @staticmethod
    def end(record: CallRecord, seconds: float, error: str | None) -> None:
        record.status = "failed" if error else "completed"
        record.seconds = seconds
        record.error = error
