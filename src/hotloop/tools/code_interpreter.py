"""`code_interpreter` run by the server inside the response (docs/code-interpreter.md): Python in a container (a
sandboxed process tree with a persistent kernel: hotloop/sandbox/), offered to the model as a function
`python({"code": "..."})`.

- Declared at the door (`declare`): `container` is a container's id (`cntr_…`, the key's own: checked when it runs)
  or `{type: "auto", memory_limit, file_ids, network_policy}`; a 400 naming the field for anything else. Echoed as
  sent.
- The model's call becomes a `code_interpreter_call` (`build`), which the server runs (pipeline/steps/code_runs.py)
  in the container, its `container_id` set then (an `auto` container is made at the first run of a response, or is
  the one the response's context last ran in while it is still there).
- The call reads to the model (`lower`) as the function call it wrote and an output: what the code printed, the
  value of its last expression, its traceback, and the files it wrote.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import msgspec

from hotloop.errors import InvalidParam
from hotloop.ids import new_id
from hotloop.skills.requested import Requested
from hotloop.tools.client import parse_arguments
from hotloop.tools.spec import ToolSpec
from hotloop.wire.containers import allowed_domains
from hotloop.wire.items import FunctionCall, FunctionCallOutput
from hotloop.wire.tool_items import CodeInterpreterCall, CodeInterpreterLogs

TYPE = KIND = "code_interpreter"  # `tools[i].type` and its ToolSpec's kind
NAME = "python"  # the function the model calls (OpenAI's models call their interpreter `python` too)
MEMORY_LIMITS = ("1g", "4g", "16g", "64g")  # OpenAI's `memory_limit` values
MAX_FILE_IDS = 100
FIELDS = frozenset({"type", "container"})
AUTO_FIELDS = frozenset({"type", "memory_limit", "file_ids", "network_policy"})
DESCRIPTION = (
    "Run Python code in a sandbox with a persistent session: variables, imports and files in /mnt/data stay between "
    "calls. What the code prints and the value of its last expression come back. Save files to /mnt/data."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "The Python code to run."}},
    "required": ["code"],
}
NOT_RUN = "The code did not run."
FAILED = "The code could not be run: "


class Declared(msgspec.Struct, frozen=True):
    """A request's `code_interpreter` tool, checked: where its code runs."""

    container_id: str | None = None  # a named container; None: `auto`
    memory_limit: str = "1g"  # one of MEMORY_LIMITS
    file_ids: tuple[str, ...] = ()  # copied into an `auto` container when it is made
    skills: tuple[Requested, ...] = ()  # mounted in an `auto` container when it is made (a hosted shell's only)
    allowed_domains: tuple[str, ...] = ()  # what an `auto` container may reach (none: no network at all)


def declare(raw: dict[str, Any], param: str) -> tuple[ToolSpec, Declared]:
    """The function offered to the model and where its code runs; raises `InvalidParam` naming the field."""
    known(raw, FIELDS, param)
    container = raw.get("container")
    if isinstance(container, str):
        if not container.startswith("cntr_"):
            raise InvalidParam(
                '\'container\' must be a container id (cntr_…) or an object {"type": "auto"}.',
                param=f"{param}.container",
            )
        return _spec(), Declared(container_id=container)
    if not isinstance(container, dict) or container.get("type") != "auto":
        raise InvalidParam(
            '\'container\' must be a container id (cntr_…) or an object {"type": "auto"}.',
            param=f"{param}.container",
            code="invalid_type" if not isinstance(container, dict) else "invalid_value",
        )
    return _spec(), auto_container(container, f"{param}.container")


def auto_container(container: dict[str, Any], where: str, fields: frozenset[str] = AUTO_FIELDS) -> Declared:
    """An `auto` container's fields checked (`where`: its param; `fields`: those it may have), as the hosted
    shell's `container_auto` environment is too (tools/hosted_shell.py); raises `InvalidParam` naming the field."""
    known(container, fields, where)
    limit = container.get("memory_limit") or "1g"
    if limit not in MEMORY_LIMITS:
        raise InvalidParam(f"'memory_limit' must be one of {', '.join(MEMORY_LIMITS)}.", param=f"{where}.memory_limit")
    files = container.get("file_ids") or []
    if not isinstance(files, list) or not all(isinstance(one, str) and one for one in files):
        raise InvalidParam("'file_ids' must be a list of file ids.", param=f"{where}.file_ids", code="invalid_type")
    if len(files) > MAX_FILE_IDS:
        raise InvalidParam(f"'file_ids' may list at most {MAX_FILE_IDS} files.", param=f"{where}.file_ids")
    domains = allowed_domains(container.get("network_policy"), f"{where}.network_policy")
    return Declared(None, limit, tuple(dict.fromkeys(files)), allowed_domains=domains)


def known(raw: dict[str, Any], fields: frozenset[str], param: str) -> None:
    """400 `unknown_parameter` naming the first field of `raw` not among `fields`."""
    for key in raw:
        if key not in fields:
            raise InvalidParam(f"Unknown parameter: '{param}.{key}'.", param=f"{param}.{key}", code="unknown_parameter")


def _spec() -> ToolSpec:
    return ToolSpec(NAME, KIND, DESCRIPTION, PARAMETERS)


def build(arguments: str, complete: bool) -> CodeInterpreterCall:
    """The call the model wrote (wire/builder.py's `CallBuilder`): its code, `in_progress` until the server ran
    it; `incomplete` when generation stopped inside it (never run). Lenient: arguments that are not a JSON object
    with `code` are the code itself (a model that wrote bare Python)."""
    return CodeInterpreterCall(
        id=new_id("ci"),
        code=code_of(arguments),
        container_id="",  # set when it runs (pipeline/steps/code_runs.py)
        status="in_progress" if complete else "incomplete",
        outputs=None,
    )


def code_of(arguments: str) -> str:
    parsed = parse_arguments(arguments)
    if parsed is None:
        return arguments
    code = parsed.get("code", parsed.get("input"))
    return code if isinstance(code, str) else ""


def lower(item: CodeInterpreterCall) -> Iterator[FunctionCall | FunctionCallOutput]:
    """The item as the model reads it (chat/hosted.py): the call it wrote, then what the run gave. The arguments
    as json.dumps writes them, as the model (and hotloop-sim) wrote them: the prefix is kept."""
    yield FunctionCall(call_id=item.id, name=NAME, arguments=json.dumps({"code": item.code or ""}), id=item.id)
    yield FunctionCallOutput(call_id=item.id, output=output_text(item))


def output_text(item: CodeInterpreterCall) -> str:
    """What the model reads as the run's result: its logs (images are named there by the run)."""
    logs = [output.logs for output in item.outputs or () if isinstance(output, CodeInterpreterLogs)]
    if item.status == "failed":
        return "\n".join(logs) or FAILED.rstrip(": ")
    if item.status != "completed":
        return NOT_RUN
    return "\n".join(logs) or "(no output)"


def texts(item: CodeInterpreterCall) -> Iterator[str]:
    """The free text the item carries (the safety stage reads it): its code, then its logs."""
    if item.code:
        yield item.code
    yield from output_texts(item)


def output_texts(item: CodeInterpreterCall) -> Iterator[str]:
    """What the run printed, which the model reads as a tool's output."""
    for output in item.outputs or ():
        if isinstance(output, CodeInterpreterLogs) and output.logs:
            yield output.logs
