"""What the ledger keeps about one response: who, which model, how it ended, tokens and timings."""

from __future__ import annotations

import time

import msgspec

from hotloop.wire.response import Response


class UsageRecord(msgspec.Struct, kw_only=True):
    """One response's usage. `owner` is the store's owner tag (a hash of the API key, "" without keys)."""

    response_id: str
    owner: str
    model: str
    status: str
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    created_at: float
    transport: str  # "http" | "sse" | "websocket"
    timings: dict[str, float] = msgspec.field(default_factory=dict)


class UsageTotals(msgspec.Struct):
    responses: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0


def record_for(response: Response, owner: str, transport: str, timings: dict[str, float] | None = None) -> UsageRecord:
    """The record of a finished response: its tokens are the response's `usage` (0 where it has none)."""
    usage = response.usage
    return UsageRecord(
        response_id=response.id,
        owner=owner,
        model=response.model,
        status=response.status,
        input_tokens=usage.input_tokens if usage is not None else 0,
        cached_tokens=usage.input_tokens_details.cached_tokens if usage is not None else 0,
        output_tokens=usage.output_tokens if usage is not None else 0,
        created_at=time.time(),
        transport=transport,
        timings=dict(timings or {}),
    )
