"""What a response's calls that run in a container share (code_runs.py, shell_runs.py): the runtime, as whom, where
(the request's named container, or the one the context's last such call ran in: `auto` reuses it while it is still
there, as OpenAI's does), within what budget."""

from __future__ import annotations

from collections.abc import Sequence

from hotloop.pipeline.containers.runtime import CodeRuntime
from hotloop.pipeline.mcp.calls import Calls
from hotloop.tools.code_interpreter import Declared
from hotloop.wire.items import ContextItem


class ContainerCalls:
    def __init__(
        self, runtime: CodeRuntime, owner: str, declared: Declared, budget: Calls, context: Sequence[ContextItem]
    ) -> None:
        self.runtime = runtime
        self.owner = owner
        self.declared = declared
        self.budget = budget
        self.container_id = declared.container_id or self.last_container(context)

    @staticmethod
    def last_container(context: Sequence[ContextItem]) -> str | None:
        """The container the context's latest call of this kind ran in."""
        raise NotImplementedError
