"""The Redis store (redis-py asyncio, hiredis parser): each operation is one round trip, most of them one Lua
script (stores/redis_lua.py), so a response and its items appear together or not at all, and a chain of any
length loads in one EVALSHA that walks `parent` links on the server.

URL: `redis://[user:password@]host:port/db?prefix=NAME` (`rediss://` for TLS); every key starts with the prefix
(default `hotloop:`), so deployments and test runs sharing a Redis never see each other's data.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis import exceptions as redis_errors
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from hotloop.metering.records import UsageRecord, UsageTotals
from hotloop.stores import redis_lua
from hotloop.stores.base import Chain
from hotloop.stores.codec import decode_blob, encode, encode_blob, encode_response, usage_decoder
from hotloop.stores.health import Health
from hotloop.stores.pages import ItemPage, UsagePage
from hotloop.stores.redis_containers import RedisContainers
from hotloop.stores.redis_conversations import RedisConversations
from hotloop.stores.redis_files import RedisFiles
from hotloop.stores.redis_skills import RedisSkills
from hotloop.stores.redis_vector_stores import RedisVectorStores
from hotloop.stores.retention import (
    Background,
    DeletionHandler,
    GapHandler,
    Retention,
    retry_forever,
)
from hotloop.wire.items import ContextItem
from hotloop.wire.response import Response, response_decoder

DEFAULT_PREFIX = "hotloop:"
CONNECT_TIMEOUT_S = 2.0
COMMAND_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 64
MAX_CHAIN_DEPTH = 100_000
_UNREACHABLE = (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError)


def split_prefix(url: str) -> tuple[str, str]:
    """The URL without `prefix=`, and the prefix (redis-py would reject the unknown query parameter)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    prefix = next((value for key, value in query if key == "prefix"), DEFAULT_PREFIX)
    rest = urlencode([(key, value) for key, value in query if key != "prefix"])
    return urlunsplit(parts._replace(query=rest)), prefix


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisStore(RedisConversations, RedisFiles, RedisVectorStores, RedisContainers, RedisSkills):
    def __init__(self, url: str, retention: Retention | None = None) -> None:
        plain_url, self.prefix = split_prefix(url)
        self.retention = retention or Retention()
        # One quick retry without backoff: a pooled connection that Redis dropped is replaced transparently,
        # and an unreachable Redis answers 503 within about CONNECT_TIMEOUT_S, not after a long backoff.
        # A blocking pool: past MAX_CONNECTIONS a call waits for a free connection instead of failing.
        self._pool = BlockingConnectionPool.from_url(
            plain_url,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            socket_timeout=COMMAND_TIMEOUT_S,
            retry=Retry(NoBackoff(), 1),
            max_connections=MAX_CONNECTIONS,
            timeout=COMMAND_TIMEOUT_S,
        )
        self.client = Redis(connection_pool=self._pool)
        self._scripts = {
            name: self.client.register_script(getattr(redis_lua, name))
            for name in (
                *("SAVE", "DELETE", "EXPIRE", "TRIM", "CHAIN", "FIND_ITEM", "APPEND_USAGE", "USAGE_PAGE"),
                *redis_lua.CONVERSATION_SCRIPTS,
            )
        }
        self._background = Background()
        self.health = Health(_UNREACHABLE, self.client.ping)

    async def _run(self, script: str, *args: Any) -> Any:
        async with self.health.guard():
            return await self._scripts[script](keys=[], args=[self.prefix, *args])

    async def ensure_available(self) -> None:
        await self.health.ensure()

    async def ping(self) -> None:
        async with self.health.guard():
            await self.client.ping()

    def start(self, on_deleted: DeletionHandler, on_gap: GapHandler) -> None:
        feed = retry_forever("redis", lambda subscribed: self._listen(on_deleted, subscribed), on_gap)
        self._background.start(self, self.retention, feed)

    async def _listen(self, on_deleted: DeletionHandler, subscribed: Callable[[], None]) -> None:
        # Subscribe confirmations are kept: one arrives when the subscription is active, and again each time
        # redis-py reconnects and resubscribes by itself after a dropped connection (a gap to report).
        pubsub = self.client.pubsub(ignore_subscribe_messages=False)
        try:
            await pubsub.subscribe(self.prefix + "deleted")
            while True:
                message = await pubsub.get_message(timeout=1.0)
                if message is None:
                    continue
                if message["type"] == "message":
                    on_deleted(_text(message["data"]))
                elif message["type"] == "subscribe":
                    subscribed()
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    async def save(self, owner: str, response: Response, input_items: list[ContextItem]) -> None:
        enc = encode_response(response, input_items)
        ids = sorted({row.item_id for row in enc.inputs + enc.outputs if row.item_id is not None})
        await self._run(
            "SAVE",
            response.id,
            owner,
            response.previous_response_id or "",
            response.created_at,
            enc.body,
            encode_blob(enc.inputs),
            encode_blob(enc.outputs),
            enc.size,
            encode(ids),
        )

    async def get(self, owner: str, response_id: str) -> Response | None:
        found, body = await self._fields(response_id, "o", "b")
        if found is None or _text(found) != owner:
            return None
        return response_decoder.decode(body)

    async def delete(self, owner: str, response_id: str) -> bool:
        return bool(await self._run("DELETE", response_id, owner))

    async def expire(self, before: int, limit: int) -> list[str]:
        return [_text(i) for i in await self._run("EXPIRE", before, limit)]

    async def trim(self, max_bytes: int, limit: int) -> list[str]:
        return [_text(i) for i in await self._run("TRIM", max_bytes, limit)]

    async def stored_bytes(self) -> int:
        async with self.health.guard():
            return int(await self.client.get(self.prefix + "bytes") or 0)

    async def input_items(
        self, owner: str, response_id: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> ItemPage | None:
        found, blob = await self._fields(response_id, "o", "i")
        if found is None or _text(found) != owner:
            return None
        items = decode_blob(blob)
        if order == "desc":
            items.reverse()
        if after is not None:
            ids = [getattr(item, "id", None) for item in items]
            items = items[ids.index(after) + 1 :] if after in ids else []
        return ItemPage(items=items[:limit], has_more=len(items) > limit)

    async def load_chain(self, owner: str, response_id: str) -> Chain | None:
        reply = await self._run("CHAIN", response_id, owner, MAX_CHAIN_DEPTH)
        if reply is None:
            return None
        head, *blobs = reply
        context: list[ContextItem] = []
        for at in range(len(blobs) - 2, -1, -2):  # oldest response first: its inputs, then its outputs
            context += decode_blob(blobs[at])
            context += decode_blob(blobs[at + 1])
        return Chain(response=response_decoder.decode(head), context=context)

    async def find_item(self, owner: str, item_id: str) -> ContextItem | None:
        reply = await self._run("FIND_ITEM", owner, item_id)
        if reply is None:
            return None
        for blob in reply:
            for item in decode_blob(blob):
                if getattr(item, "id", None) == item_id:
                    return item
        return None

    async def append_usage(self, records: list[UsageRecord]) -> None:
        args: list[Any] = []
        for rec in records:
            args += [rec.response_id, rec.owner, rec.model, repr(rec.created_at)]
            args += [rec.input_tokens, rec.cached_tokens, rec.output_tokens, encode(rec)]
        if args:
            await self._run("APPEND_USAGE", *args)

    async def usage(self, owner: str, *, after: str | None, limit: int, model: str | None) -> UsagePage:
        by_model = "1" if model is not None else "0"
        totals, blobs = await self._run("USAGE_PAGE", owner, model or "", by_model, after or "", limit)
        records = [usage_decoder.decode(blob) for blob in blobs if blob is not None]
        counts = UsageTotals(*(int(value or 0) for value in totals))
        return UsagePage(records=records[:limit], has_more=len(records) > limit, totals=counts)

    async def _fields(self, response_id: str, *names: str) -> list[Any]:
        """Fields of a response's hash (None where it is absent), one HMGET."""
        async with self.health.guard():
            values: list[Any] = await self.client.hmget(f"{self.prefix}r:{response_id}", list(names))
            return values

    async def close(self) -> None:
        await self._background.stop()
        await self.client.aclose()
        await self._pool.disconnect()
