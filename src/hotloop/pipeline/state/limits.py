"""Admission limits, no I/O: WebSocket connection slots (per process and per key) and per-key rate limits.

Every check is O(1): a dict lookup and a little arithmetic. These hold one process's counts; with `workers > 1`
the workers share theirs instead (shared_limits.py), with the same arithmetic and the same refusals.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from hotloop.errors import RateLimited

Clock = Callable[[], float]
PRUNE_FLOOR = 1024  # keys tracked before idle (full) buckets are swept


class _Buckets:
    """One key's two token buckets: each holds a minute's allowance and refills continuously."""

    __slots__ = ("requests", "stamp", "tokens")

    def __init__(self, requests: float, tokens: float, now: float) -> None:
        self.requests = requests
        self.tokens = tokens
        self.stamp = now


def refilled(level: float, limit: int, elapsed: float) -> float:
    """A bucket holding a minute's `limit` at `level`, `elapsed` seconds later: it refills continuously
    (`limit / 60` a second) and never holds more than the minute's allowance."""
    return min(limit, level + max(0.0, elapsed) * (limit / 60))


class RateLimiter:
    """Per-key requests per minute and tokens per minute (0 turns a limit off).

    `admit()` takes one request before a create runs and refuses it while either bucket has less than one unit
    left; `charge()` takes a finished response's input plus output tokens, which may push the token bucket below
    zero: the key's next requests are then refused until it has refilled. A refused request is not charged.
    """

    def __init__(self, rpm: int, tpm: int, clock: Clock = time.monotonic) -> None:
        self.rpm = max(0, rpm)
        self.tpm = max(0, tpm)
        self.enabled = bool(self.rpm or self.tpm)
        self.clock = clock  # a test may move it
        self._keys: dict[str, _Buckets] = {}
        self._prune_at = PRUNE_FLOOR

    def admit(self, owner: str) -> None:
        """Count one request for `owner`; raises `RateLimited` (nothing counted) while a limit is reached."""
        if not self.enabled:
            return
        buckets = self._refilled(owner)
        if self.rpm and buckets.requests < 1:
            raise rate_refusal("requests", self.rpm, buckets.requests)
        if self.tpm and buckets.tokens < 1:
            raise rate_refusal("tokens", self.tpm, buckets.tokens)
        buckets.requests -= 1

    def charge(self, owner: str, tokens: int) -> None:
        """Charge a finished response's tokens to its key."""
        if self.tpm and tokens > 0:
            self._refilled(owner).tokens -= tokens

    def _refilled(self, owner: str) -> _Buckets:
        now = self.clock()
        buckets = self._keys.get(owner)
        if buckets is None:
            if len(self._keys) >= self._prune_at:
                self._prune(now)
            buckets = self._keys[owner] = _Buckets(self.rpm, self.tpm, now)
            return buckets
        elapsed = now - buckets.stamp
        if elapsed > 0:
            buckets.requests = refilled(buckets.requests, self.rpm, elapsed)
            buckets.tokens = refilled(buckets.tokens, self.tpm, elapsed)
            buckets.stamp = now
        return buckets

    def _prune(self, now: float) -> None:
        """Forget keys whose buckets would be full by now (nothing to remember); amortized O(1) per new key."""
        full = [
            key
            for key, b in self._keys.items()
            if refilled(b.requests, self.rpm, now - b.stamp) >= self.rpm
            and refilled(b.tokens, self.tpm, now - b.stamp) >= self.tpm
        ]
        for key in full:
            del self._keys[key]
        self._prune_at = max(PRUNE_FLOOR, 2 * len(self._keys))


class ConnectionSlots:
    """Open WebSocket connections on this process, in all and per key (a limit of 0 is no limit)."""

    def __init__(self, total: int, per_key: int) -> None:
        self.total = max(0, total)
        self.per_key = max(0, per_key)
        self.open = 0
        self._by_key: dict[str, int] = {}

    def acquire(self, owner: str) -> None:
        """Take a slot for `owner`; raises `RateLimited` (429) when the process or the key is at its limit."""
        held = self._by_key.get(owner, 0)
        if self.total and self.open >= self.total:
            raise total_refusal(self.total)
        if self.per_key and held >= self.per_key:
            raise key_refusal(self.per_key)
        self.open += 1
        self._by_key[owner] = held + 1

    def release(self, owner: str) -> None:
        held = self._by_key.get(owner, 0) - 1
        if held > 0:
            self._by_key[owner] = held
        else:
            self._by_key.pop(owner, None)
        self.open = max(0, self.open - 1)

    def held(self, owner: str) -> int:
        return self._by_key.get(owner, 0)


def rate_refusal(kind: str, limit: int, level: float) -> RateLimited:
    """The 429 for a bucket (`requests` or `tokens`) at `level` (< 1) of its `limit` per minute."""
    per_second = limit / 60
    wait = (1 - level) / per_second
    unit = "RPM" if kind == "requests" else "TPM"
    message = (
        f"Rate limit reached on {kind} per min ({unit}): Limit {limit}, Remaining 0. "
        f"Please try again in {_seconds(wait)}."
    )
    headers = {
        f"x-ratelimit-limit-{kind}": str(limit),
        f"x-ratelimit-remaining-{kind}": "0",
        f"x-ratelimit-reset-{kind}": _duration((limit - level) / per_second),
    }
    return RateLimited(message, kind=kind, retry_after_s=wait, headers=headers)


def total_refusal(total: int) -> RateLimited:
    return _no_slot(f"This server has reached its limit of {total} open WebSocket connections.")


def key_refusal(per_key: int) -> RateLimited:
    return _no_slot(f"This API key has reached its limit of {per_key} open WebSocket connections.")


def _no_slot(message: str) -> RateLimited:
    return RateLimited(f"{message} Close a connection or try again in 1s.", kind="requests", retry_after_s=1.0)


def _seconds(value: float) -> str:
    """A wait as Codex and the SDKs parse it: "try again in 1.5s" or "try again in 20ms"."""
    ms = max(1, math.ceil(round(value * 1000, 6)))  # rounded first: 0.9999999 s is 1000 ms, not 1001
    return f"{ms}ms" if ms < 1000 else f"{math.ceil(ms / 100) / 10:g}s"


def _duration(value: float) -> str:
    """OpenAI's `x-ratelimit-reset-*` format: 500ms, 12s, 1m30s."""
    ms = max(0, math.ceil(round(value * 1000, 6)))
    if ms < 1000:
        return f"{ms}ms"
    minutes, seconds = divmod(math.ceil(ms / 1000), 60)
    return f"{minutes}m{seconds}s" if minutes else f"{seconds}s"
