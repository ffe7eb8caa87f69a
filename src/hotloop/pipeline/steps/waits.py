"""How an agent waits for its client's tool outputs between its steps (a multi-agent response on WebSocket,
pipeline/inject.py): the root's through the response's hub (pipeline/agents/hub.py `Waits`), a subagent's through
its own mail (pipeline/agents/branch.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

from hotloop.pipeline.mcp.calls import Calls
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import Event


class StepWaits(Protocol):
    """`took`: the last wait added outputs; `blocked`: the safety stage blocked one."""

    @property
    def took(self) -> bool: ...

    @property
    def blocked(self) -> bool: ...

    def needed(self, builder: ResponseBuilder) -> bool: ...

    def outputs(self, builder: ResponseBuilder, calls: Calls, steered: asyncio.Event) -> AsyncIterator[Event]: ...
