"""The server's main loop (transports/server.py): it ticks once a second while a connection is open and not at
all while none is, and the Date header a response carries is fresh either way."""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import pytest

from conftest import RunningServer, start_server


@pytest.fixture
def quiet(tmp_path: Path) -> Iterator[tuple[RunningServer, list[float]]]:
    running = start_server(tmp_path, models=["hotloop-sim"])
    ticks: list[float] = []
    on_tick = running.server.on_tick

    async def counted(counter: int) -> Any:
        ticks.append(time.monotonic())
        return await on_tick(counter)

    running.server.on_tick = counted  # type: ignore[method-assign]
    yield running, ticks
    running.stop()


def date_age(connection: http.client.HTTPConnection) -> float:
    """Seconds between the Date of a /healthz answer and now: at most 2, as with uvicorn (the header has a
    resolution of one second and is refreshed once a second)."""
    connection.request("GET", "/healthz")
    answer = connection.getresponse()
    answer.read()
    assert answer.status == 200
    return time.time() - parsedate_to_datetime(answer.headers["Date"]).timestamp()


def test_no_ticks_while_no_connection_is_open_and_the_date_is_fresh_after(
    quiet: tuple[RunningServer, list[float]],
) -> None:
    running, ticks = quiet
    first = http.client.HTTPConnection("127.0.0.1", running.port, timeout=10)
    assert date_age(first) < 2.2
    first.close()
    time.sleep(1.5)  # the tick the open connection had asked for passes
    ticks.clear()
    time.sleep(3.0)
    assert ticks == []  # uvicorn's loop would have ticked 30 times, hotloop's earlier one 3
    again = http.client.HTTPConnection("127.0.0.1", running.port, timeout=10)
    assert date_age(again) < 2.2  # not the Date of 4.5 s ago
    again.close()


def test_an_open_connection_keeps_the_date_fresh(quiet: tuple[RunningServer, list[float]]) -> None:
    running, ticks = quiet
    kept = http.client.HTTPConnection("127.0.0.1", running.port, timeout=10)
    assert date_age(kept) < 2.2
    ticks.clear()
    time.sleep(3.0)
    assert 2 <= len(ticks) <= 4
    assert date_age(kept) < 2.2  # the same keep-alive connection: the ticks refreshed it
    kept.close()
