"""Scripted Codex-like rollouts: instructions, tools, realistic tool outputs and histories of a chosen size."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MODEL = "hotloop-sim"
CHARS_PER_TOKEN = 4.0  # the assumption when the server cannot count tokens for us

INSTRUCTIONS = """You are a coding agent running in a terminal on the user's machine. You and the user share one \
workspace; your job is to finish the user's task completely before you yield back to them.

- Use the `shell` tool to inspect files and run commands; prefer `rg` over `grep` and read files in chunks of at most \
250 lines.
- Use `apply_patch` to edit files. Keep changes minimal and focused on the task; follow the existing style of the \
codebase and do not fix unrelated bugs or broken tests.
- Keep the user informed with short preamble messages before groups of tool calls, and keep a plan with \
`update_plan` for tasks that take more than a few steps.
- Run the project's tests when you have changed code. If tests fail for reasons unrelated to your change, say so.
- When you are done, summarise what you changed and where, and suggest natural next steps if there are any.
Sandbox: workspace-write; network access is restricted; approvals: on-request."""

USER_TASK = (
    "The test suite fails in tests/test_parser.py since yesterday's refactor of src/parser/tokens.py. "
    "Find out why, fix it, and make sure the whole suite passes."
)

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "shell",
        "description": "Runs a shell command and returns its output.",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "array", "items": {"type": "string"}, "description": "The command to execute"},
                "workdir": {"type": "string", "description": "The working directory to execute the command in"},
                "timeout_ms": {"type": "integer", "minimum": 1000, "maximum": 120000},
            },
            "required": ["command", "workdir", "timeout_ms"],
            "additionalProperties": False,
        },
    },
    {
        "type": "function",
        "name": "apply_patch",
        "description": "Edit files with a patch in the apply_patch format.",
        "parameters": {
            "type": "object",
            "properties": {"input": {"type": "string", "description": "The entire contents of the patch"}},
            "required": ["input"],
            "additionalProperties": False,
        },
    },
    {
        "type": "function",
        "name": "update_plan",
        "description": "Updates the task plan: each step with its status (one step in_progress at a time).",
        "parameters": {
            "type": "object",
            "properties": {
                "explanation": {"type": "string"},
                "plan": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "step": {"type": "string"},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                        },
                        "required": ["step", "status"],
                    },
                },
            },
            "required": ["plan"],
            "additionalProperties": False,
        },
    },
]

# `--tools typed`: the same scenario with `shell` and `apply_patch` as typed client tools (protocol.md §1.11), whose
# calls come out as `shell_call` / `apply_patch_call` items; `update_plan` stays a function.
TYPED_TOOLS: list[dict[str, Any]] = [{"type": "shell"}, {"type": "apply_patch"}, TOOLS[2]]
TOOL_SETS = ("function", "typed")
# The items a turn's call can be, and the client's answer to each.
CLIENT_CALLS = frozenset({"function_call", "shell_call", "apply_patch_call"})
TOOL_SEARCH: dict[str, Any] = {"type": "tool_search"}  # run by the server (execution "server", the default)

_SERVICES = ["jira", "github", "slack", "calendar", "drive", "sentry", "grafana", "linear", "notion", "pagerduty"]
_SERVICES += ["stripe", "zendesk", "figma", "datadog", "gitlab", "confluence", "salesforce", "hubspot", "asana"]
_ACTIONS = [
    ("search", "Search {s} for {o}s matching a query; returns ids, titles and a short snippet of each."),
    ("get", "Fetch one {s} {o} by id with all of its fields, comments and history."),
    ("create", "Create a {s} {o} with the given fields; returns the new {o}'s id and URL."),
    ("update", "Update fields of an existing {s} {o}; fields not given are left as they are."),
    ("list", "List recent {s} {o}s, newest first, with paging."),
    ("delete", "Delete a {s} {o} by id; this cannot be undone."),
]
_OBJECTS = ["issue", "ticket", "message", "event", "document", "alert", "dashboard", "record", "comment", "task"]


def deferred_tools(count: int, defer: bool = True) -> list[dict[str, Any]]:
    """`count` distinct function tools of a connector catalog (jira_search_issues, slack_create_message, ...) with
    realistic descriptions and schemas, marked `defer_loading` unless `defer` is False (the same tools inline)."""
    tools: list[dict[str, Any]] = []
    pairs = len(_SERVICES) * len(_ACTIONS)
    for index in range(count):
        service = _SERVICES[index % len(_SERVICES)]
        verb, text = _ACTIONS[(index // len(_SERVICES)) % len(_ACTIONS)]
        thing = _OBJECTS[(index // pairs + index % pairs) % len(_OBJECTS)]  # each (service, verb) meets every object
        round_ = index // (pairs * len(_OBJECTS))
        name = f"{service}_{verb}_{thing}s" + (f"_{round_}" if round_ else "")
        properties: dict[str, Any] = {
            "query" if verb in ("search", "list") else "id": {
                "type": "string",
                "description": f"The search text for {thing}s" if verb in ("search", "list") else f"The {thing}'s id",
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "At most this many results"},
            "fields": {"type": "array", "items": {"type": "string"}, "description": f"{thing} fields to return"},
        }
        tool: dict[str, Any] = {
            "type": "function",
            "name": name,
            "description": text.format(s=service.capitalize(), o=thing),
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": [next(iter(properties))],
                "additionalProperties": False,
            },
        }
        if defer:
            tool["defer_loading"] = True
        tools.append(tool)
    return tools


def tool_set(kind: str, deferred: int = 0, defer: bool = True) -> list[dict[str, Any]]:
    """The request's `tools`: the scenario's function or typed tools, then `deferred` connector tools and the
    server-run `tool_search` that loads them (with `defer` False: the same tools inline, and no search)."""
    if kind not in TOOL_SETS:
        raise ValueError(f"unknown tool set {kind!r} (known: {', '.join(TOOL_SETS)})")
    tools = list(TYPED_TOOLS if kind == "typed" else TOOLS)
    if deferred:
        tools += deferred_tools(deferred, defer)
        if defer:
            tools.append(TOOL_SEARCH)
    return tools


_DIRS = ["src/parser", "src/parser/backends", "src/cli", "src/io", "tests", "tests/fixtures", "docs", "scripts"]
_STEMS = ["tokens", "lexer", "ast_nodes", "visitor", "errors", "config", "loader", "cache", "render", "util", "main"]
_IDENTS = ["token", "span", "node", "offset", "source", "buffer", "stack", "result", "state", "kind", "value", "line"]
_TYPES = ["int", "str", "list[Token]", "Span | None", "dict[str, Node]", "bool", "bytes", "Iterator[Token]"]
_WORDS = ["parse", "emit", "scan", "peek", "advance", "expect", "recover", "flush", "merge", "resolve", "visit"]
_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


def _path(rng: random.Random, ext: str = ".py") -> str:
    return f"{rng.choice(_DIRS)}/{rng.choice(_STEMS)}{rng.choice(['', '_v2', '_impl', 's'])}{ext}"


def _listing(rng: random.Random) -> list[str]:
    lines = [f"$ ls -la {rng.choice(_DIRS)}", f"total {rng.randint(40, 900)}"]
    for _ in range(rng.randint(6, 20)):
        name = rng.choice(_STEMS) + rng.choice([".py", ".pyi", ".toml", ".md", ".json", ".txt", ""])
        mode = rng.choice(["-rw-r--r--", "-rwxr-xr-x", "drwxr-xr-x"])
        lines.append(
            f"{mode}  1 dev dev {rng.randint(0, 99999):>6} {rng.choice(_MONTHS)} {rng.randint(1, 28):>2} "
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} {name}"
        )
    return lines


def _code(rng: random.Random) -> list[str]:
    path = _path(rng)
    start = rng.randint(1, 400)
    lines = [f"$ sed -n '{start},{start + 40}p' {path}"]
    for _ in range(rng.randint(2, 4)):
        name = f"{rng.choice(_WORDS)}_{rng.choice(_IDENTS)}"
        args = ", ".join(f"{rng.choice(_IDENTS)}: {rng.choice(_TYPES)}" for _ in range(rng.randint(1, 3)))
        lines.append(f"def {name}(self, {args}) -> {rng.choice(_TYPES)}:")
        lines.append(f'    """{rng.choice(_WORDS).capitalize()} the {rng.choice(_IDENTS)} at the current offset."""')
        for _ in range(rng.randint(3, 8)):
            a, b = rng.choice(_IDENTS), rng.choice(_IDENTS)
            lines.append(
                rng.choice(
                    [
                        f"    if {a} is None or {a}.{b} < {rng.randint(0, 64)}:",
                        f"        raise ParseError(f'unexpected {{{a}!r}} at {{self.{b}}}')",
                        f"    {a} = self.{rng.choice(_WORDS)}({b}, limit={rng.randint(1, 512)})",
                        f"    for {a} in self.{b}s[{rng.randint(0, 9)}:]:",
                        f"        self.{a}.append({b})",
                        f"    return {a}",
                    ]
                )
            )
        lines.append("")
    return lines


def _grep(rng: random.Random) -> list[str]:
    word = f"{rng.choice(_WORDS)}_{rng.choice(_IDENTS)}"
    lines = [f"$ rg -n {word}"]
    for _ in range(rng.randint(5, 15)):
        lines.append(
            f"{_path(rng)}:{rng.randint(1, 900)}:    {rng.choice(_IDENTS)} = {word}(self.{rng.choice(_IDENTS)}, "
            f"{rng.randint(0, 99)})"
        )
    return lines


def _test_log(rng: random.Random) -> list[str]:
    lines = ["$ python -m pytest -q tests/test_parser.py"]
    for _ in range(rng.randint(2, 5)):
        lines.append("".join(rng.choice("..........F.s") for _ in range(rng.randint(20, 70))))
    test = f"test_{rng.choice(_WORDS)}_{rng.choice(_IDENTS)}"
    lines += [
        f"______________________________ {test} ______________________________",
        f"    def {test}():",
        f"        {rng.choice(_IDENTS)} = Parser(SOURCE_{rng.randint(1, 30)}).parse()",
        f">       assert {rng.choice(_IDENTS)}.span == Span({rng.randint(0, 99)}, {rng.randint(100, 300)})",
        f"E       AssertionError: assert Span(start={rng.randint(0, 99)}, end={rng.randint(100, 300)}) == Span(...)",
        f"tests/test_parser.py:{rng.randint(10, 700)}: AssertionError",
        f"FAILED tests/test_parser.py::{test} - AssertionError",
        f"{rng.randint(1, 9)} failed, {rng.randint(100, 400)} passed in {rng.uniform(0.5, 9):.2f}s",
    ]
    return lines


def _diff(rng: random.Random) -> list[str]:
    path = _path(rng)
    start = rng.randint(1, 500)
    lines = [f"$ git diff {path}", f"--- a/{path}", f"+++ b/{path}", f"@@ -{start},9 +{start},10 @@"]
    for _ in range(rng.randint(6, 14)):
        a, b = rng.choice(_IDENTS), rng.choice(_IDENTS)
        lines.append(f"{rng.choice(' +-')}    {a} = self.{rng.choice(_WORDS)}({b})")
    return lines


_BLOCKS: list[Callable[[random.Random], list[str]]] = [_listing, _code, _grep, _test_log, _diff]


def tool_text(seed: int, chars: int) -> str:
    """Varied, realistic tool output (listings, code, grep hits, test logs, diffs) of about `chars` characters."""
    rng = random.Random(seed)
    lines: list[str] = []
    size = 0
    while size < chars:
        for line in rng.choice(_BLOCKS)(rng):
            lines.append(line)
            size += len(line) + 1
            if size >= chars:
                break
    return "\n".join(lines)[:chars]


def user_message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def call_output(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def answer(call: dict[str, Any], text: str) -> dict[str, Any]:
    """The client's answer to a call item with the tool's output `text`: a `function_call_output`, a
    `shell_call_output` (the text as the command's stdout, exit code 0) or an `apply_patch_call_output`."""
    kind, call_id = call.get("type"), call["call_id"]
    if kind == "shell_call":
        outcome = {"type": "exit", "exit_code": 0}
        return {
            "type": "shell_call_output",
            "call_id": call_id,
            "output": [{"stdout": text, "stderr": "", "outcome": outcome}],
        }
    if kind == "apply_patch_call":
        return {"type": "apply_patch_call_output", "call_id": call_id, "status": "completed", "output": text}
    return call_output(call_id, text)


def sim_metadata(ttft_ms: float, tps: float, tool_calls: int, output_tokens: int | None = None) -> dict[str, str]:
    """The `metadata` that fixes the simulator's pacing and tool policy for one request."""
    meta = {"sim_ttft_ms": f"{ttft_ms:g}", "sim_tps": f"{tps:g}", "sim_tool_calls": str(tool_calls)}
    if output_tokens is not None:
        meta["sim_output_tokens"] = str(output_tokens)
    return meta


@dataclass(frozen=True)
class Rollout:
    """A scripted agent loop of `turns` turns whose context grows linearly to about `context_tokens`.

    Each turn but the last is a function call; the tool's output is sized from the context the server reported
    (usage.input_tokens) so that the next turn lands on the line from the first turn's context to the target.
    The server is deterministic, so every mode and every run replays the same texts.
    """

    turns: int
    context_tokens: int
    chars_per_token: float = CHARS_PER_TOKEN
    seed: int = 0
    # Every tool output the same size (the session's share of `context_tokens` a turn), not sized from the context
    # the server reported: with compaction the reported context falls back now and then.
    fixed: bool = False

    def first_input(self) -> list[dict[str, Any]]:
        return [user_message(USER_TASK)]

    def target(self, turn: int, first_context: int) -> float:
        """The context (tokens) turn `turn` (0-based) should have: linear from the first turn's to the target."""
        span = max(0, self.context_tokens - first_context)
        return first_context + span * turn / max(1, self.turns - 1)

    def output_chars(self, turn: int, first_context: int, context: int, output_tokens: int) -> int:
        """Size of the tool output answering turn `turn`'s call, given that turn's context and output."""
        if self.fixed:
            wanted = (self.context_tokens - first_context) / max(1, self.turns - 1) - output_tokens - 16
            return max(64, int(wanted * self.chars_per_token))
        wanted = self.target(turn + 1, first_context) - context - output_tokens - 16  # 16: the turn framing
        return max(64, int(wanted * self.chars_per_token))

    def tool_output(self, turn: int, call: dict[str, Any], chars: int) -> dict[str, Any]:
        """The answer to turn `turn`'s call item (whatever its type, the same text)."""
        return answer(call, tool_text(self.seed * 100_003 + turn, chars))


HISTORY_SHAPES = ("tools", "message", "items")


def shaped_history(shape: str, tokens: int, chars_per_token: float = CHARS_PER_TOKEN) -> list[dict[str, Any]]:
    """A history of about `tokens` tokens: `tools` (`sized_history`), `message` (the task, then one user message
    holding the rest) or `items` (the task, then alternating user and assistant messages of ~25 tokens)."""
    if shape == "tools":
        return sized_history(tokens, chars_per_token)
    budget = int(max(0, tokens - 700) * chars_per_token)
    if shape == "message":
        return [user_message(USER_TASK), user_message(tool_text(7, budget))]
    if shape != "items":
        raise ValueError(f"unknown history shape {shape!r} (known: {', '.join(HISTORY_SHAPES)})")
    items: list[dict[str, Any]] = [user_message(USER_TASK)]
    chunk = int(25 * chars_per_token)
    for index in range(max(1, budget // chunk)):
        text = tool_text(index, chunk)
        items.append(user_message(text) if index % 2 == 0 else assistant_message(text))
    return items


def assistant_message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def sized_history(tokens: int, chars_per_token: float = CHARS_PER_TOKEN, seed: int = 1) -> list[dict[str, Any]]:
    """A Codex-like history (task, then shell calls and their outputs) of about `tokens` tokens of input items."""
    items: list[dict[str, Any]] = [user_message(USER_TASK)]
    budget = int(max(0, tokens - 700) * chars_per_token)  # ~700: instructions, tools and the template
    index = 0
    while budget > 0:
        chunk = min(budget, 6000)
        call_id = f"call_hist_{index}"
        items.append(
            {
                "type": "function_call",
                "call_id": call_id,
                "name": "shell",
                "arguments": '{"command": ["bash", "-lc", "rg -n parse src"], "workdir": "/repo", "timeout_ms": 10000}',
            }
        )
        items.append(call_output(call_id, tool_text(seed * 7919 + index, chunk)))
        budget -= chunk + 40
        index += 1
    return items
