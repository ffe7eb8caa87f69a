"""The commands the server runs inside a response (a hosted `shell`, docs/code-interpreter.md "Hosted shell"): after
a generation whose model called `shell`, each call's commands run in the response's container
(pipeline/containers/runtime.py `CodeRuntime.shell`), one call after the other, and the server answers each call with
a `shell_call_output` (wire/hosted_shell.py), which the next generation reads after the prompt's existing tokens as a
client's answer would read (tools/shell.py).

A run never fails the response. A container the key does not own or that is gone, a store that keeps no containers,
a sandbox that cannot start: each command's output says why (exit code 126) and the output ends `incomplete`. So do
the calls past the response's `max_tool_calls` (the budget MCP calls, searches and code runs share) and those a
steer stopped, never run (the call `incomplete`). A steer cuts the call under way short, as it stops an MCP call in
flight: the command running is killed with its tree (what it printed kept, `exit` 137, its stderr saying why), the
rest are not run, and the call and its output end `incomplete`; the container lives on, its kernel too. A cancelled
response kills the command as well (sandbox/shell.py). The output is read by the safety stage before the model
reads it, as a code run's is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Sequence

import msgspec

from hotloop.errors import HotloopError
from hotloop.ids import new_id
from hotloop.pipeline.containers.runtime import Shelled
from hotloop.pipeline.steps.in_container import ContainerCalls
from hotloop.sandbox import ShellRun
from hotloop.tools.hosted_shell import NOT_RUN_EXIT
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import Event
from hotloop.wire.items import ContextItem
from hotloop.wire.tool_items import ItemStatus, ShellCall, ShellCallOutput, ShellOutcome, ShellOutput

log = logging.getLogger("hotloop.shell")

WITHHELD = "The output was withheld by the server's safety policy."
OVER_BUDGET = "The commands were not run: the response reached its max_tool_calls."
STEERED = "The commands were not run: the response was steered."
STOPPED = "The command was stopped: the response was steered."
NOT_REACHED = "The command was not run: the response was steered."


class ShellRuns(ContainerCalls):
    """One response's hosted shell calls, each answered by its output."""

    @staticmethod
    def last_container(context: Sequence[ContextItem]) -> str | None:
        for item in reversed(context):
            if type(item) is ShellCall and item.hosted and isinstance(item.environment, dict):
                container_id = item.environment.get("container_id")
                if isinstance(container_id, str) and container_id:
                    return container_id
        return None

    def pending(self, builder: ResponseBuilder) -> list[int]:
        return builder.shell_pending()

    async def run(self, builder: ResponseBuilder, steered: asyncio.Event) -> AsyncGenerator[Event, None]:
        """Run the calls the last generation wrote, in output order, each answered by its output; a steer cuts the
        call under way short and leaves the calls not started unrun."""
        for index in builder.shell_pending():
            call = builder.pending_shell(index)
            if self.budget.room <= 0 or steered.is_set():
                why = STEERED if steered.is_set() else OVER_BUDGET
                for event in builder.shell_finished(index, "incomplete", self.container_id, _not_run(call, why)):
                    yield event
                continue
            self.budget.spend(1)
            ran, answer = await self._run(call, builder.out.index, steered)
            for event in builder.shell_finished(index, ran, self.container_id, answer):
                yield event

    async def _run(self, call: ShellCall, at: int, steered: asyncio.Event) -> tuple[ItemStatus, ShellCallOutput]:
        """The call's status (`incomplete`: its commands did not run, or not all to their end) and its output
        (`at`: the index it will have in the response's output)."""
        try:
            shelled = await self._shell(call, steered)
        except HotloopError as exc:  # a missing container, a store that keeps none, no sandbox here
            log.info("shell call %s failed: %s", call.id, exc.message)
            return "incomplete", _not_run(call, exc.message)
        self.container_id = shelled.container_id
        entries = [_entry(run) for run in shelled.runs]
        entries += [_failed(NOT_REACHED) for _ in call.action.commands[len(entries) :]]
        cut = len(shelled.runs) < len(call.action.commands) or any(run.stopped for run in shelled.runs)
        status: ItemStatus = "incomplete" if cut else "completed"
        return status, await self._read(_output(call, entries, status), at)

    async def _shell(self, call: ShellCall, steered: asyncio.Event) -> Shelled:
        action = call.action
        timeout_s = action.timeout_ms / 1000 if action.timeout_ms else None
        args = (action.commands, timeout_s, action.max_output_length)
        return await self.runtime.shell(self.owner, self.declared, self.container_id, *args, stop=steered)

    async def _read(self, answer: ShellCallOutput, at: int) -> ShellCallOutput:
        """The safety stage reads the commands' output before the model does."""
        if not any(entry.stdout or entry.stderr for entry in answer.output):
            return answer
        budget = self.budget
        read = await budget.safety.scan_async(None, [answer], budget.pool)
        budget.findings += [(at, finding) for finding in read.findings]
        if read.verdict == "block":
            log.info("shell call %s: output withheld by the safety policy", answer.call_id)
            withheld = [_failed(WITHHELD) for _ in answer.output]
            return msgspec.structs.replace(answer, output=withheld, status="incomplete")
        return answer


def _entry(run: ShellRun) -> ShellOutput:
    """A command's output; one a steer stopped says so after what it printed (OpenAI's outcomes are an exit or a
    timeout: a killed command's is the exit a shell reports for it)."""
    stderr = run.stderr
    if run.stopped:
        stderr += ("" if not stderr or stderr.endswith("\n") else "\n") + STOPPED
    return ShellOutput(stdout=run.stdout, stderr=stderr, outcome=_outcome(run.exit_code))


def _outcome(exit_code: int | None) -> ShellOutcome:
    return ShellOutcome(type="timeout") if exit_code is None else ShellOutcome(type="exit", exit_code=exit_code)


def _failed(why: str) -> ShellOutput:
    return ShellOutput(stdout="", stderr=why, outcome=ShellOutcome(type="exit", exit_code=NOT_RUN_EXIT))


def _not_run(call: ShellCall, why: str) -> ShellCallOutput:
    """The answer of a call whose commands did not run: each command's stderr says why."""
    return _output(call, [_failed(why) for _ in call.action.commands], "incomplete")


def _output(call: ShellCall, entries: list[ShellOutput], status: ItemStatus) -> ShellCallOutput:
    limit, agent = call.action.max_output_length, call.agent
    return ShellCallOutput(
        call_id=call.call_id, output=entries, id=new_id("sho"), status=status, max_output_length=limit, agent=agent
    )
