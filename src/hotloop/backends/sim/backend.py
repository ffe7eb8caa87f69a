"""`hotloop-sim`: a deterministic simulated model for tests and benchmarks (docs/models.md).

Same seed + same prompt tokens → same output. Pacing: `ttft_ms` before the first token, then `tps` tokens per second.
Tool policy: with tools offered and fewer than K calls in the conversation, call a declared tool with arguments built
from its JSON schema (a tool that acts, a typed client tool or a shell-like function with a `cmd`/`command`/`commands`
property, is preferred: a typed tool gets its kind's well-formed action (hotloop/tools/), a shell-like function a real
command: `shell_command`); otherwise answer with text. With a `tool_search` tool and deferred tools, the conversation's
first call searches for them. With `file_search`, a user's message is searched (its words, the query), and a search's
results answered with a sentence citing the first (`[1]`): it reads its prompt's last messages as a model does
(`decode`: its tokenizer's). With `code_interpreter`, a user's message gets a small program (programs.py; the metadata's
`sim_code` exactly, when set) and the run's output an answer quoting it; with a hosted `shell`, a call of harmless
commands (`sim_commands`, a JSON list of command lines, exactly when set), its output an answer quoting it. Per-request
overrides through `metadata`: `sim_ttft_ms`, `sim_tps`, `sim_output_tokens`, `sim_tool_calls`, `sim_reasoning_tokens`
(thinking before each answer or call: a reasoning item, counted in `reasoning_tokens`); and `hotloop_sim_fault`, a test
facility that makes the model fail: `stall_after:N` (hang after N output tokens), `die_after:N` (raise after N), `crash`
(raise before the first token). Unparsable overrides are ignored. In a multi-agent response (`multi_agent.enabled`), the
root first spawns `sim_subagents` subagents (default 1) and waits as many times for their answers, then calls its client
tools as above and answers; each subagent makes `sim_subagent_steps` (default 1) calls, then answers its parent: of a
client tool it was given (over WebSocket), else of `list_agents`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import re
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any, Literal

import msgspec

from hotloop import clock
from hotloop.backends.base import (
    Delta,
    Finished,
    GenerationRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from hotloop.backends.sim.packed import TOKEN_BYTES, longest_prefix, pack
from hotloop.backends.sim.programs import sim_program
from hotloop.backends.sim.schema_example import example_for_schema
from hotloop.backends.sim.shell import command_field, shell_arguments
from hotloop.backends.sim.words import WORDS
from hotloop.chat.specs import ToolSpec
from hotloop.tools import code_interpreter, file_search, hosted_shell, multi_agent
from hotloop.tools.grammar import compile_grammar, matches, sample
from hotloop.tools.registry import BY_KIND, SEARCH_KINDS

# How many recent token sequences the simulated prefix cache remembers.
PREFIX_CACHE_ENTRIES = 64
# The output's seed covers the prompt's length and this many of its last tokens.
RNG_TAIL_TOKENS = 2048


FAULT_KEY = "hotloop_sim_fault"
SLEEP_MIN_S = 0.0005  # a token due sooner than this leaves at once: the loop's timer would not be sooner
# The prompt's tail hotloop-sim reads for its latest messages (`file_search`): a search's output ends there.
TAIL_TOKENS = 512
# Codex's apply_patch format (V4A), creating a file as the typed apply_patch tool's sample does.
ADD_FILE = "*** Begin Patch\n*** Add File: hotloop_sim_{n}.txt\n+hotloop-sim-{n}\n*** End Patch\n"
SIM_COMMANDS = ("echo hotloop-sim", "ls /mnt/data")  # a hosted shell call's, unless `sim_commands` says


class SimFault(Exception):
    """The failure `hotloop_sim_fault` asked for (a backend fault, as a crashing engine would raise)."""


def parse_fault(raw: object) -> tuple[str, int] | None:
    """`stall_after:N` / `die_after:N` / `crash` → (kind, tokens before it); anything else → None (ignored)."""
    if raw == "crash":
        return ("die", 0)
    if not isinstance(raw, str) or ":" not in raw:
        return None
    kind, _, count = raw.partition(":")
    if kind not in ("stall_after", "die_after") or not count.isdigit():
        return None
    return (kind.removesuffix("_after"), int(count))


class SimStats:
    """What the simulator's generations did: tests read it to see a generation stop (in-process servers)."""

    __slots__ = ("closed_at", "finished", "started", "stopped")

    def __init__(self) -> None:
        self.started = 0
        self.finished = 0  # ended with `Finished`
        self.stopped = 0  # closed early: cancelled, timed out or failed
        self.closed_at = 0.0  # time.perf_counter() when the last early stop happened


class SimSettings(msgspec.Struct, frozen=True):
    ttft_ms: float = 20.0
    tps: float = 1000.0
    output_tokens: int = 32
    tool_calls: int = 2
    parallel_calls: int = 1
    seed: int = 0
    reasoning_tokens: int = 0  # a reasoning model: this many tokens of thinking before each answer or call
    prefer: tuple[str, ...] = ()  # tool names called before any other when offered (setting sim_prefer_tools)


REASONING = "reasoning"  # the plan's marker for the thinking that comes first


class SimBackend:
    def __init__(self, settings: SimSettings, decode: Callable[[list[int]], str] | None = None) -> None:
        """`decode`: its tokenizer's, to read the prompt's last messages (ChatML); without it, no file searches."""
        self.settings = settings
        self._decode = decode
        self._recent: deque[bytes] = deque(maxlen=PREFIX_CACHE_ENTRIES)  # packed prompts, newest last
        self.stats = SimStats()

    def _cached_prefix(self, packed: bytes) -> int:
        """Longest prefix shared with a recent prompt: what a prefix-caching engine would not recompute.

        The simulator remembers prompts only (its output pieces are not real tokens), so a continuation's
        cached tokens are its parent's prompt, as with an engine that caches prompts but not outputs.
        """
        return longest_prefix(packed, reversed(self._recent))

    def _remember(self, packed: bytes) -> None:
        if packed in self._recent:
            self._recent.remove(packed)
        self._recent.append(packed)

    async def prefill(self, prompt_tokens: Sequence[int]) -> int:
        packed = pack(prompt_tokens)
        cached = self._cached_prefix(packed)
        self._remember(packed)
        return cached

    async def close(self) -> None:
        self._recent.clear()

    def _option(self, request: GenerationRequest, name: str, default: float) -> float:
        """A `metadata` override `sim_<name>`; unparsable, negative or non-finite values fall back to the setting."""
        raw = request.metadata.get(f"sim_{name}")
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            return default
        return value if math.isfinite(value) and value >= 0 else default

    def _rng(self, request: GenerationRequest, packed: bytes) -> random.Random:
        """Seeded by the seed, the prompt's length and its last tokens: deterministic per input, and O(1) in the
        history (hashing a 100k-token prompt every turn would be the simulator's own overhead, not the API's)."""
        digest = hashlib.blake2b(packed[-RNG_TAIL_TOKENS * TOKEN_BYTES :], digest_size=8)
        digest.update(f"{self.settings.seed}:{len(packed)}".encode())
        return random.Random(int.from_bytes(digest.digest(), "little"))

    def _plan(self, request: GenerationRequest, rng: random.Random) -> list[tuple[ToolSpec | str | None, list[str]]]:
        """What to emit: the reasoning first (REASONING, words) when the model thinks, then tool calls (spec,
        argument pieces) or one text answer (None, words)."""
        thinking = int(self._option(request, "reasoning_tokens", self.settings.reasoning_tokens))
        reasoning: list[tuple[ToolSpec | str | None, list[str]]] = []
        if thinking > 0:
            words = [rng.choice(WORDS) for _ in range(thinking)]
            reasoning = [(REASONING, ["Let me think: " + words[0]] + [" " + word for word in words[1:]])]
        return reasoning + self._answer(request, rng)

    def _agents(
        self, request: GenerationRequest, rng: random.Random
    ) -> list[tuple[ToolSpec | str | None, list[str]]] | None:
        """A multi-agent response's step (tools/multi_agent.py): the root spawns `sim_subagents` subagents, then
        waits as many times for their answers; a subagent makes `sim_subagent_steps` calls (of a client tool it was
        given, else `list_agents`), then answers. None: the agent's own policy goes on (the root's client tools,
        then its answer)."""
        actions = {spec.name: spec for spec in request.tools if spec.kind == multi_agent.KIND}
        done = request.calls_so_far
        if request.agent != multi_agent.ROOT_NAME:
            steps = int(self._option(request, "subagent_steps", 1))
            client = [spec for spec in request.tools if spec.kind not in (multi_agent.KIND, "mcp", *SEARCH_KINDS)]
            listing = [actions["list_agents"]] if "list_agents" in actions else []
            tools = [spec for spec in client if acts(spec)] or client or listing
            if done < steps and tools:
                return [(tools[0], _pieces(_call_payload(tools[0], rng, done + 1)))]
            return None
        count = int(self._option(request, "subagents", 1))
        if done < count and "spawn_agent" in actions:
            numbers = range(done + 1, count + 1) if request.parallel_tool_calls else [done + 1]
            spawn = actions["spawn_agent"]
            return [(spawn, _pieces(json.dumps(multi_agent.sample("spawn_agent", n)))) for n in numbers]
        if count <= done < 2 * count and "wait_agent" in actions:
            return [(actions["wait_agent"], _pieces(json.dumps(multi_agent.sample("wait_agent", 0))))]
        return None

    def _answer(self, request: GenerationRequest, rng: random.Random) -> list[tuple[ToolSpec | str | None, list[str]]]:
        """Tool calls (spec, argument pieces) or one text answer (None, words)."""
        if request.agent and request.tool_choice != "none":
            planned = self._agents(request, rng)
            if planned is not None:
                return planned
            # Past its multi-agent steps, the root's own policy (its calls counted from there); a subagent answers.
            root = request.agent == multi_agent.ROOT_NAME
            spent = 2 * int(self._option(request, "subagents", 1)) if root else 0
            tools = [spec for spec in request.tools if spec.kind != multi_agent.KIND] if root else []
            calls = max(0, request.calls_so_far - spent)
            request = msgspec.structs.replace(request, tools=tools, calls_so_far=calls)
        searched = self._file_search(request, rng)
        if searched is not None:
            return searched
        coded = self._code(request)
        if coded is not None:
            return coded
        shelled = self._shell(request)
        if shelled is not None:
            return shelled
        k = int(self._option(request, "tool_calls", self.settings.tool_calls))
        wants_tool = request.tools and request.tool_choice != "none"
        if wants_tool and (request.tool_choice == "required" or request.calls_so_far < k):
            search = next((spec for spec in request.tools if spec.kind in SEARCH_KINDS), None)
            if search is not None and request.deferred and request.calls_so_far == 0 and not request.forced_tool:
                # The tools it would call are deferred: its first call searches for them (their names' words).
                query = " ".join(_words_of(spec.name) for spec in request.deferred[:2])
                return [(search, _pieces(json.dumps({"query": query})))]
            count = max(1, self.settings.parallel_calls) if request.parallel_tool_calls else 1
            forced = [spec for spec in request.tools if spec.prompt_name == request.forced_tool]
            callable_ = [spec for spec in request.tools if spec.kind not in SEARCH_KINDS] or request.tools
            # A preferred tool, else a shell-like one, so that an agent's calls really run something.
            preferred = [spec for spec in callable_ if spec.name in self.settings.prefer]
            pool = preferred or [spec for spec in callable_ if acts(spec)] or callable_
            chosen = forced[:1] * count if forced else [rng.choice(pool) for _ in range(count)]
            first = request.calls_so_far + 1
            return [(spec, _pieces(_call_payload(spec, rng, first + i))) for i, spec in enumerate(chosen)]
        n = max(1, int(self._option(request, "output_tokens", self.settings.output_tokens)))
        fmt = request.text_format.get("type")
        if fmt in ("json_object", "json_schema"):
            schema = request.text_format.get("schema") if fmt == "json_schema" else None
            if not isinstance(schema, dict):
                schema = {"type": "object"}
            return [(None, _pieces(json.dumps(example_for_schema(schema, rng))))]
        words = [rng.choice(WORDS) for _ in range(n)]
        pieces = [words[0].capitalize()] + [" " + word for word in words[1:]]
        pieces[-1] += "."
        return [(None, pieces)]

    def _file_search(
        self, request: GenerationRequest, rng: random.Random
    ) -> list[tuple[ToolSpec | str | None, list[str]]] | None:
        """With `file_search` offered, by the prompt's latest messages: a user's message is
        searched (its words as the query; `parallel_calls` searches when parallel calls are allowed); a search's
        results are answered with a sentence citing the first, `[1]`. None: the usual policy."""
        if self._decode is None:
            return None
        offered = request.tools if request.tool_choice != "none" else ()
        spec = next((spec for spec in offered if spec.kind == file_search.KIND), None)
        if spec is None:  # reading the prompt's tail costs a decode: only where file_search is offered
            return None
        if request.forced_tool is not None and (spec is None or request.forced_tool != spec.prompt_name):
            return None
        latest = _latest_messages(self._decode(list(request.prompt_tokens[-TAIL_TOKENS:])))
        if spec is not None and latest and latest[-1][0] == "user":
            count = max(1, self.settings.parallel_calls) if request.parallel_tool_calls else 1
            payload = json.dumps({"queries": file_search.sample_queries(latest[-1][1])})
            return [(spec, _pieces(payload)) for _ in range(count)]
        outputs: list[str] = []
        for role, content in reversed(latest):  # the outputs of the last step's calls
            if role != "tool":
                break
            outputs.append(content)
        if any(file_search.read_results(output) for output in outputs):
            n = max(1, int(self._option(request, "output_tokens", self.settings.output_tokens)))
            words = [rng.choice(WORDS) for _ in range(n)]
            return [(None, ["According", " to", " [1],", *(" " + word for word in words[:-1]), f" {words[-1]}."])]
        return None

    def _reading(self, request: GenerationRequest, kind: str) -> tuple[ToolSpec, list[tuple[str, str]]] | None:
        """The offered tool of `kind` and the prompt's latest messages, which the sim reads to call it (None: not
        offered, or another tool is forced). Reading the prompt's tail costs a decode: only where it is offered."""
        offered = request.tools if request.tool_choice != "none" else ()
        spec = next((spec for spec in offered if spec.kind == kind), None)
        if spec is None or self._decode is None:
            return None
        if request.forced_tool is not None and request.forced_tool != spec.prompt_name:
            return None
        return spec, _latest_messages(self._decode(list(request.prompt_tokens[-TAIL_TOKENS:])))

    def _code(self, request: GenerationRequest) -> list[tuple[ToolSpec | str | None, list[str]]] | None:
        """With `code_interpreter` offered, by the prompt's latest messages: a user's message gets a program
        (`sim_program`: the metadata's `sim_code` exactly, when set), a run's output an answer quoting its first
        line. None: the usual policy."""
        read = self._reading(request, code_interpreter.KIND)
        if read is None:
            return None
        spec, latest = read
        if latest and latest[-1][0] == "user":
            code = request.metadata.get("sim_code")
            program = code if isinstance(code, str) and code else sim_program(latest[-1][1])
            return [(spec, _pieces(json.dumps({"code": program})))]
        if latest and latest[-1][0] == "tool":
            first = next((line for line in latest[-1][1].splitlines() if line.strip()), "nothing")
            return [(None, _pieces(f"The code printed: {first.strip()}"))]
        return None

    def _shell(self, request: GenerationRequest) -> list[tuple[ToolSpec | str | None, list[str]]] | None:
        """With a hosted `shell` offered, by the prompt's latest messages: a user's message gets a call of harmless
        commands (the metadata's `sim_commands`, a JSON list of command lines, exactly when set; `sim_timeout_ms`
        and `sim_max_output_length` its limits), its output an answer quoting its first line. None: the usual
        policy."""
        read = self._reading(request, hosted_shell.KIND)
        if read is None:
            return None
        spec, latest = read
        if latest and latest[-1][0] == "user":
            arguments: dict[str, Any] = {"commands": _sim_commands(request.metadata.get("sim_commands"))}
            for name in ("timeout_ms", "max_output_length"):
                value = request.metadata.get(f"sim_{name}")
                if isinstance(value, str) and value.isdigit():
                    arguments[name] = int(value)
            return [(spec, _pieces(json.dumps(arguments)))]
        if latest and latest[-1][0] == "tool":
            first = next((line for line in latest[-1][1].splitlines() if line.strip()), "nothing")
            return [(None, _pieces(f"The command printed: {first.strip()}"))]
        return None

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        # The model's clock starts when the request reaches it, as an engine's does: the simulator's own
        # bookkeeping below (its prefix cache, its plan) is part of its time to first token, not added to it.
        received = time.perf_counter()
        self.stats.started += 1
        fault = parse_fault(request.metadata.get(FAULT_KEY))
        packed = pack(request.prompt_tokens)
        cached = self._cached_prefix(packed)
        ttft = self._option(request, "ttft_ms", self.settings.ttft_ms) / 1000.0
        tps = max(1e-3, self._option(request, "tps", self.settings.tps))
        limit = request.max_output_tokens
        rng = self._rng(request, packed)
        start = received + ttft
        emitted = thought = 0
        reason: Literal["stop", "length"] = "stop"
        try:
            if fault is not None and fault[1] == 0:
                await _fail(fault[0])
            if any(spec.grammar is not None for spec in request.tools):
                # Drawing from a grammar is CPU work (up to ~0.1 s for a long input): off the event loop.
                plan = await asyncio.to_thread(self._plan, request, rng)
            else:
                plan = self._plan(request, rng)
            last = sum(len(pieces) for _, pieces in plan) - 1
            if limit is not None:
                last = min(last, limit - 1)
            for spec, pieces in plan:
                if isinstance(spec, ToolSpec):
                    yield ToolCallStart(name=spec.name, kind=spec.kind, namespace=spec.namespace)
                for piece in pieces:
                    if limit is not None and emitted >= limit:
                        reason = "length"
                        break
                    if fault is not None and emitted == fault[1]:
                        await _fail(fault[0])
                    due = start + emitted / tps
                    # What a client measures, time to first token and the turn's end, on the exact clock; the tokens
                    # between on the loop's (a timerfd's few syscalls a wait would buy them nothing measured).
                    if emitted in (0, last):
                        await clock.until(due)
                    elif (delay := due - time.perf_counter()) > SLEEP_MIN_S:
                        await asyncio.sleep(delay)
                    emitted += 1
                    if spec == REASONING:
                        thought += 1
                        yield ReasoningDelta(text=piece)
                    else:
                        yield ToolCallDelta(text=piece) if spec is not None else TextDelta(text=piece)
                if reason == "length":
                    break
                if isinstance(spec, ToolSpec):
                    yield ToolCallEnd()
        except BaseException:  # cancelled (the client went away, a timeout), closed, or the fault above
            self.stats.stopped += 1
            self.stats.closed_at = time.perf_counter()
            raise
        self._remember(packed)
        self.stats.finished += 1
        yield Finished(reason=reason, output_tokens=emitted, cached_tokens=cached, reasoning_tokens=thought)


def acts(spec: ToolSpec) -> bool:
    """A tool that acts on the client's machine: a typed client tool, or a shell-like function."""
    return (spec.kind in BY_KIND and spec.kind not in SEARCH_KINDS) or command_field(spec) is not None


def _latest_messages(text: str) -> list[tuple[str, str]]:
    """The (role, content) of the whole ChatML messages in a prompt's tail, oldest first; the generation prompt
    (the open assistant message it ends with) and a message cut at the tail's start are left out."""
    segments = text.split("<|im_start|>")[1:]
    out: list[tuple[str, str]] = []
    for segment in segments:
        role, _, rest = segment.partition("\n")
        content, closed, _ = rest.partition("<|im_end|>")
        if closed:
            out.append((role.strip(), content))
    return out


def _words_of(name: str) -> str:
    """A tool name's words: `get_weather` → "get weather", `sendEmail` → "send Email"."""
    return " ".join(re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", name)) or name


async def _fail(kind: str) -> None:
    if kind == "stall":
        await asyncio.Event().wait()  # never set: only a timeout or a cancellation ends it
    raise SimFault("simulated backend failure (hotloop_sim_fault)")


def _sim_commands(raw: object) -> list[str]:
    """`metadata["sim_commands"]` (a JSON list of command lines) when it is one, else harmless commands."""
    if isinstance(raw, str):
        try:
            commands = json.loads(raw)
        except ValueError:
            commands = None
        if isinstance(commands, list) and commands and all(isinstance(one, str) for one in commands):
            return commands
    return list(SIM_COMMANDS)


def _pieces(text: str, size: int = 4) -> list[str]:
    """Split text into token-sized pieces (the simulator's output tokens)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _call_payload(spec: ToolSpec, rng: random.Random, number: int) -> str:
    """A call's arguments; `number` counts the calls of the conversation (1-based) and names a shell call's marker."""
    if spec.freeform and spec.grammar is not None:  # a text its grammar accepts (tools/grammar.py)
        matcher = compile_grammar(spec.grammar)
        if isinstance(matcher, str):
            return f"simulated input for {spec.name}"
        # A patch that creates hotloop_sim_<n>.txt when the grammar takes one (Codex's apply_patch does): the edit
        # really happens, as the typed apply_patch's does; else any text the grammar accepts.
        patch = ADD_FILE.format(n=number)
        return patch if matches(matcher, patch) else sample(matcher, rng)
    if spec.freeform:
        return f"simulated input for {spec.name}"
    if spec.kind == multi_agent.KIND:
        return json.dumps(multi_agent.sample(spec.name, number))  # type: ignore[arg-type]
    typed = BY_KIND.get(spec.kind)
    if typed is not None:  # a typed client tool: a well-formed action (hotloop/tools/)
        return json.dumps(typed.sample(number, rng))
    field = command_field(spec)
    if field is not None and spec.parameters is not None:
        return json.dumps(shell_arguments(spec.parameters, field, number, rng))
    return json.dumps(example_for_schema(spec.parameters or {"type": "object", "properties": {}}, rng))
