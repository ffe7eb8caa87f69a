"""A coding agent for the README's tour, on the OpenAI Agents SDK: `ShellTool` runs the model's commands in a
workspace directory and `ApplyPatchTool` writes the model's patches there. hotloop offers both tools to the model
and hands its calls out as `shell_call` / `apply_patch_call` items (docs/api.md); this script is the client that runs
them. Start the server (`make serve`, whose .venv has the Agents SDK), then:

    .venv/bin/python examples/coding_agent.py [WORKSPACE] [--base-url URL] [--model MODEL]

WORKSPACE defaults to a new temporary directory. With `hotloop-sim` (the script's default model) the calls are
harmless: call N prints `hotloop-sim-N` and writes it to `hotloop_sim_N.txt`, by a shell command or by a patch
(docs/models.md). The commands run unsandboxed in WORKSPACE: point a real model at a directory you can lose.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path

from agents import (
    Agent,
    ApplyPatchTool,
    OpenAIResponsesModel,
    Runner,
    ShellTool,
    apply_diff,
    set_tracing_disabled,
)
from agents.editor import ApplyPatchOperation, ApplyPatchResult
from agents.items import ToolCallItem, ToolCallOutputItem
from agents.tool import ShellCallOutcome, ShellCommandOutput, ShellCommandRequest, ShellResult
from openai import AsyncOpenAI

TIMEOUT_MS = 30_000  # a command's limit when the model sets none


class Workspace:
    """The agent's directory: the shell's working directory, and the editor's files (paths stay inside it)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    async def shell(self, request: ShellCommandRequest) -> ShellResult:
        """ShellTool's executor: each command through `sh -c` in the workspace, in order."""
        action = request.data.action
        limit = (action.timeout_ms or TIMEOUT_MS) / 1000
        outputs = []
        for command in action.commands:
            process = await asyncio.create_subprocess_shell(
                command, cwd=self.root, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            try:
                stdout, stderr = await asyncio.wait_for(process.communicate(), limit)
                outcome = ShellCallOutcome(type="exit", exit_code=process.returncode)
            except TimeoutError:
                process.kill()
                stdout, stderr = await process.communicate()
                outcome = ShellCallOutcome(type="timeout")
            outputs.append(
                ShellCommandOutput(
                    stdout=stdout.decode(errors="replace"),
                    stderr=stderr.decode(errors="replace"),
                    outcome=outcome,
                    command=command,
                )
            )
        return ShellResult(output=outputs)

    # ApplyPatchTool's editor: the operation's `diff` is a V4A diff, which the SDK's `apply_diff` applies. What
    # fails (a path outside the workspace, a diff that does not apply) goes back to the model as a failed patch.
    def create_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        return self._edit(operation, "Created")

    def update_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        return self._edit(operation, "Updated")

    def delete_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        return self._edit(operation, "Deleted")

    def _edit(self, operation: ApplyPatchOperation, done: str) -> ApplyPatchResult:
        path = (self.root / operation.path).resolve()
        try:
            if not path.is_relative_to(self.root):
                raise ValueError("the path is outside the workspace")
            if operation.type == "delete_file":
                path.unlink()
            elif operation.type == "create_file":
                path.parent.mkdir(parents=True, exist_ok=True)
                text = apply_diff("", operation.diff or "", mode="create")
                path.write_text(text + "\n" if text and not text.endswith("\n") else text)  # lines end with one
            else:
                path.write_text(apply_diff(path.read_text(), operation.diff or ""))
        except (OSError, ValueError) as exc:
            return ApplyPatchResult(status="failed", output=f"{operation.path}: {exc}")
        return ApplyPatchResult(status="completed", output=f"{done} {operation.path}")


async def main() -> None:
    parser = argparse.ArgumentParser(description="A coding agent (Agents SDK: ShellTool, ApplyPatchTool) on hotloop.")
    parser.add_argument("workspace", nargs="?", help="directory the agent works in (default: a new temporary one)")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--model", default="hotloop-sim")
    args = parser.parse_args()
    root = Path(args.workspace or tempfile.mkdtemp(prefix="hotloop-agent-"))
    root.mkdir(parents=True, exist_ok=True)
    workspace = Workspace(root)

    set_tracing_disabled(True)  # the SDK would otherwise send its traces to api.openai.com
    client = AsyncOpenAI(base_url=args.base_url, api_key=os.environ.get("HOTLOOP_API_KEY", "unused"))
    agent = Agent(
        name="coder",
        instructions="You are a coding agent. Use the shell and apply_patch tools in the workspace, then say what "
        "you did.",
        model=OpenAIResponsesModel(model=args.model, openai_client=client),
        tools=[ShellTool(executor=workspace.shell), ApplyPatchTool(editor=workspace)],
    )
    result = await Runner.run(agent, "Create a file, then list the workspace.", max_turns=10)

    for item in result.new_items:  # each call, then what the tool answered
        if isinstance(item, ToolCallItem):
            raw = item.raw_item if isinstance(item.raw_item, dict) else item.raw_item.model_dump()
            print(f"{raw['type']}: {raw.get('action') or raw.get('operation')}")
        elif isinstance(item, ToolCallOutputItem):
            print(f"  -> {item.output!r}")
    print(f"answer: {result.final_output}")
    for path in sorted(workspace.root.rglob("*")):  # what the agent left in the workspace
        if path.is_file():
            print(f"{path}: {path.read_text(errors='replace')!r}")
    await client.close()


if __name__ == "__main__":
    asyncio.run(main())
