"""What the rendering tests share (test_render.py, test_tokens.py, test_harmony.py, test_render_mcp.py): tool specs,
hypothesis strategies of conversations, the check that a chain's turns render like full renders, and a harmony
tokenizer."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, Literal

from hypothesis import strategies as st

from hotloop.backends.local.bpe import _cache_path
from hotloop.backends.local.gguf import smollm2_chat_format, smollm2_path
from hotloop.backends.toolcalls.harmony import MARKERS
from hotloop.chat.incremental import INLINE, PromptRenderer, TokenCache, run_inline
from hotloop.chat.render import PromptBase
from hotloop.chat.specs import ToolSpec
from hotloop.models import Model
from hotloop.pipeline.prompt import render_prompt
from hotloop.wire.items import (
    ContextItem,
    FunctionCall,
    FunctionCallOutput,
    InputText,
    McpApprovalRequest,
    McpApprovalResponse,
    McpCall,
    McpListedTool,
    McpListTools,
    Message,
    OutputText,
    Reasoning,
    ReasoningText,
)
from hotloop.wire.request import CreateRequest

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
PATCH = ToolSpec(name="apply_patch", kind="custom", description="Apply a patch.")


# -- conversations (hypothesis) -----------------------------------------------------------------------------------

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
TOOLS = [WEATHER, ToolSpec(name="search", parameters={"type": "object", "properties": {"q": {"type": "string"}}})]


@st.composite
def conversations(draw: st.DrawFn) -> list[tuple[dict[str, Any], ContextItem]]:
    """(replayed raw item, the item as the server keeps it) pairs: user/assistant turns and tool call rounds."""
    out: list[tuple[dict[str, Any], ContextItem]] = []
    for step in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["user", "assistant", "calls", "developer"]))
        if kind in ("user", "developer"):
            role: Literal["user", "developer"] = "user" if kind == "user" else "developer"
            text = draw(TEXT)
            raw: dict[str, Any] = {"role": role, "content": text}
            out.append((raw, Message(role=role, content=[InputText(text=text)], id=f"msg_{step}", status="completed")))
        elif kind == "assistant":
            text = draw(TEXT)
            stored = Message(
                role="assistant",
                content=[OutputText(text=text, annotations=[], logprobs=[])],
                id=f"msg_{step}",
                status="completed",
            )
            out.append(({"role": "assistant", "content": text}, stored))
        else:
            calls = draw(st.integers(1, 3))
            args = [
                json.dumps(draw(st.dictionaries(st.sampled_from(["city", "q", "n"]), st.integers() | TEXT, max_size=2)))
                for _ in range(calls)
            ]
            names = [draw(st.sampled_from(["get_weather", "search"])) for _ in range(calls)]
            for index in range(calls):
                call_id = f"call_{step}_{index}"
                raw = {"type": "function_call", "call_id": call_id, "name": names[index], "arguments": args[index]}
                stored_call = FunctionCall(
                    call_id=call_id,
                    name=names[index],
                    arguments=args[index],
                    id=f"fc_{step}_{index}",
                    status="completed",
                )
                out.append((raw, stored_call))
            for index in range(calls):
                call_id = f"call_{step}_{index}"
                output = draw(TEXT)
                raw = {"type": "function_call_output", "call_id": call_id, "output": output}
                out.append((raw, FunctionCallOutput(call_id=call_id, output=output, id=f"fco_{step}_{index}")))
    return out


@st.composite
def thinking_conversations(draw: st.DrawFn) -> list[ContextItem]:
    """The conversations above with a model's reasoning before some of its answers and calls (some empty)."""
    out: list[ContextItem] = []
    for step, (_, item) in enumerate(draw(conversations())):
        starts_turn = isinstance(item, FunctionCall | Message) and getattr(item, "role", "assistant") == "assistant"
        if starts_turn and not isinstance(out[-1:] and out[-1], FunctionCall) and draw(st.booleans()):
            text = draw(st.text(max_size=30))
            out.append(Reasoning(summary=[], id=f"rs_{step}", content=[ReasoningText(text=text)] if text else []))
        out.append(item)
    return out


def check_turns(model: Model, items: list[ContextItem], data: st.DataObject, full: Any) -> None:
    """`render_prompt` over random cuts of `items` into turns: each turn's prompt is `full(instructions, tools,
    the turn's items)`, whether it extended the chain's rendered state or rendered again."""
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(items) - 1)), max_size=5)))
    request = CreateRequest(instructions=data.draw(st.none() | st.text(max_size=20)))
    tools = data.draw(st.sampled_from([(), tuple(TOOLS)]))
    renderer = PromptRenderer(TokenCache(1 << 20), encoder=INLINE)
    base: PromptBase | None = None
    for start, end in itertools.pairwise([0, *cuts, len(items)]):
        prompt = run_inline(render_prompt(renderer, model, request, tools, base, items[start:end]))
        turn = items[:end]
        assert prompt.tokens.tolist() == full(request.instructions, tools, turn), (start, end)
        base = PromptBase(turn, prompt.state, model.chat)
    assert renderer.stats.fallbacks == 0


def harmony_tokenizer_file(directory: Path) -> Path:
    """SmolLM2's tokenizer.json with harmony's markers added as special tokens (each one id, as gpt-oss's own
    tokenizer has them), written into `directory`."""
    smollm2_chat_format()  # builds (and caches) SmolLM2's tokenizer.json from the GGUF
    config = json.loads(_cache_path(smollm2_path()).read_text())
    first = max(len(config["model"]["vocab"]), 1 + max(token["id"] for token in config["added_tokens"]))
    for offset, marker in enumerate(MARKERS):
        config["added_tokens"].append(
            {"id": first + offset, "content": marker, "special": True, "normalized": False}
            | {"single_word": False, "lstrip": False, "rstrip": False}
        )
    path = directory / "tokenizer.json"
    path.write_text(json.dumps(config))
    return path


# -- MCP items (chat/hosted.py) -----------------------------------------------------------------------------------

DOCS = ToolSpec(
    name="search",
    kind="mcp",
    description="Search the docs.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    namespace="docs",
)
MCP_TOOLS = [WEATHER, DOCS]


@st.composite
def mcp_conversations(draw: st.DrawFn) -> list[ContextItem]:
    """Conversations (as stored) in which the model also calls an MCP server's tool: calls that ran (an output or
    an error), listings, and approval requests answered by a refusal or by the call that ran."""
    out: list[ContextItem] = [stored for _, stored in draw(conversations())]
    for step in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["call", "failed", "listing", "refused", "approved", "user"]))
        arguments = json.dumps({"q": draw(TEXT)})
        if kind == "user":
            out.append(Message(role="user", content=[InputText(text=draw(TEXT))], id=f"msg_m{step}"))
        elif kind == "listing":
            tools = [McpListedTool(name="search", input_schema=DOCS.parameters or {}, description="Search.")]
            out.append(McpListTools(id=f"mcpl_{step}", server_label="docs", tools=tools))
        elif kind in ("call", "failed"):
            error = {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": draw(TEXT)}]}
            out.append(
                McpCall(
                    id=f"mcp_{step}",
                    server_label="docs",
                    name="search",
                    arguments=arguments,
                    output=draw(TEXT) if kind == "call" else None,
                    error=error if kind == "failed" else None,
                    status="completed" if kind == "call" else "failed",
                )
            )
        else:
            request = f"mcpr_{step}"
            out.append(McpApprovalRequest(id=request, server_label="docs", name="search", arguments=arguments))
            approve = kind == "approved"
            reason = draw(st.none() | TEXT) if not approve else None
            out.append(
                McpApprovalResponse(approval_request_id=request, approve=approve, reason=reason, id=f"mcpa_{step}")
            )
            if approve:
                out.append(
                    McpCall(
                        id=f"mcp_{step}",
                        server_label="docs",
                        name="search",
                        arguments=arguments,
                        output=draw(TEXT),
                        status="completed",
                        approval_request_id=request,
                    )
                )
    return out
