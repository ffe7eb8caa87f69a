"""KV state reuse of smollm2-135m: a continuation restores its chain's KV state even after another chain ran, its
output is the same as a cold prefill's, and the reuse shows in usage and /metrics.

Kept short: prompts of about a hundred tokens, a few greedy output tokens.
"""

from __future__ import annotations

import asyncio
import ctypes
from collections.abc import Iterator

import numpy as np
import pytest

from conftest import RunningServer
from hotloop.backends.base import Finished, GenerationRequest, TextDelta
from hotloop.backends.local.gguf import smollm2_chat_format
from hotloop.backends.local.kv_state import KVStateCache, Snapshot
from hotloop.backends.local.llama import LlamaBackend
from metrics_support import scrape

MODEL = "smollm2-135m"
OUT = 4  # output tokens per backend-level run
HTTP_OUT = 16  # the API's smallest max_output_tokens
Chat = list[dict[str, str]]

pytestmark = pytest.mark.timeout(180)


def fake(tokens: list[int], size: int = 100) -> Snapshot:
    return Snapshot(np.array(tokens, dtype=np.int32), (ctypes.c_uint8 * size)())


def test_snapshot_store_keeps_branch_tips_within_its_bound() -> None:
    cache = KVStateCache(max_bytes=3 * (100 + 4 * 4))
    cache.put(fake([1, 2, 3]))
    cache.put(fake([1, 2, 3, 4]))  # extends the first: it replaces it
    assert len(cache) == 1
    cache.put(fake([1, 2, 9, 9]))
    found, shared = cache.best(np.array([1, 2, 3, 4, 5], dtype=np.int32))
    assert found is not None and found.tokens.tolist() == [1, 2, 3, 4] and shared == 4
    assert cache.covers(np.array([1, 2, 9], dtype=np.int32)) and not cache.covers(np.array([1, 9], dtype=np.int32))
    cache.put(fake([5, 5, 5, 5]))
    cache.put(fake([6, 6, 6, 6]))  # over the bound: the least recently used ([1, 2, 9, 9]) goes
    assert len(cache) == 3 and cache.evictions == 1
    assert cache.best(np.array([1, 2, 9, 9], dtype=np.int32))[1] == 2  # only [1, 2, 3, 4]'s prefix is left
    assert cache.bytes == 3 * (100 + 16)
    cache.put(fake([7] * 4, size=10_000))  # larger than the whole bound: not kept
    assert len(cache) == 3
    cache.clear()
    assert len(cache) == 0 and cache.bytes == 0


@pytest.fixture(scope="module")
def backend() -> Iterator[LlamaBackend]:
    model = LlamaBackend(n_ctx=2048, n_threads=2)
    yield model
    asyncio.run(model.close())


def prompt(messages: Chat) -> list[int]:
    return smollm2_chat_format().tokens(messages)


async def run(backend: LlamaBackend, tokens: list[int]) -> tuple[str, Finished]:
    request = GenerationRequest(prompt_tokens=tokens, max_output_tokens=OUT, temperature=0.0)
    text, finished = "", None
    async for delta in backend.generate(request):
        if isinstance(delta, TextDelta):
            text += delta.text
        elif isinstance(delta, Finished):
            finished = delta
    assert finished is not None
    return text, finished


def opening(topic: str) -> Chat:
    facts = " ".join(f"Fact {n}: {topic} number {n} is worth remembering." for n in range(6))
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": f"Here are some notes about {topic}. {facts} Summarize them."},
    ]


def test_interleaved_chains_restore_their_state_and_match_a_cold_prefill(backend: LlamaBackend) -> None:
    async def scenario() -> None:
        backend.drop_state()
        chains = {"a": opening("rivers"), "b": opening("mountains")}
        firsts = {name: prompt(chat) for name, chat in chains.items()}
        for name, chat in chains.items():  # b's prefill overwrites a's cells in the context
            text, _ = await run(backend, firsts[name])
            chat += [{"role": "assistant", "content": text}, {"role": "user", "content": "Say more about fact 3."}]
        before = backend.kv_reading(MODEL)
        seconds = {name: prompt(chat) for name, chat in chains.items()}
        # Concurrent generations share one context: the lock serializes them, each restores its own chain.
        warm = dict(zip(chains, await asyncio.gather(*(run(backend, seconds[n]) for n in chains)), strict=True))
        after = backend.kv_reading(MODEL)
        assert after.snapshot - before.snapshot == 2
        for name in chains:
            assert warm[name][1].cached_tokens >= len(firsts[name])  # the whole first turn was reused
        assert after.prefilled_tokens - before.prefilled_tokens == sum(
            len(seconds[n]) - warm[n][1].cached_tokens for n in chains
        )
        assert after.snapshots.entries >= 1 and after.snapshots.bytes > 0
        for name in chains:
            backend.drop_state()
            text, finished = await run(backend, seconds[name])
            assert finished.cached_tokens == 0
            assert (text, finished.output_tokens) == (warm[name][0], warm[name][1].output_tokens)

    asyncio.run(scenario())


def test_a_continuation_over_http_reports_cached_tokens_and_metrics(server: RunningServer) -> None:
    http = server.http()

    def create(text: str, previous: str | None = None) -> dict[str, object]:
        body = {"model": MODEL, "input": text, "max_output_tokens": HTTP_OUT, "temperature": 0, "store": True}
        reply = http.post("/responses", json={**body, "previous_response_id": previous} if previous else body)
        assert reply.status_code == 200, reply.text
        return dict(reply.json())

    def snapshot_prompts() -> float:
        return scrape(server).value("hotloop_kv_prompts_total", model=MODEL, source="snapshot")

    first_a = create("Write a short note about rivers, lakes, and the sea, in three sentences. " * 3)
    create("List five mountains and their heights in a table, please, with sources. " * 3)
    restored = snapshot_prompts()
    second_a = create("And which river is the longest?", str(first_a["id"]))
    usage = second_a["usage"]
    assert isinstance(usage, dict)
    first_usage = first_a["usage"]
    assert isinstance(first_usage, dict)
    assert usage["input_tokens_details"]["cached_tokens"] >= first_usage["input_tokens"]
    assert snapshot_prompts() == restored + 1
