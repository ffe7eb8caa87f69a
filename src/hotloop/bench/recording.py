"""The floor's script: the frames a real hotloop server sends for one rollout of the load scenario, recorded once.

The rollout is the load's own (same request fields, same Rollout, the server's measured chars per token), run on
one WebSocket through the bench's `WsClient`; a tap on its connection keeps every frame received, grouped by turn
(a turn ends at its terminal event). The floor server (bench/floor.py) replays them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import msgspec

from hotloop.bench.chars import chars_per_token
from hotloop.bench.clients import TERMINAL, WsClient, kind_of
from hotloop.bench.load_config import LoadConfig, loop_config, session_fields
from hotloop.bench.progress import Progress
from hotloop.bench.rollout import run_rollout
from hotloop.bench.scenario import Rollout


@dataclass(frozen=True)
class Recording:
    """One rollout's frames, per turn, and what the floor needs to replay them like the recorded server."""

    turns: list[list[str]]  # each turn's frames as sent (JSON text), terminal last
    chars_per_token: float  # the recorded server's, so the floor's run sizes its tool outputs alike
    ttft_ms: float
    tps: float

    def save(self, path: Path) -> None:
        path.write_bytes(msgspec.json.encode(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> Recording:
        return cls(**msgspec.json.decode(path.read_bytes()))


class _Tap:
    """Stands in for the client's connection: passes everything through and keeps the frames received."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.frames: list[str] = []

    async def send(self, frame: str) -> None:
        await self.connection.send(frame)

    async def recv(self) -> str | bytes:
        frame: str | bytes = await self.connection.recv()
        self.frames.append(frame if isinstance(frame, str) else frame.decode())
        return frame

    async def close(self) -> None:
        await self.connection.close()


def by_turn(frames: list[str]) -> list[list[str]]:
    """Frames cut into turns, each ending with its terminal event."""
    turns: list[list[str]] = [[]]
    for frame in frames:
        turns[-1].append(frame)
        if kind_of(frame) in TERMINAL:
            turns.append([])
    return [turn for turn in turns if turn]


async def record_rollout(
    base_url: str, config: LoadConfig, api_key: str | None = None, cpt: float | None = None
) -> Recording:
    """One rollout of `config`'s scenario against a running server, every frame it sent kept; `cpt` as in
    load.py `run_load`, else the server's own."""
    loop = loop_config(config)
    if cpt is None:
        cpt = await chars_per_token(base_url, api_key, loop.model)
    rollout = Rollout(turns=config.turns, context_tokens=config.context_tokens, chars_per_token=cpt)
    client = await WsClient.open(base_url, session_fields(config), api_key)
    tap = _Tap(client.connection)
    client.connection = cast(Any, tap)  # WsClient only sends, receives and closes
    try:
        await run_rollout(client, rollout, loop, 0, Progress(enabled=False))
    finally:
        await client.close()
    return Recording(turns=by_turn(tap.frames), chars_per_token=cpt, ttft_ms=config.ttft_ms, tps=config.tps)
