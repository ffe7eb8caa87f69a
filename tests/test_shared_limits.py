"""The limit table the workers share (pipeline/state/shared_limits.py): two limiters on one file are one limit,
exactly under processes racing, a key's slot is forgotten only once it remembers nothing, a full table falls
back to the process's own buckets, and a dead worker's connections are given back."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from hotloop.errors import RateLimited
from hotloop.pipeline.state.shared_limits import LimitTable, SharedConnectionSlots, SharedRateLimiter

pytestmark = pytest.mark.fast


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def limiter(path: Path, worker: int, clock: Clock, rpm: int = 0, tpm: int = 0) -> SharedRateLimiter:
    return SharedRateLimiter(LimitTable(path, worker, rpm, tpm), rpm, tpm, clock)


def test_two_workers_share_one_key_s_requests_and_tokens(tmp_path: Path) -> None:
    path = tmp_path / "limits"
    LimitTable.create(path, workers=2)
    clock = Clock()
    one, two = limiter(path, 0, clock, rpm=3, tpm=600), limiter(path, 1, clock, rpm=3, tpm=600)
    one.admit("a")
    two.admit("a")
    one.admit("a")
    with pytest.raises(RateLimited) as info:
        two.admit("a")  # the third was the key's last, on whichever worker
    assert info.value.type == "requests" and info.value.headers["x-ratelimit-limit-requests"] == "3"
    two.admit("b")  # another key's own buckets
    clock.now += 20.0  # one request's refill
    two.admit("a")
    with pytest.raises(RateLimited):
        one.admit("a")
    one.charge("b", 1200)  # two minutes' tokens spent on one worker refuse the key's next on the other
    clock.now += 60.0
    with pytest.raises(RateLimited) as info:
        two.admit("b")
    assert info.value.type == "tokens"
    clock.now += 61.0
    two.admit("b")


def _admit_many(path: Path, worker: int, tries: int, accepted: multiprocessing.Queue[int]) -> None:
    clock = Clock()  # frozen: nothing refills while they race
    shared = limiter(path, worker, clock, rpm=500)
    count = 0
    for _ in range(tries):
        try:
            shared.admit("racing-key")
            count += 1
        except RateLimited:
            pass
    accepted.put(count)


def test_racing_processes_are_counted_once_each(tmp_path: Path) -> None:
    path = tmp_path / "limits"
    LimitTable.create(path, workers=4)
    accepted: multiprocessing.Queue[int] = multiprocessing.Queue()
    racers = [multiprocessing.Process(target=_admit_many, args=(path, i, 400, accepted)) for i in range(4)]
    for racer in racers:
        racer.start()
    counts = [accepted.get(timeout=60) for _ in racers]
    for racer in racers:
        racer.join(10)
    assert sum(counts) == 500  # 1,600 tries, the key's 500 and not one more or fewer


def test_a_slot_is_taken_over_only_once_its_key_is_forgettable(tmp_path: Path) -> None:
    path = tmp_path / "limits"
    LimitTable.create(path, workers=1, slots=1)  # one slot: every key probes the same one
    clock = Clock()
    shared = SharedRateLimiter(LimitTable(path, 0, 2, 0), 2, 0, clock)
    shared.admit("a")
    shared.admit("a")
    shared.admit("b")  # a's slot is not free: b is limited by this process alone
    shared.admit("b")
    with pytest.raises(RateLimited):
        shared.admit("b")
    with pytest.raises(RateLimited):
        shared.admit("a")  # and a is still remembered in the table
    clock.now += 60.0  # a's bucket is full again: nothing left to remember
    shared.admit("c")
    assert shared.table.find("c", None) is not None and shared.table.find("a", None) is None


def test_connections_count_over_workers_and_a_dead_worker_gives_them_back(tmp_path: Path) -> None:
    path = tmp_path / "limits"
    LimitTable.create(path, workers=2)
    one = SharedConnectionSlots(LimitTable(path, 0), total=3, per_key=2)
    two = SharedConnectionSlots(LimitTable(path, 1), total=3, per_key=2)
    one.acquire("a")
    two.acquire("a")
    with pytest.raises(RateLimited) as info:
        one.acquire("a")
    assert "API key has reached its limit of 2" in info.value.message
    two.acquire("b")
    with pytest.raises(RateLimited) as info:
        one.acquire("c")
    assert "server has reached its limit of 3" in info.value.message
    assert one.held("a") == two.held("a") == 2
    two.release("b")
    one.acquire("c")
    LimitTable(path, 0).release_worker(1)  # worker 1 died holding a's second connection
    assert one.held("a") == 1 and one.held("b") == 0
    one.acquire("a")
    one.release("a")
    one.release("a")
    assert two.held("a") == 0
