"""The code the server runs inside a response (`code_interpreter`, docs/code-interpreter.md): after a generation
whose model called `python`, each call's code runs in the response's container (pipeline/containers/runtime.py),
one after the other (a container has one kernel), and its `code_interpreter_call` ends with the run's outputs,
which the next generation reads after the prompt's existing tokens (tools/code_interpreter.py `lower`).

A run never fails the response. A container the key does not own or that is gone, a store that keeps no containers,
a sandbox that cannot start: the call ends `failed`, and the model reads why. A call past the response's
`max_tool_calls` (the budget MCP calls and searches share) is not run: it ends `incomplete`; so do the calls a steer
stops, the one under way interrupted (a KeyboardInterrupt in its code: the kernel keeps its variables, and the call
shows what it printed; code that does not end within 2 s has its kernel stopped, as a timeout does). The code's
output is read by the safety stage before the model reads it, as an MCP call's output is: a finding is recorded
with the MCP calls' (`Calls.findings`), and output its policy blocks is withheld (`failed`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncGenerator, Sequence

import msgspec

from hotloop.errors import HotloopError
from hotloop.pipeline.containers.runtime import Ran
from hotloop.pipeline.steps.in_container import ContainerCalls
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import Event
from hotloop.wire.items import ContextItem
from hotloop.wire.tool_items import CodeInterpreterCall, CodeInterpreterLogs

log = logging.getLogger("hotloop.code_interpreter")

WITHHELD = "The output was withheld by the server's safety policy."
STOPPED = "The run was stopped: the response was steered."


class CodeRuns(ContainerCalls):
    """One response's code runs."""

    @staticmethod
    def last_container(context: Sequence[ContextItem]) -> str | None:
        for item in reversed(context):
            if type(item) is CodeInterpreterCall and item.container_id:
                return item.container_id
        return None

    def pending(self, builder: ResponseBuilder) -> list[int]:
        return builder.code_pending()

    async def run(self, builder: ResponseBuilder, steered: asyncio.Event) -> AsyncGenerator[Event, None]:
        """Run the code the last generation wrote, in output order; a steer (`steered` set) stops the run under way
        and leaves the rest not run."""
        for index in builder.code_pending():
            if self.budget.room <= 0 or steered.is_set():
                for event in builder.code_finished(index, "incomplete", None, self.container_id):
                    yield event
                continue
            self.budget.spend(1)
            for event in builder.code_running(index):
                yield event
            ran = await self._run(index, builder.pending_code(index), steered)
            if ran.container_id:
                self.container_id = ran.container_id
            builder.code_wrote(ran.files)  # the answer that names one cites it
            for event in builder.code_finished(index, ran.status, ran.outputs, ran.container_id or self.container_id):
                yield event

    async def _run(self, index: int, item: CodeInterpreterCall, steered: asyncio.Event) -> Ran:
        """The run. A steer interrupts the code (a KeyboardInterrupt in it, sandbox/kernel.py): the call ends
        `incomplete` with what it printed and a line saying why, the kernel and its variables live on (code that
        will not end within 2 s has its kernel stopped). The response cancelled, the run is cancelled with it, the
        code interrupted alike."""
        try:
            ran = await self.runtime.run(self.owner, self.declared, self.container_id, item.code or "", steered)
        except HotloopError as exc:  # a missing container, a store that keeps none, no sandbox here
            log.info("code run %s failed: %s", item.id, exc.message)
            return Ran("failed", [CodeInterpreterLogs(logs=exc.message)], self.container_id)
        if ran.status == "incomplete":
            ran = dataclasses.replace(ran, outputs=[*(ran.outputs or ()), CodeInterpreterLogs(logs=STOPPED)])
        return await self._read(index, item, ran)

    async def _read(self, index: int, item: CodeInterpreterCall, ran: Ran) -> Ran:
        """The safety stage reads the run's output before the model does."""
        if not ran.outputs:
            return ran
        budget = self.budget
        shown = msgspec.structs.replace(item, outputs=ran.outputs, status=ran.status)
        read = await budget.safety.scan_async(None, [shown], budget.pool)
        budget.findings += [(index, finding) for finding in read.findings]
        if read.verdict == "block":
            log.info("code run %s: output withheld by the safety policy", item.id)
            return Ran("failed", [CodeInterpreterLogs(logs=WITHHELD)], ran.container_id)
        return ran
