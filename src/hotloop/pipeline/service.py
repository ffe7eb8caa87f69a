"""The long-lived parts a turn uses: settings, models, store, secret, live sessions and background responses."""

from __future__ import annotations

import asyncio
import weakref

from hotloop.config import Settings
from hotloop.models import ModelRegistry
from hotloop.pipeline.session import Session
from hotloop.stores.base import Store


class Service:
    def __init__(self, settings: Settings, models: ModelRegistry, store: Store, secret: bytes) -> None:
        self.settings = settings
        self.models = models
        self.store = store
        self.secret = secret
        self.sessions: weakref.WeakSet[Session] = weakref.WeakSet()
        self.background: dict[str, asyncio.Task[None]] = {}

    def session(self, owner: str, *, caching: bool) -> Session:
        session = Session(owner, caching=caching)
        if caching:
            self.sessions.add(session)
        return session

    def forget(self, response_id: str) -> None:
        """Drop a deleted response from every connection's cache in this process."""
        for session in list(self.sessions):
            session.forget(response_id)

    async def close(self) -> None:
        for task in list(self.background.values()):
            task.cancel()
        if self.background:
            await asyncio.gather(*self.background.values(), return_exceptions=True)
        await self.models.close()
        await self.store.close()
