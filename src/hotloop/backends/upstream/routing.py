"""Replica routing for an upstream with several URLs (docs/backends.md, "Replicas").

A chain sticks to the replica that served its previous turn, where the engine's prefix cache holds its prompt:
the response id each replica served is remembered (a bounded LRU) and the continuation naming it goes there
(`sticky`). When that replica is down, saturated (`max_in_flight` requests in flight) or has just failed this
request, the least-loaded healthy replica takes it (`fallback`); a chain with no remembered replica goes to the
least-loaded healthy one too (`new`), ties taken in turn so that idle replicas share new chains. `failures`
failures in a row mark a replica down for `cooldown_s`; after it the replica is tried again, and a success heals it.
No I/O and no clock of its own: the backend reports each attempt's start, end and outcome; `clock` tells the time.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Literal

from hotloop.observability.metrics import ReplicaReading

Decision = Literal["sticky", "fallback", "new"]
DECISIONS: tuple[Decision, ...] = ("sticky", "fallback", "new")
# Response ids remembered per upstream: 64 bytes or so each, a few MB at most.
REMEMBERED = 65_536


class Replica:
    __slots__ = ("down_until", "failures", "in_flight", "index", "routes", "url")

    def __init__(self, index: int, url: str) -> None:
        self.index = index
        self.url = url
        self.in_flight = 0
        self.failures = 0  # in a row
        self.down_until = 0.0  # the router's clock reading before which the replica is down
        self.routes: dict[str, int] = dict.fromkeys(DECISIONS, 0)

    def up(self, now: float) -> bool:
        return now >= self.down_until


class Router:
    def __init__(
        self,
        model: str,
        urls: Iterable[str],
        *,
        max_in_flight: int = 0,
        failures: int = 2,
        cooldown_s: float = 5.0,
        remembered: int = REMEMBERED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.model = model
        self.clock = clock  # seconds; injected so that a cooldown can be tested without waiting for it
        self.replicas = [Replica(index, url) for index, url in enumerate(urls)]
        self.max_in_flight = max_in_flight
        self.failures = max(1, failures)
        self.cooldown_s = cooldown_s
        self.remembered = remembered
        self._served: OrderedDict[str, int] = OrderedDict()  # response id -> replica index
        self._turn = 0  # rotates ties between equally loaded replicas

    def choose(self, previous_id: str | None, tried: frozenset[int] = frozenset()) -> tuple[Replica, Decision]:
        """The replica for an attempt (and counts the decision); `tried`: replicas this request already failed on."""
        now = self.clock()
        index = self._served.get(previous_id) if previous_id is not None else None
        if index is not None and index not in tried:
            replica = self.replicas[index]
            if replica.up(now) and not self._saturated(replica):
                return self._count(replica, "sticky")
        decision: Decision = "fallback" if index is not None or tried else "new"
        return self._count(self._least_loaded(now, tried), decision)

    def _saturated(self, replica: Replica) -> bool:
        return self.max_in_flight > 0 and replica.in_flight >= self.max_in_flight

    def _least_loaded(self, now: float, tried: frozenset[int]) -> Replica:
        """Untried replicas that are up and not saturated first, then up ones, then the one back up soonest."""
        count = len(self.replicas)
        order = [self.replicas[(self._turn + step) % count] for step in range(count)]
        self._turn = (self._turn + 1) % count
        fresh = [replica for replica in order if replica.index not in tried] or order
        up = [replica for replica in fresh if replica.up(now)]
        free = [replica for replica in up if not self._saturated(replica)]
        if free or up:
            return min(free or up, key=lambda replica: replica.in_flight)
        return min(fresh, key=lambda replica: replica.down_until)

    def _count(self, replica: Replica, decision: Decision) -> tuple[Replica, Decision]:
        replica.routes[decision] += 1
        return replica, decision

    def start(self, replica: Replica) -> None:
        replica.in_flight += 1

    def end(self, replica: Replica) -> None:
        replica.in_flight -= 1

    def succeeded(self, replica: Replica, response_id: str) -> None:
        """The replica served the response: it is healthy, and the response's continuation goes there."""
        replica.failures = 0
        replica.down_until = 0.0
        if response_id:
            self._served[response_id] = replica.index
            self._served.move_to_end(response_id)
            while len(self._served) > self.remembered:
                self._served.popitem(last=False)

    def failed(self, replica: Replica) -> None:
        """The replica failed (unreachable, 5xx, stalled, died mid-stream); enough in a row take it down."""
        replica.failures += 1
        if replica.failures >= self.failures:
            replica.down_until = self.clock() + self.cooldown_s

    def readings(self) -> list[ReplicaReading]:
        now = self.clock()
        return [
            ReplicaReading(self.model, replica.url, replica.up(now), replica.in_flight, dict(replica.routes))
            for replica in self.replicas
        ]
