"""What the rendering tests share (test_render.py, test_tokens.py, test_harmony.py): tool specs, hypothesis
strategies of conversations, and the check that a chain's turns render like full renders."""

from __future__ import annotations

import itertools
import json
from typing import Any, Literal

from hypothesis import strategies as st

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
