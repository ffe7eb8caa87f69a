"""The hosted `shell` (docs/code-interpreter.md, "Hosted shell"): a `shell` tool whose `environment` is a container
runs the model's commands in that container inside the response, as `code_interpreter` runs its code; `local` or no
environment stays the client's (tools/shell.py).

- Declared at the door (`declare`): `environment` `{type: "container_auto", memory_limit?, file_ids?,
  network_policy?, skills?}` (checked as code_interpreter's `auto` container: `code_interpreter.auto_container`;
  its skills by skills/requested.py) or `{type: "container_reference", container_id}` (the key's own: checked when
  it runs); a 400 naming the field for anything else. Echoed as sent.
- Offered to the model as the client tool's `shell` function, with `max_output_length` besides; the skills its
  container has are listed in the description (`with_skills`: pipeline/containers/skills.py finds them).
- The model's call is the client tool's `shell_call` (`build`), `in_progress` in a reserved slot until the server
  ran it (pipeline/steps/shell_runs.py), its `environment` `{type: "container_reference", container_id}` (the id set
  then); its answer is a `shell_call_output` the server adds after it. Both read to the model as the client tool's
  do (tools/shell.py, through tools/registry.py's `BY_ITEM`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from hotloop.errors import InvalidParam
from hotloop.skills.requested import requested
from hotloop.tools import code_interpreter
from hotloop.tools.client import optional_int, parse_arguments
from hotloop.tools.code_interpreter import Declared, auto_container, known
from hotloop.tools.shell import SHELL
from hotloop.tools.spec import ToolSpec
from hotloop.wire.containers import SKILLS_MOUNT
from hotloop.wire.tool_items import ShellCall

TYPE = "shell"  # `tools[i].type`, as the client's shell
KIND = "shell_hosted"  # its ToolSpec's kind: the same `shell` function, run by the server
AUTO, REFERENCE = "container_auto", "container_reference"
AUTO_FIELDS = code_interpreter.AUTO_FIELDS | {"skills"}
REFERENCE_FIELDS = frozenset({"type", "container_id"})
DESCRIPTION = (
    "Run shell commands (bash) in a sandboxed Linux container and read their output. `commands` are command lines "
    "run in order, each in a fresh shell, in /mnt/data, whose files stay between calls; `timeout_ms` bounds each; "
    "`max_output_length` keeps that many characters of each command's stdout and stderr."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        **SHELL.parameters["properties"],
        "max_output_length": {"type": "integer", "description": "Characters kept of each output (the middle cut)."},
    },
    "required": ["commands"],
}
NOT_RUN_EXIT = 126  # a command the server could not run (bash's "cannot execute"): its output's exit code


def hosted(raw: dict[str, Any]) -> bool:
    """Whether a `shell` tool asks for a container (the server runs it), not the client's machine."""
    environment = raw.get("environment")
    return raw.get("type") == TYPE and isinstance(environment, dict) and environment.get("type") in (AUTO, REFERENCE)


def declare(raw: dict[str, Any], param: str) -> tuple[ToolSpec, Declared]:
    """The `shell` function offered to the model and where its commands run; raises `InvalidParam` naming the
    field."""
    environment = raw["environment"]
    where = f"{param}.environment"
    if environment["type"] == REFERENCE:
        known(environment, REFERENCE_FIELDS, where)
        container = environment.get("container_id")
        if not isinstance(container, str) or not container.startswith("cntr_"):
            raise InvalidParam(
                "'container_id' must be a container id (cntr_…).",
                param=f"{where}.container_id",
                code="invalid_type" if not isinstance(container, str) else "invalid_value",
            )
        return _spec(), Declared(container_id=container)
    declared = auto_container(environment, where, AUTO_FIELDS)
    skills = requested(environment.get("skills"), f"{where}.skills")
    return _spec(), msgspec.structs.replace(declared, skills=skills)


def _spec() -> ToolSpec:
    return ToolSpec(SHELL.name, KIND, DESCRIPTION, PARAMETERS)


def with_skills(spec: ToolSpec, skills: Sequence[tuple[str, str]]) -> ToolSpec:
    """The shell offered with the skills its container has ((name, description) each) listed, where each one is:
    the model reads a skill's SKILL.md when its description fits the task, as the Agent Skills standard has it."""
    if not skills:
        return spec
    listed = "\n".join(f"- {name}: {text} ({SKILLS_MOUNT}/{name}/SKILL.md)" for name, text in skills)
    description = (
        f"{spec.description or DESCRIPTION}\nSkills in the container, each a read-only folder under {SKILLS_MOUNT}; "
        f"when one fits the task, read its SKILL.md first and follow it:\n{listed}"
    )
    return msgspec.structs.replace(spec, description=description)


def build(call_id: str, arguments: str, complete: bool) -> ShellCall:
    """The call the model wrote (wire/builder.py's `CallBuilder`): the client tool's `shell_call`, `in_progress`
    until the server ran it; `incomplete` (never run) when generation stopped inside it or it names no command."""
    call = SHELL.build(call_id, arguments, complete)
    assert isinstance(call, ShellCall)
    limit = optional_int((parse_arguments(arguments) or {}).get("max_output_length"))
    return msgspec.structs.replace(
        call,
        action=msgspec.structs.replace(call.action, max_output_length=limit or None),
        status="in_progress" if call.status == "completed" else "incomplete",
        environment={"type": REFERENCE, "container_id": ""},  # the id set when it runs
    )
