"""The Agents SDK's typed client tools end to end (openai-agents 0.24, protocol.md §1.11): `ShellTool`,
`ApplyPatchTool`, `LocalShellTool` and `ComputerTool` on an Agent against hotloop, over HTTP (`OpenAIResponsesModel`)
and WebSocket mode (test_agents_sdk.py's WS_SETUPS), with `Runner.run` and `Runner.run_streamed`.

hotloop-sim calls a tool until K calls are in the conversation, each a harmless, numbered action (docs/models.md):
call N's shell command writes `hotloop_sim_N.txt`, its patch creates that file, its computer action is a screenshot
(odd N) or a click (even N). The tools below really run: commands in a subprocess shell, patches into a temporary
directory, actions on a fake screen; so the files on disk prove that the calls reached the right tool intact and
that the outputs the SDK sent back were accepted (the loop ends with text after K+1 turns).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    ApplyPatchTool,
    AsyncComputer,
    ComputerTool,
    LocalShellTool,
    MaxTurnsExceeded,
    Model,
    ModelSettings,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    RunResult,
    RunResultStreaming,
    ShellTool,
)
from agents.editor import ApplyPatchOperation, ApplyPatchResult
from agents.items import ToolCallItem, ToolCallOutputItem
from agents.models.openai_responses import Converter
from agents.tool import (
    LocalShellCommandRequest,
    ShellCallOutcome,
    ShellCommandOutput,
    ShellCommandRequest,
    ShellResult,
    Tool,
)
from openai import AsyncOpenAI
from openai.types.responses import (
    ResponseApplyPatchToolCall,
    ResponseComputerToolCall,
    ResponseFunctionShellToolCall,
    ResponseOutputMessage,
)
from openai.types.responses.response_output_item import LocalShellCall

from conftest import RunningServer
from test_agents_sdk import WS_SETUPS, consume, responses_count

# A real 1x1 PNG: the screenshot the fake computer returns, and the image hotloop renders back to the model.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
CALL_TYPES: dict[str, type[Any]] = {
    "shell": ResponseFunctionShellToolCall,
    "apply_patch": ResponseApplyPatchToolCall,
    "local_shell": LocalShellCall,
    "computer": ResponseComputerToolCall,
}
ITEM_TYPES = {kind: f"{kind}_call" for kind in CALL_TYPES}  # the call items' `type`
TOOLSETS = {"shell": 2, "apply_patch": 2, "shell+apply_patch": 4, "local_shell": 2, "computer": 2}  # kinds: K


class Workspace(AsyncComputer):
    """Every typed tool's runtime over one temporary directory, recording (item type, call id) per call run."""

    def __init__(self, root: Path, preview: bool = False) -> None:
        self.root = root
        self.preview = preview
        self.ran: list[tuple[str, str]] = []
        self.actions: list[tuple[Any, ...]] = []  # the fake screen's record

    async def run(self, command: str | list[str]) -> tuple[str, str, int]:
        pipes: dict[str, Any] = {"cwd": self.root, "stdout": asyncio.subprocess.PIPE, "stderr": asyncio.subprocess.PIPE}
        if isinstance(command, str):
            process = await asyncio.create_subprocess_shell(command, **pipes)
        else:
            process = await asyncio.create_subprocess_exec(*command, **pipes)
        stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode is not None
        return stdout.decode(), stderr.decode(), process.returncode

    async def shell(self, request: ShellCommandRequest) -> ShellResult:
        self.ran.append(("shell_call", request.data.call_id))
        outputs = []
        for command in request.data.action.commands:
            stdout, stderr, code = await self.run(command)
            outcome = ShellCallOutcome(type="exit", exit_code=code)
            outputs.append(ShellCommandOutput(stdout=stdout, stderr=stderr, outcome=outcome, command=command))
        return ShellResult(output=outputs)

    async def local_shell(self, request: LocalShellCommandRequest) -> str:
        self.ran.append(("local_shell_call", request.data.call_id))
        stdout, stderr, code = await self.run(request.data.action.command)
        return stdout + stderr + ("" if code == 0 else f"(exit code {code})")

    def editor_call(self, operation: ApplyPatchOperation) -> None:
        assert operation.ctx_wrapper is not None
        # The SDK gives the editor (and the computer) no call id: calls pair with the items by order.
        self.ran.append(("apply_patch_call", ""))

    def create_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        """A V4A create_file diff: every line starts with '+'."""
        self.editor_call(operation)
        lines = operation.diff.splitlines() if operation.diff else []
        assert all(line.startswith("+") for line in lines), operation.diff
        (self.root / operation.path).write_text("".join(line[1:] + "\n" for line in lines))
        return ApplyPatchResult(status="completed", output=f"Created {operation.path}")

    def update_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        self.editor_call(operation)
        return ApplyPatchResult(status="failed", output="update_file: not expected from hotloop-sim")

    def delete_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        self.editor_call(operation)
        return ApplyPatchResult(status="failed", output="delete_file: not expected from hotloop-sim")

    # -- the fake screen (AsyncComputer) --
    @property
    def environment(self) -> Any:
        return "browser" if self.preview else None

    @property
    def dimensions(self) -> tuple[int, int] | None:
        return (640, 480) if self.preview else None

    async def screenshot(self) -> str:
        # The SDK ends every computer call with one screenshot (the action's own, or one taken after it).
        self.ran.append(("computer_call", ""))
        self.actions.append(("screenshot",))
        return PNG

    async def click(self, x: int, y: int, button: Any) -> None:
        self.actions.append(("click", x, y, button))

    async def double_click(self, x: int, y: int) -> None:
        self.actions.append(("double_click", x, y))

    async def scroll(self, x: int, y: int, scroll_x: int, scroll_y: int) -> None:
        self.actions.append(("scroll", x, y, scroll_x, scroll_y))

    async def type(self, text: str) -> None:
        self.actions.append(("type", text))

    async def wait(self) -> None:
        self.actions.append(("wait",))

    async def move(self, x: int, y: int) -> None:
        self.actions.append(("move", x, y))

    async def keypress(self, keys: list[str]) -> None:
        self.actions.append(("keypress", keys))

    async def drag(self, path: list[tuple[int, int]]) -> None:
        self.actions.append(("drag", path))

    def tools(self, toolset: str) -> list[Tool]:
        made: dict[str, Tool] = {
            "shell": ShellTool(executor=self.shell),
            "apply_patch": ApplyPatchTool(editor=self),
            "local_shell": LocalShellTool(executor=self.local_shell),
            "computer": ComputerTool(computer=self),
        }
        return [made[kind] for kind in toolset.split("+")]


@asynccontextmanager
async def connected(server: RunningServer, transport: str, model: str) -> AsyncIterator[tuple[Model | str, Any]]:
    """(the Agent's model, the RunConfig or None): `http` is OpenAIResponsesModel, the others WS_SETUPS."""
    if transport == "http":
        client = AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        try:
            yield OpenAIResponsesModel(model=model, openai_client=client), None
        finally:
            await client.close()
    else:
        async with WS_SETUPS[transport](server) as run_config:
            yield model, run_config


async def run_agent(
    agent: Agent[Any], run_config: RunConfig | None, streamed: bool, max_turns: int = 10
) -> tuple[RunResult | RunResultStreaming, list[Any]]:
    kwargs: dict[str, Any] = {"max_turns": max_turns, "run_config": run_config}
    if streamed:
        result = Runner.run_streamed(agent, "Use the tools on my workspace, then tell me what you did.", **kwargs)
        return result, await consume(result)
    return await Runner.run(agent, "Use the tools on my workspace, then tell me what you did.", **kwargs), []


def call_id(raw: Any) -> str:
    """A run item's raw call or output: the SDK keeps some as openai-python models, some as dicts."""
    return str(raw["call_id"] if isinstance(raw, dict) else raw.call_id)


def check_typed_loop(result: RunResult | RunResultStreaming, workspace: Workspace, kinds: set[str], k: int) -> None:
    """K calls of the offered kinds, each run by its own tool in order, then one text message: K+1 turns."""
    assert len(result.raw_responses) == k + 1, [r.output for r in result.raw_responses]
    calls = [response.output for response in result.raw_responses[:-1]]
    assert all(len(output) == 1 for output in calls), calls
    items = [output[0] for output in calls]
    for item in items:
        assert isinstance(item, tuple(CALL_TYPES[kind] for kind in kinds)), item
        assert item.status == "completed", item
    # Every call ran once, by the tool of its kind, in the order the model made them.
    expected = [(item.type, item.call_id if "shell" in item.type else "") for item in items]
    assert workspace.ran == expected
    # The SDK's run items: K calls and K outputs answering them by call id, then the final text.
    made = [item.raw_item for item in result.new_items if isinstance(item, ToolCallItem)]
    answers = [item.raw_item for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    assert [call_id(call) for call in made] == [call_id(answer) for answer in answers] == [i.call_id for i in items]
    last = result.raw_responses[-1].output
    assert len(last) == 1 and isinstance(last[0], ResponseOutputMessage), last
    assert isinstance(result.final_output, str) and result.final_output.strip()
    # Call N's file action (shell, local_shell, apply_patch) wrote hotloop_sim_N.txt with its own line.
    for number, item in enumerate(items, start=1):
        written = workspace.root / f"hotloop_sim_{number}.txt"
        assert written.exists() == (item.type != "computer_call"), item
        if written.exists():
            assert written.read_text() == f"hotloop-sim-{number}\n"


def check_typed_stream(events: list[Any], result: RunResult | RunResultStreaming, k: int) -> None:
    raw = [event.data for event in events if event.type == "raw_response_event"]
    types = [event.type for event in raw]
    assert types.count("response.created") == types.count("response.completed") == k + 1
    shell_commands = [
        command for r in result.raw_responses for item in r.output if item.type == "shell_call"
        for command in item.action.commands
    ]  # fmt: skip
    assert types.count("response.shell_call_command.added") == len(shell_commands)
    assert [event.command for event in raw if event.type == "response.shell_call_command.done"] == shell_commands
    names = [event.name for event in events if event.type == "run_item_stream_event"]
    assert names.count("tool_called") == names.count("tool_output") == k
    assert names.count("message_output_created") == 1


def check_stored_outputs(server: RunningServer, result: RunResult | RunResultStreaming, k: int) -> None:
    """The last turn was stored with its whole input (the SDK resends the conversation): the typed outputs the SDK
    sent are listed as it sent them, each answering its call."""
    last_id = result.raw_responses[-1].response_id
    with server.http() as http:
        page = http.get(f"/responses/{last_id}/input_items", params={"order": "asc", "limit": 100}).json()
    listed = page["data"]
    calls = {item["call_id"]: item for item in listed if item["type"] in ITEM_TYPES.values()}
    outputs = [item for item in listed if item["type"].endswith("_call_output")]
    assert len(calls) == len(outputs) == k, listed
    for output in outputs:
        call = calls[output["call_id"]]
        assert output["type"] == call["type"] + "_output"
        number = list(calls).index(output["call_id"]) + 1
        if output["type"] == "shell_call_output":
            assert [(entry["stdout"], entry["stderr"], entry["outcome"]) for entry in output["output"]] == [
                (f"hotloop-sim-{number}\n", "", {"type": "exit", "exit_code": 0})
            ]
        elif output["type"] == "local_shell_call_output":
            assert output["output"] == f"hotloop-sim-{number}\n"
        elif output["type"] == "apply_patch_call_output":
            assert output["status"] == "completed" and call["operation"]["path"] in output["output"]
        else:
            assert output["output"] == {"type": "computer_screenshot", "image_url": f"data:image/png;base64,{PNG}"}


def transport_counts(server: RunningServer) -> dict[str, float]:
    return {name: responses_count(server, name) for name in ("http", "sse", "websocket")}


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
@pytest.mark.parametrize("transport", ["http", *sorted(WS_SETUPS)])
@pytest.mark.parametrize("toolset", list(TOOLSETS))
async def test_typed_tool_loop(
    server: RunningServer, tmp_path: Path, toolset: str, transport: str, streamed: bool
) -> None:
    k = TOOLSETS[toolset]
    workspace = Workspace(tmp_path)
    before = transport_counts(server)
    async with connected(server, transport, "hotloop-sim") as (model, run_config):
        agent: Agent[Any] = Agent(
            name="typed",
            instructions="Use the tools, then answer.",
            model=model,
            tools=workspace.tools(toolset),
            model_settings=ModelSettings(metadata={"sim_tool_calls": str(k)}, store=True),
        )
        result, events = await run_agent(agent, run_config, streamed)
    kinds = set(toolset.split("+"))
    check_typed_loop(result, workspace, kinds, k)
    if streamed:
        check_typed_stream(events, result, k)
    check_stored_outputs(server, result, k)
    # Every turn went over the transport asked for, and only over it.
    carried = "websocket" if transport != "http" else "sse" if streamed else "http"
    after = transport_counts(server)
    assert {name: after[name] - before[name] for name in after} == {
        name: (k + 1 if name == carried else 0) for name in after
    }
    item_types = [r.output[0].type for r in result.raw_responses[:-1]]
    if toolset == "shell+apply_patch":  # K=4: the sim's (seeded) picks used both tools
        assert set(item_types) == {"shell_call", "apply_patch_call"}, item_types
    if toolset == "computer":  # call 1 a screenshot, call 2 a click and the screenshot after it
        click = result.raw_responses[1].output[0]
        assert isinstance(click, ResponseComputerToolCall) and click.action is not None
        assert workspace.actions == [
            ("screenshot",),
            ("click", click.action.x, click.action.y, "left"),
            ("screenshot",),
        ]


@pytest.mark.parametrize("preview", [False, True], ids=["computer", "computer_use_preview"])
async def test_computer_tool_type(
    server: RunningServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, preview: bool
) -> None:
    """For a model name that is not `computer-use-preview*` the SDK sends `{"type": "computer"}` (GA); a preview
    model gets `computer_use_preview` with the display: hotloop takes either and describes the display."""
    if preview:  # as the SDK does for a `computer-use-preview*` model (hotloop serves no such name)
        monkeypatch.setattr(Converter, "_is_preview_computer_model", classmethod(lambda cls, model: True))
    workspace = Workspace(tmp_path, preview=preview)
    async with connected(server, "http", "hotloop-sim") as (model, _):
        agent: Agent[Any] = Agent(name="screen", model=model, tools=workspace.tools("computer"))
        result, _ = await run_agent(agent, None, streamed=False)
    check_typed_loop(result, workspace, {"computer"}, 2)
    assert base64.b64decode(PNG)[:16] == b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"  # a real PNG went back
    first = result.raw_responses[0].response_id
    with server.http() as http:
        stored = http.get(f"/responses/{first}").json()
    if preview:
        assert stored["tools"] == [
            {"type": "computer_use_preview", "environment": "browser", "display_width": 640, "display_height": 480}
        ]
    else:
        assert stored["tools"] == [{"type": "computer"}]


INSTRUCTIONS = "You run shell commands with the shell tool."


@pytest.mark.timeout(180)
async def test_smollm2_shell_call(server: RunningServer) -> None:
    """The real 135M model with `tool_choice="shell"` on the first turn (the grammar forces the call; the SDK then
    resets tool_choice): its call is a `shell_call` with commands, which the SDK hands to the executor. The
    commands come from the model: the executor records them and does not run them."""
    seen: list[list[str]] = []

    def executor(request: ShellCommandRequest) -> ShellResult:
        seen.append(list(request.data.action.commands))
        done = ShellCallOutcome(type="exit", exit_code=0)
        return ShellResult(output=[ShellCommandOutput(stdout="ok\n", outcome=done) for _ in seen[-1]])

    settings = ModelSettings(tool_choice="shell", temperature=0, max_tokens=64, store=False)
    async with connected(server, "http", "smollm2-135m") as (model, _):
        tools: list[Tool] = [ShellTool(executor=executor)]
        agent: Agent[Any] = Agent(
            name="small", instructions=INSTRUCTIONS, model=model, tools=tools, model_settings=settings
        )
        try:
            result = await Runner.run(agent, "Run `pwd` in the shell.", max_turns=2)
            responses = result.raw_responses
        except MaxTurnsExceeded as exc:  # the second turn called the tool again: the first turn is what counts
            assert exc.run_data is not None
            responses = exc.run_data.raw_responses
    first = responses[0].output
    assert [item.type for item in first] == ["shell_call"], first
    call = first[0]
    assert isinstance(call, ResponseFunctionShellToolCall) and call.status == "completed"
    assert call.action.commands and all(isinstance(command, str) for command in call.action.commands)
    # Every shell call of the run (the second turn, on auto, may call again) reached the executor as sent.
    assert seen == [item.action.commands for r in responses for item in r.output if item.type == "shell_call"]
