"""The items of the typed tools a client runs (protocol.md §1.11), shaped as openai-python types them
(`types/responses/`: `response_function_shell_tool_call(_output)`, `response_input_item`'s `LocalShellCall(Output)`,
`response_apply_patch_tool_call(_output)`, `response_computer_tool_call`, `ComputerCallOutput`).

The server never runs these tools: the model's call goes to the client as its item, and the client's answer comes
back as the output item. A hosted shell is the exception: its `shell_call` (`hosted`: its environment names a
container) is run and answered by the server (wire/hosted_shell.py). Nested shapes the server only carries (an
action, an operation, a screenshot) are kept as the client sent them or as `hotloop/tools/` built them.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

ItemStatus = Literal["in_progress", "completed", "incomplete"]


class _Item(msgspec.Struct, tag_field="type", omit_defaults=True, forbid_unknown_fields=False):
    pass


# -- shell (the Agents SDK's ShellTool; `{"type": "shell"}`) --------------------------------------------------------


class ShellAction(msgspec.Struct, omit_defaults=True):
    commands: list[str]
    timeout_ms: int | None = None
    max_output_length: int | None = None


class ShellOutcome(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=False):
    type: Literal["exit", "timeout"]
    exit_code: int | None = None


class ShellOutput(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=False):
    stdout: str
    stderr: str
    outcome: ShellOutcome


class ShellCall(_Item, tag="shell_call"):
    call_id: str
    action: ShellAction
    id: str | None = None
    status: ItemStatus | None = None
    environment: dict[str, Any] | None = None
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)

    @property
    def hosted(self) -> bool:
        """A call the server runs in a container (a hosted shell's: wire/hosted_shell.py), not the client."""
        return isinstance(self.environment, dict) and self.environment.get("type") == "container_reference"


class ShellCallOutput(_Item, tag="shell_call_output"):
    call_id: str
    output: list[ShellOutput]
    id: str | None = None
    status: ItemStatus | None = None
    max_output_length: int | None = None
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)


# -- local_shell (the older LocalShellTool) ---------------------------------------------------------------------------


class LocalShellAction(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=False):
    command: list[str]
    env: dict[str, str] | None = None  # hotloop's calls set `{}`: openai-python requires the key
    type: Literal["exec"] | None = None  # hotloop's calls set "exec": openai-python requires the key
    timeout_ms: int | None = None
    working_directory: str | None = None
    user: str | None = None


class LocalShellCall(_Item, tag="local_shell_call"):
    call_id: str
    action: LocalShellAction
    id: str | None = None
    status: ItemStatus | None = None
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)


class LocalShellCallOutput(_Item, tag="local_shell_call_output"):
    """openai-python names the call's id `id`; the Agents SDK sends `call_id` (protocol.md §1.11): either pairs."""

    output: str
    call_id: str | None = None
    id: str | None = None
    status: ItemStatus | None = None
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)

    def __post_init__(self) -> None:
        # Sent with `call_id` only, it is listed (input_items) with that call id as `id` too: openai-python's item
        # requires the key, and names the call's id by it.
        if self.id is None:
            self.id = self.call_id

    @property
    def answers(self) -> str:
        return self.call_id or self.id or ""


# -- apply_patch (the Agents SDK's ApplyPatchTool; `{"type": "apply_patch"}`) ----------------------------------------


class PatchOperation(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=False):
    type: Literal["create_file", "update_file", "delete_file"]
    path: str
    diff: str | None = None  # none for delete_file


class ApplyPatchCall(_Item, tag="apply_patch_call"):
    call_id: str
    operation: PatchOperation
    id: str | None = None
    status: Literal["in_progress", "completed"] | None = None
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)


class ApplyPatchCallOutput(_Item, tag="apply_patch_call_output"):
    call_id: str
    status: Literal["completed", "failed"]
    output: str | None = None
    id: str | None = None
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)


# -- computer (`computer`, and `computer_use_preview` before it) -----------------------------------------------------


class ComputerCall(_Item, tag="computer_call"):
    call_id: str
    pending_safety_checks: list[dict[str, Any]] | None = None  # hotloop's calls set `[]`: a required key
    action: dict[str, Any] | None = None
    actions: list[dict[str, Any]] | None = None
    id: str | None = None
    status: ItemStatus | None = None
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)


class ComputerScreenshot(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=False):
    type: Literal["computer_screenshot"]
    image_url: str | None = None
    file_id: str | None = None


class ComputerCallOutput(_Item, tag="computer_call_output"):
    call_id: str
    output: ComputerScreenshot
    acknowledged_safety_checks: list[dict[str, Any]] | None = None
    id: str | None = None
    status: ItemStatus | None = None
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)


# -- tool_search (deferred tools loaded on demand) -------------------------------------------------------------------


class ToolSearchCall(_Item, tag="tool_search_call"):
    """The model's search of the deferred tools; `execution` server: hotloop ran it (its output follows in the same
    response); client: the client runs it and answers with a `tool_search_output` naming the tools to load."""

    arguments: Any
    execution: Literal["server", "client"]
    call_id: str | None = None
    id: str | None = None
    status: ItemStatus | None = None
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)

    @property
    def key(self) -> str:
        """What its output answers: the call id, or the item id of a server-run search without one."""
        return self.call_id or self.id or ""


class ToolSearchOutput(_Item, tag="tool_search_output"):
    """The tools a search loaded (their definitions, as declared): callable from here on."""

    tools: list[dict[str, Any]]
    execution: Literal["server", "client"] = "client"
    call_id: str | None = None
    id: str | None = None
    status: ItemStatus | None = None
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)

    @property
    def answers(self) -> str:
        return self.call_id or ""


class AdditionalTools(_Item, tag="additional_tools"):
    """Tools a developer makes available from this point of the conversation on (Codex; openai-python's beta
    `AdditionalTools`): rendered where the item stands, so the prompt before it is kept."""

    tools: list[dict[str, Any]]
    role: Literal["developer"] = "developer"
    id: str | None = None
    agent: dict[str, str] | None = None  # {agent_name} in a multi-agent response (protocol.md §1.12)


# -- file_search (run by the server inside the response: tools/file_search.py, pipeline/steps/file_searches.py) ------


class FileSearchResult(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=False):
    """One chunk a search found (openai-python's `ResponseFileSearchToolCall.Result`)."""

    file_id: str | None = None
    filename: str | None = None
    score: float | None = None
    text: str | None = None
    attributes: dict[str, str | float | bool] | None = None


FileSearchStatus = Literal["in_progress", "searching", "completed", "incomplete", "failed"]


class FileSearchCall(_Item, tag="file_search_call"):
    """A search of the request's vector stores the model asked for and the server ran. `results` is always kept
    (stored, read back into the context); a client sees it only with `include: ["file_search_call.results"]`
    (`without_results`), else null. A client that resends the item without them leaves it `UNSET`."""

    id: str
    queries: list[str]
    status: FileSearchStatus
    results: list[FileSearchResult] | msgspec.UnsetType | None = msgspec.UNSET


# -- code_interpreter (run by the server in a container: tools/code_interpreter.py, pipeline/steps/code_runs.py) ----


class CodeInterpreterLogs(msgspec.Struct, tag_field="type", tag="logs"):
    logs: str


class CodeInterpreterImage(msgspec.Struct, tag_field="type", tag="image"):
    url: str  # a `data:image/png;base64,…` URL (the figure is also a container file)


CodeInterpreterStatus = Literal["in_progress", "interpreting", "completed", "incomplete", "failed"]


class CodeInterpreterCall(_Item, tag="code_interpreter_call"):
    """Code the model wrote and the server ran in a container (openai-python's `ResponseCodeInterpreterToolCall`).
    `outputs` is always kept (stored, read back into the context); a client sees it only with
    `include: ["code_interpreter_call.outputs"]` (wire/included.py), else null."""

    id: str
    code: str | None
    container_id: str
    status: CodeInterpreterStatus
    outputs: list[CodeInterpreterLogs | CodeInterpreterImage] | msgspec.UnsetType | None = msgspec.UNSET


TypedCallItem = ShellCall | LocalShellCall | ApplyPatchCall | ComputerCall | ToolSearchCall
TypedOutputItem = ShellCallOutput | LocalShellCallOutput | ApplyPatchCallOutput | ComputerCallOutput | ToolSearchOutput
TYPED_ITEMS: tuple[Any, ...] = (
    ShellCall,
    ShellCallOutput,
    LocalShellCall,
    LocalShellCallOutput,
    ApplyPatchCall,
    ApplyPatchCallOutput,
    ComputerCall,
    ComputerCallOutput,
    ToolSearchCall,
    ToolSearchOutput,
    AdditionalTools,
    FileSearchCall,
    CodeInterpreterCall,
)
