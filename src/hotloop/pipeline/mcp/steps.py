"""The in-server steps of a turn with MCP tools (pipeline/turn.py runs them): approved calls first, then after
each generation that called MCP tools, the calls (calls.py) and the next generation's prompt, which extends the
rendered state with the items made since it was rendered (the calls and their outputs), as a continuation's does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from hotloop.backends.base import GenerationRequest
from hotloop.chat.compacted import count_calls
from hotloop.chat.incremental import PromptRenderer, Rendered
from hotloop.chat.render import PromptBase
from hotloop.chat.specs import ToolSpec
from hotloop.errors import HotloopError
from hotloop.mcp import Endpoint
from hotloop.models import Model
from hotloop.pipeline.generate import Outcome
from hotloop.pipeline.mcp.calls import Calls
from hotloop.pipeline.prompt import render_prompt
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.items import ContextItem, McpApprovalRequest, McpCall, McpListTools
from hotloop.wire.request import CreateRequest


@dataclass(frozen=True, slots=True)
class McpTurn:
    """What a turn with MCP servers carries from its preparation (pipeline/prepare.py)."""

    endpoints: dict[str, Endpoint]  # by server label
    listed: list[McpListTools]  # the lists this turn made: its first output items
    approved: list[McpCall]  # calls approved by this create's input, run before it generates
    context: Sequence[ContextItem] = ()  # the items before this turn's output (a chat API's prompt)


@dataclass(slots=True)
class Steps:
    """One response's in-server steps: its calls so far and where its prompt's rendering stands."""

    renderer: PromptRenderer
    model: Model
    request: CreateRequest
    specs: Sequence[ToolSpec]
    calls: Calls
    context: list[ContextItem]
    rendered: Rendered | None
    rendered_output: int  # how many of the output items `rendered` holds
    overhead_s: float = 0.0  # hotloop's own time in the steps: dispatch and prompt extension
    calls_s: float = 0.0  # the calls' time, the MCP servers' own included

    @staticmethod
    def asked(builder: ResponseBuilder) -> bool:
        """The response holds a call waiting for approval: it ends here."""
        return any(isinstance(item, McpApprovalRequest) for item in builder.response.output)

    async def next_generation(
        self, builder: ResponseBuilder, generation: GenerationRequest, used: int
    ) -> GenerationRequest | Outcome:
        """The next generation's request: its prompt extended with the output made since the last render; past
        the window, the response fails as a too-long input does. Past the call limit, MCP tools are not offered.
        Its `calls_so_far` counts the new calls as the context does: a call an approval ran is its request's, which
        is counted already. `max_output_tokens` bounds the response: the generations so far `used` that many of
        it; none left, the response ends `incomplete` as a generation cut short does."""
        limit = self.request.max_output_tokens
        if limit is not None and used >= limit:
            return Outcome(status="incomplete", reason="max_output_tokens")
        start = time.perf_counter()
        output = builder.response.output
        new = output[self.rendered_output :]
        self.context.extend(new)
        base = PromptBase(self.context, self.rendered, self.model.chat, new)
        try:
            prompt = await render_prompt(self.renderer, self.model, self.request, self.specs, base, ())
        except HotloopError as exc:
            return Outcome.failed(exc.code, exc.message)
        self.rendered, self.rendered_output = prompt.state, len(output)
        tools = generation.tools
        if self.calls.exhausted:
            tools = [spec for spec in tools if spec.kind != "mcp"]
        self.overhead_s += time.perf_counter() - start
        return msgspec.structs.replace(
            generation,
            prompt_tokens=prompt.tokens,
            items=prompt.items,
            calls_so_far=count_calls(new, generation.calls_so_far),
            max_output_tokens=None if limit is None else limit - used,
            tools=tools,
            # `required` and a forced tool ask for the first step's call: then the model may answer.
            tool_choice=("auto" if generation.tool_choice == "required" else generation.tool_choice)
            if tools
            else "none",
            forced_tool=None,
        )
