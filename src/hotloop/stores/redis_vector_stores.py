"""The Vector Stores API on the Redis store: refused (501 `vector_stores_not_supported`), as its files are
(redis_files.py): a vector store's files and chunks belong on disk, in SQLite or PostgreSQL (docs/stores.md)."""

from __future__ import annotations

from typing import Any, NoReturn

from hotloop.stores.vector_stores import Claim, VectorStoresNotKept


def _refuse(*args: Any, **kwargs: Any) -> NoReturn:
    raise VectorStoresNotKept()


class RedisVectorStores:
    put_vector_store = get_vector_store = list_vector_stores = delete_vector_store = _refuse
    touch_vector_store = add_store_files = get_store_file = list_store_files = _refuse
    update_store_file = delete_store_file = get_batch = cancel_batch = file_counts = _refuse
    renew_lease = save_chunks = complete_file = fail_file = _refuse
    index_version = stored_files = chunk_vectors = chunk_texts = file_text = _refuse

    async def claim_file(self, lease: str, now: float) -> Claim | None:
        return None  # it keeps none: its ingestion worker finds nothing to do
