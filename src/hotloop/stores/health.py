"""Whether a networked store answered last time: its calls map "cannot reach it" to `StoreUnavailable` (503), and a
store seen down is probed before a `store: true` create, so that create fails before it generates anything."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from hotloop.errors import InvalidParam, StoreUnavailable


class Health:
    def __init__(
        self,
        unreachable: tuple[type[BaseException], ...],
        probe: Callable[[], Awaitable[object]],
        unstorable: tuple[type[BaseException], ...] = (),
    ) -> None:
        """`unstorable`: what the store raises for a value it cannot hold (PostgreSQL's text: a NUL character), a
        400 rather than a 500: it came from the client."""
        self._unreachable = unreachable
        self._unstorable = unstorable
        self._probe = probe
        self.up = True

    @contextlib.asynccontextmanager
    async def guard(self) -> AsyncIterator[None]:
        """Around every store call: an unreachable store becomes a 503, and is remembered as down until a call
        succeeds again."""
        try:
            yield
        except self._unreachable as exc:
            self.up = False
            raise StoreUnavailable(f"The response store is unavailable: {exc or type(exc).__name__}.") from exc
        except self._unstorable:
            raise InvalidParam(
                "A value in this request holds a NUL character (\\u0000), which no id, name or text field may hold "
                "in this server's store."
            ) from None
        self.up = True

    async def ensure(self) -> None:
        """Free while the store is up; once it was seen down, one quick probe (a PING, a SELECT 1) decides."""
        if not self.up:
            async with self.guard():
                await self._probe()
