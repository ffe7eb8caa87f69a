"""The hosted shell part of the event builder: a `shell_call` the server runs in a container and the
`shell_call_output` it adds (no I/O). A mixin of `ResponseBuilder` (wire/builder.py), like wire/code_interpreter.py.

The model's call goes out as a client's shell call does once written: `output_item.added` (status `in_progress`),
per command `response.shell_call_command.added` / `.delta` / `.done`. It then holds a reserved slot in the output
(wire/output.py) until the server ran it (pipeline/steps/shell_runs.py): its `output_item.done` (`completed`, its
environment's `container_id` set; `incomplete` when it was not run), then its answer as the next item, a
`shell_call_output`: `output_item.added` (no output yet), per command `response.shell_call_output_content.delta`
(`{stdout, stderr}`, the non-empty ones; none when both are empty) and `.done` (the command's output),
`output_item.done`. A call cut off (`incomplete` as written) is never run: its `output_item.done` follows at once,
and no output.
"""

from __future__ import annotations

import msgspec

from hotloop.wire import events as ev
from hotloop.wire.events import Event
from hotloop.wire.output import Output
from hotloop.wire.tool_items import ItemStatus, ShellCall, ShellCallOutput


class HostedShellBuilder:
    """A hosted `shell_call`, its `shell_call_output` and their events."""

    # Provided by ResponseBuilder.
    out: Output

    def hosted_shell_call(self, item: ShellCall) -> list[Event]:
        """The model wrote a hosted shell call: its item and its commands' events; it waits in a reserved slot for
        the server to run it."""
        index = self.out.index
        added = msgspec.structs.replace(item, status="in_progress")
        out = [self.out.emit(ev.OutputItemAdded, output_index=index, item=added), *self.shell_commands(index, item)]
        if item.status != "in_progress":
            return out + self.out.end(index, item)
        self.out.reserve(item)
        return out

    def shell_commands(self, index: int, item: ShellCall) -> list[Event]:
        """A shell call's commands, each `added` (empty), its text as one delta, `done` (a client's call too)."""
        out = []
        for number, command in enumerate(item.action.commands):
            out.append(self.out.emit(ev.ShellCallCommandAdded, output_index=index, command_index=number, command=""))
            if command:
                out.append(
                    self.out.emit(ev.ShellCallCommandDelta, output_index=index, command_index=number, delta=command)
                )
            out.append(
                self.out.emit(ev.ShellCallCommandDone, output_index=index, command_index=number, command=command)
            )
        return out

    def shell_pending(self) -> list[int]:
        """The output indexes of the hosted shell calls not run yet."""
        output = self.out.response.output
        return [index for index in self.out.reserved() if type(output[index]) is ShellCall]

    def pending_shell(self, index: int) -> ShellCall:
        item = self.out.reserved_item(index)
        if type(item) is not ShellCall:
            raise ValueError(f"no pending shell_call at output index {index}")
        return item

    def shell_finished(
        self, index: int, status: ItemStatus, container_id: str | None, answer: ShellCallOutput
    ) -> list[Event]:
        """The call at `index` ended (`completed`: it ran; `incomplete`: not run, or cut short by a steer): its
        `output_item.done` (its container's id, once known), which replaces it in the output, then `answer` as the
        next item."""
        item = self.pending_shell(index)
        environment = {"type": "container_reference", "container_id": container_id} if container_id else None
        done = msgspec.structs.replace(item, status=status, environment=environment or item.environment)
        return [*self.out.settle(index, done), *self.shell_output(answer)]

    def shell_output(self, answer: ShellCallOutput) -> list[Event]:
        """A `shell_call_output` the server made: added empty, each command's output, done."""
        index, item_id = self.out.index, answer.id or ""
        added = msgspec.structs.replace(answer, output=[], status="in_progress")
        out = [self.out.emit(ev.OutputItemAdded, output_index=index, item=added)]
        for number, entry in enumerate(answer.output):
            delta = {name: text for name, text in (("stdout", entry.stdout), ("stderr", entry.stderr)) if text}
            if delta:
                out.append(
                    self.out.emit(
                        ev.ShellCallOutputContentDelta,
                        item_id=item_id,
                        output_index=index,
                        command_index=number,
                        delta=delta,
                    )
                )
            out.append(
                self.out.emit(
                    ev.ShellCallOutputContentDone,
                    item_id=item_id,
                    output_index=index,
                    command_index=number,
                    output=[entry],
                )
            )
        return out + self.out.end(index, answer)

    def replay_shell_call(self, item: ShellCall) -> list[Event]:
        """A stored hosted call's events as live: placed (the stored item itself) until its output's replay
        settles it (`replay_shell_output`); one with no output ends with the replay (`Output.end_reserved`)."""
        index = self.out.index
        unknown = {"type": "container_reference", "container_id": ""}  # as live: the id was set when it ran
        added = msgspec.structs.replace(item, status="in_progress", environment=unknown)
        out = [self.out.emit(ev.OutputItemAdded, output_index=index, item=added), *self.shell_commands(index, item)]
        self.out.reserve(item)
        return out

    def replay_shell_output(self, answer: ShellCallOutput) -> list[Event] | None:
        """A stored `shell_call_output` of a hosted call replayed before it: the call's done, then its own
        events; None for another (a client's output injected into the response)."""
        output = self.out.response.output
        for index in self.shell_pending():
            call = output[index]
            assert isinstance(call, ShellCall)
            if call.call_id == answer.call_id:
                return [*self.out.settle(index, call), *self.shell_output(answer)]
        return None
