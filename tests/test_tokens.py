"""Incremental rendering (chat/incremental.py, pipeline/prompt.py): a turn tokenizes only its new input, and the
result is always exactly the full render."""

from __future__ import annotations

import itertools
import threading
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import RunningServer
from examples_support import examples
from hotloop.backends.local.gguf import smollm2_chat_format
from hotloop.chat.format import ChatFormat
from hotloop.chat.incremental import INLINE, Encoder, PromptRenderer, TokenCache, probe_incremental, run_inline
from hotloop.chat.messages import chat_messages, item_messages, system_message
from hotloop.chat.reasoning import ReasoningPrompt, ReplayPolicy, replay_from
from hotloop.models import Model
from hotloop.pipeline import prepare as turn_module
from hotloop.wire.items import ContextItem, FunctionCall, InputText, Message, Reasoning, ReasoningText
from render_support import TOOLS, check_turns, conversations, thinking_conversations
from wsutil import WS, final


@pytest.fixture(scope="module")
def chat() -> ChatFormat:
    fmt = smollm2_chat_format()
    assert probe_incremental(fmt), "SmolLM2's ChatML template is per-message and must be detected as such"
    return fmt


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conversation=conversations(), data=st.data())
def test_chain_of_extends_equals_full_render_every_turn(
    chat: ChatFormat, conversation: Any, data: st.DataObject
) -> None:
    """Random conversations cut into random turns: each turn's incremental prompt equals a full render of it."""
    items: list[ContextItem] = [stored for _, stored in conversation]
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(items) - 1)), max_size=5)))
    instructions = data.draw(st.none() | st.text(max_size=20))
    tools = data.draw(st.sampled_from([(), tuple(TOOLS)]))
    system = system_message(instructions, tools)
    renderer = PromptRenderer(TokenCache(1 << 20), encoder=INLINE)
    bounds = [0, *cuts, len(items)]
    state = None
    for start, end in itertools.pairwise(bounds):
        if state is None:
            prompt, state = run_inline(renderer.full(chat, system, item_messages(items[:end])[1]))
        else:
            replaced, messages = item_messages(items[start:end], after=state.last)
            result = run_inline(renderer.extend(chat, state, replaced, messages))
            if result is None:  # an assistant item merging into the conversation's first message
                assert state.last is state.base
                prompt, state = run_inline(renderer.full(chat, system, item_messages(items[:end])[1]))
            else:
                prompt, state = result
        assert state is not None
        assert prompt.tolist() == chat.tokens(chat_messages(instructions, tools, items[:end])), (start, end)
    assert renderer.stats.fallbacks == 0


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=thinking_conversations(), data=st.data())
@pytest.mark.parametrize("replay", ["chain", "all", "none"])
def test_reasoning_renders_incrementally_like_the_full_render_under_each_replay_policy(
    chat: ChatFormat, replay: ReplayPolicy, items: list[ContextItem], data: st.DataObject
) -> None:
    """`render_prompt` across random turns of a reasoning model's conversation: every turn's prompt equals a full
    render of the turn's items with the policy applied to all of them (`chain`: only the reasoning after the last
    user message), whether it extended the chain's state or started again."""
    model = Model("m", cast(Any, None), chat, 1 << 20, reasoning=ReasoningPrompt(form="think", replay=replay))

    def full(instructions: str | None, tools: Any, turn: list[ContextItem]) -> list[int]:
        return chat.tokens(chat_messages(instructions, tools, turn, replay_from(replay, turn)))

    check_turns(model, items, data, full)


def test_a_think_block_and_the_answer_after_it_render_as_the_model_wrote_them(chat: ChatFormat) -> None:
    thought = Reasoning(summary=[], id="rs_1", content=[ReasoningText(text="\nweather needs a tool\n")])
    call = FunctionCall(call_id="c1", name="get_weather", arguments='{"city": "Oslo"}', id="fc_1", status="completed")
    user = Message(role="user", content=[InputText(text="Weather?")], id="msg_1", status="completed")
    rendered = chat_messages(None, [], [user, thought, call], think_from=0)
    call_text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert rendered[-1] == {"role": "assistant", "content": "<think>\nweather needs a tool\n</think>\n\n" + call_text}
    assert chat_messages(None, [], [user, thought, call])[-1]["content"] == call_text  # no think_from: no reasoning


def test_token_cache_serves_resent_history_and_is_bounded(chat: ChatFormat) -> None:
    history = [{"role": "user", "content": f"message {i} " + "word " * 50} for i in range(20)]
    renderer = PromptRenderer(TokenCache(1 << 20), encoder=INLINE)
    first, _ = run_inline(renderer.full(chat, None, history))
    assert renderer.stats.cache_misses == 20 and renderer.stats.cache_hits == 0
    again, _ = run_inline(renderer.full(chat, None, [*history, {"role": "user", "content": "new"}]))
    # Every message of the resent history comes from the cache, the first one (rendered alone) included.
    assert renderer.stats.cache_hits == 20 and renderer.stats.cache_misses == 21
    assert first.tolist() == chat.tokens(history) and again[: len(first) - 4] == first[:-4]
    small = TokenCache(2_000)
    bounded = PromptRenderer(small, encoder=INLINE)
    run_inline(bounded.full(chat, None, history))
    assert small.bytes <= 2_000 and 0 < len(small) < 20  # LRU eviction keeps it under its byte bound


class WorkCounter:
    """Counts per-turn work that grew with the history before the pipeline was incremental: characters the
    tokenizer encodes, items validated against the chain, and text bytes the safety classifiers scan."""

    def __init__(self, server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
        service = server.service
        tokenizer = service.models.resolve("hotloop-sim").chat.tokenizer
        encode, validate = tokenizer.encode, turn_module.check_new_items
        self.chars = 0
        self.items_validated = 0
        self._safety = service.safety
        self._scanned_before = service.safety.bytes_scanned

        def counting_encode(text: str) -> list[int]:
            self.chars += len(text)
            return encode(text)

        def counting_validate(items: Any, *args: Any, **kwargs: Any) -> Any:
            self.items_validated += len(items)
            return validate(items, *args, **kwargs)

        monkeypatch.setattr(tokenizer, "encode", counting_encode)
        monkeypatch.setattr(turn_module, "check_new_items", counting_validate)

    @property
    def bytes_scanned(self) -> int:
        scanned: int = self._safety.bytes_scanned - self._scanned_before
        return scanned


BIG = "src/hotloop/pipeline/module_{i}.py: def function_{i}(argument): return argument * {i}\n" * 40  # ~3.5 KB
TOOL = {
    "type": "function",
    "name": "read_file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
}


def _loop(ws: WS, turns: int, store: bool) -> dict[str, Any]:
    meta = {"sim_tool_calls": "1000", "sim_output_tokens": "8"}
    response = final(ws.turn(input="start", tools=[TOOL], store=store, metadata=meta))
    for i in range(turns):
        call = response["output"][-1]
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": BIG.format(i=i)}
        response = final(
            ws.turn(input=[output], previous_response_id=response["id"], tools=[TOOL], store=store, metadata=meta)
        )
    return response


def test_websocket_continuation_encodes_only_new_input(server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    with WS(server.ws_url) as ws:
        response = _loop(ws, 12, store=False)
        assert response["usage"]["input_tokens"] > 10_000
        counter = WorkCounter(server, monkeypatch)
        call = response["output"][-1]
        small = {"type": "function_call_output", "call_id": call["call_id"], "output": "ok"}
        meta = {"sim_tool_calls": "1000", "sim_output_tokens": "8"}
        last = final(
            ws.turn(input=[small], previous_response_id=response["id"], tools=[TOOL], store=False, metadata=meta)
        )
    assert last["usage"]["input_tokens"] > response["usage"]["input_tokens"]
    # The new work is the parent's output (one call) and the new output: a few hundred characters, not ~45 KB.
    assert counter.chars < 1_500, counter.chars
    assert counter.items_validated == 1  # the one new function_call_output
    assert counter.bytes_scanned < 100, counter.bytes_scanned  # "ok", not the ~45 KB of earlier tool outputs


def test_http_chain_continuation_encodes_only_new_input(server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    client = server.client()
    meta = {"sim_tool_calls": "1000", "sim_output_tokens": "8"}
    response = client.responses.create(model="hotloop-sim", input="start", tools=[TOOL], metadata=meta)  # type: ignore[list-item]
    for i in range(8):
        call = response.output[-1]
        output = {"type": "function_call_output", "call_id": call.call_id, "output": BIG.format(i=i)}  # type: ignore[union-attr]
        response = client.responses.create(
            model="hotloop-sim",
            input=[output],
            previous_response_id=response.id,
            tools=[TOOL],
            metadata=meta,  # type: ignore[list-item]
        )
    counter = WorkCounter(server, monkeypatch)
    call = response.output[-1]
    small = {"type": "function_call_output", "call_id": call.call_id, "output": "ok"}  # type: ignore[union-attr]
    client.responses.create(
        model="hotloop-sim", input=[small], previous_response_id=response.id, tools=[TOOL], metadata=meta
    )  # type: ignore[list-item]
    assert counter.chars < 1_500, counter.chars


def test_http_full_resend_reuses_tokens_of_identical_items(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": BIG.format(i=i)} for i in range(10)]
    with server.http() as http:
        assert http.post("/responses", json={"input": history, "store": False}).status_code == 200
        counter = WorkCounter(server, monkeypatch)
        history.append({"role": "user", "content": "one more"})
        reply = http.post("/responses", json={"input": history, "store": False})
        assert reply.status_code == 200
    # Only the new message is encoded: the other ten, the first one (the render base) included, come from the cache.
    assert counter.chars < 200, counter.chars


def test_a_prompt_that_cannot_fit_is_refused_before_it_is_tokenized(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """smollm2-135m's window here is 2048 tokens: 300k characters cannot fit whatever they are, and nothing of them
    reaches the tokenizer (its encode would otherwise take seconds for megabytes)."""
    counter = WorkCounter(server, monkeypatch)
    with server.http() as http:
        reply = http.post("/responses", json={"model": "smollm2-135m", "input": "x" * 300_000, "store": False})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "input"
    assert "at least" in error["message"]
    assert counter.chars == 0


async def test_long_texts_are_encoded_on_a_worker_thread_with_the_same_ids(chat: ChatFormat) -> None:
    """Past `offload_chars` the encode runs in the executor (off the event loop); the prompt is the same."""
    history = [
        {"role": "system", "content": "Tools: none."},
        {"role": "user", "content": BIG.format(i=1)},
        {"role": "tool", "content": BIG.format(i=2) * 3},
    ]
    threads: set[str] = set()
    encode = chat.tokenizer.encode

    def recording(text: str) -> list[int]:
        threads.add(threading.current_thread().name)
        return encode(text)

    offloading = PromptRenderer(TokenCache(1 << 20), encoder=Encoder(offload_chars=1_000))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chat.tokenizer, "encode", recording)
        prompt, state = await offloading.full(chat, history[0], history[1:2])
        assert state is not None
        extended = await offloading.extend(chat, state, None, history[2:])
    assert extended is not None
    assert extended[0].tolist() == chat.tokens(history)
    assert prompt.tolist() == chat.tokens(history[:2])
    assert offloading.encoder.offloaded >= 2
    assert threading.current_thread().name not in threads  # every encode ran on a worker thread


CHATML = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"


def _format(template: str) -> ChatFormat:
    return ChatFormat(template, smollm2_chat_format().tokenizer, eos_token="<|im_end|>")


@pytest.mark.parametrize(
    "template",
    [
        # content transformed, tested, or bound to a variable: the template may do anything with it
        CHATML.replace("m['content']", "m['content'] | trim"),
        CHATML.replace("{{ '<|im_start|>'", "{% if m['content'] %}x{% endif %}{{ '<|im_start|>'"),
        "{% for m in messages %}{% set c = m.content %}{{ '<|im_start|>' + m.role + '\\n' + c }}<|im_end|>\n"
        "{% endfor %}",
        CHATML.replace("m['content']", "m['content'].split('</think>')[-1]"),
    ],
)
def test_no_wrappers_where_the_template_does_more_than_output_the_content(template: str) -> None:
    assert _format(template).learn_wrappers() == {}


def test_wrappers_render_segments_as_jinja_does(chat: ChatFormat) -> None:
    """SmolLM2's template only concatenates `content`: its segments skip Jinja and give the same text."""
    assert set(chat.wrappers) == {"system", "user", "assistant", "tool"}
    base = {"role": "user", "content": "first"}
    base_text = chat.render_text([base], add_generation_prompt=False)
    messages = [{"role": "tool", "content": " 42 \n"}, {"role": "assistant", "content": "<tool_call>{}</tool_call>"}]
    jinja = chat.render_text([base, *messages], add_generation_prompt=False)[len(base_text) :]
    assert chat.segment_text(base, base_text, messages) == jinja
    plain = _format(CHATML)
    assert plain.learn_wrappers()["user"] == ("<|im_start|>user\n", "<|im_end|>\n")
