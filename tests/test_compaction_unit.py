"""pipeline/compaction.py without a server: the threshold a request sets (`threshold`), whether a turn crosses it
(`crosses`), the plan of a compacting turn (`plan`, where its new input starts), and `run` on a built service
(hotloop-sim): the compacted context lands below half the threshold in one step."""

from __future__ import annotations

from typing import Any, cast

import msgspec
import pytest

from hotloop.chat.compacted import SUMMARY_HEADER, carried, carries, kept_tail, kept_users
from hotloop.models import Model
from hotloop.pipeline import compaction
from hotloop.pipeline.compaction import COMPACTED_SHARE, DEFAULT_SHARE, SUMMARY_MAX_TOKENS, crosses, plan, threshold
from hotloop.pipeline.service import Service
from hotloop.sealing import seal
from hotloop.wire.items import (
    Compaction,
    ContextItem,
    CustomToolCall,
    FunctionCall,
    FunctionCallOutput,
    InputText,
    Message,
    OutputText,
    Reasoning,
)
from hotloop.wire.request import CreateRequest

pytestmark = pytest.mark.fast

SIM = "hotloop-sim"
WINDOW = 10_000


def model(takes_messages: bool = False, window: int = WINDOW) -> Model:
    """A model as `threshold` and `crosses` see it: its window and whether it takes messages."""
    return Model("m", cast(Any, None), cast(Any, None), window, takes_messages=takes_messages)


def request(entries: list[dict[str, Any]] | None) -> CreateRequest:
    return CreateRequest(model=SIM, context_management=entries)


def user(text: str) -> Message:
    return Message(role="user", content=[InputText(text=text)])


def assistant(text: str) -> Message:
    return Message(role="assistant", content=[OutputText(text=text)])


def call(call_id: str) -> FunctionCall:
    return FunctionCall(call_id=call_id, name="shell", arguments="{}")


def output(call_id: str, text: str = "ok") -> FunctionCallOutput:
    return FunctionCallOutput(call_id=call_id, output=text)


# -- threshold / crosses ------------------------------------------------------------------------------------------


def test_threshold() -> None:
    assert threshold(request(None), model()) is None
    assert threshold(request([]), model()) is None
    assert threshold(request([{"type": "compaction", "compact_threshold": 2000}]), model()) == 2000
    default = int(WINDOW * DEFAULT_SHARE)
    assert threshold(request([{"type": "compaction"}]), model()) == default
    assert threshold(request([{"type": "compaction", "compact_threshold": None}]), model()) == default


def test_crosses_a_token_model_by_its_prompt() -> None:
    compacts = request([{"type": "compaction", "compact_threshold": 2000}])
    assert crosses(compacts, model(), 2000, [], 0) == 2000
    assert crosses(compacts, model(), 5000, [], 0) == 2000
    assert crosses(compacts, model(), 1999, [], 10**6) is None  # the parent's usage is not a token model's measure
    assert crosses(request(None), model(), 10**6, [], 0) is None  # without context_management: never


def test_crosses_a_chat_model_by_its_parent_and_its_new_input() -> None:
    """A model that takes messages has no prompt to count: the parent's tokens plus its new input's characters / 4
    (only what follows the model's last output item among the request's own items)."""
    compacts = request([{"type": "compaction", "compact_threshold": 1000}])
    chat = model(takes_messages=True)
    big = user("x" * 4000)  # some 1000 tokens by characters / 4
    assert crosses(compacts, chat, 0, [big], 0) == 1000
    hi = len(msgspec.json.encode(user("hi"))) // 4
    assert crosses(compacts, chat, 0, [user("hi")], 999 - hi) is None
    assert crosses(compacts, chat, 0, [user("hi")], 1000 - hi) == 1000
    assert crosses(compacts, chat, 10**6, [], 0) is None  # the prompt length is not its measure
    assert crosses(compacts, chat, 0, [big, assistant("seen"), user("hi")], 0) is None  # `big` was answered


# -- plan ---------------------------------------------------------------------------------------------------------


def test_plan_splits_after_the_models_last_output() -> None:
    context: list[ContextItem] = [user("go"), assistant("calling"), call("a"), output("a"), user("and?")]
    planned = plan(2000, context, calls=3)
    assert (planned.threshold, planned.calls) == (2000, 3)
    assert list(planned.history) == context[:3] and list(planned.new_items) == context[3:]


@pytest.mark.parametrize(
    ("context", "split"),
    [
        ([user("a"), user("b")], 0),  # nothing the model said: all of it is new input
        ([user("a"), assistant("b")], 2),  # ends with the model's output: no new input
        ([user("a"), Reasoning(summary=[]), user("b")], 2),  # reasoning is the model's
        ([user("a"), CustomToolCall(call_id="k", name="p", input="x"), user("b")], 2),
        ([Message(role="system", content=[InputText(text="s")]), user("b")], 0),  # a system message is input
        ([user("a"), Compaction(encrypted_content="from /responses/compact"), user("b")], 2),
    ],
)
def test_new_input_starts_after_the_last_output_item(context: list[ContextItem], split: int) -> None:
    planned = plan(2000, context, calls=0)
    assert list(planned.history) == context[:split] and list(planned.new_items) == context[split:]


def test_plan_reads_the_context_from_its_latest_compaction() -> None:
    secret = b"k" * 32
    carrying = Compaction(encrypted_content=seal(carried("Found it.", [user("task")], [user("tail")], 2), secret))
    planned = plan(2000, [user("before"), carrying, assistant("done"), user("next")], calls=2)
    summary = Message(role="user", content=[InputText(text=f"{SUMMARY_HEADER}\nFound it.")])
    assert list(planned.history) == [user("task"), summary, user("tail"), assistant("done")]
    assert list(planned.new_items) == [user("next")]


# -- run: the compacted context below half the threshold, in one step ---------------------------------------------


@pytest.fixture
def service(sim_service: Service) -> Service:
    return sim_service


def words(count: int) -> str:
    """Text of about `count` tokens."""
    vocabulary = ["the", "tests", "fail", "in", "parse", "when", "input", "is", "empty"]
    return " ".join(vocabulary[n % len(vocabulary)] for n in range(count))


def digits(count: int) -> str:
    """Text of `count` characters and as many tokens (hotloop-sim's tokenizer: a digit a token)."""
    return "9" * count


async def compact(service: Service, context: list[ContextItem], limit: int, summary: int = 40) -> compaction.Compacted:
    body = {"model": SIM, "metadata": {"sim_output_tokens": str(summary)}}
    create = msgspec.convert(body, CreateRequest)
    sim = service.models.resolve(SIM)
    return await compaction.run(service, sim, create, (), plan(limit, context, calls=0), "resp_1", "http")


async def test_a_small_context_keeps_its_users_and_tail(service: Service) -> None:
    context: list[ContextItem] = [user("Fix the bug."), assistant("Looking."), call("a"), output("a"), user("Go on.")]
    done = await compact(service, context, 2000)
    planned = plan(2000, context, calls=0)
    body = carries(done.item)
    assert body is not None and body.summary
    assert body.users == kept_users(planned.history, budget_chars=2000) == [user("Fix the bug.")]
    assert body.tail == kept_tail(planned.history, planned.new_items) == [call("a"), output("a"), user("Go on.")]
    assert 0 < len(done.prompt) < 2000 * COMPACTED_SHARE
    assert done.usage.output_tokens == 40 and done.rendered is not None


async def test_a_new_input_past_the_bound_is_left_to_the_summary(service: Service) -> None:
    """The measured case: threshold 2 000, a first message of 4 000 words, kept as the tail it would land at
    4 000 tokens; the summary covers it (it was in the summary's prompt)."""
    done = await compact(service, [user(words(4000))], 2000)
    body = carries(done.item)
    assert body is not None and body.users == [] and body.tail == []
    assert len(done.prompt) < 1000
    assert done.usage.input_tokens > 4000  # the summary read the message


async def test_a_call_and_its_large_output_leave_together(service: Service) -> None:
    """A tool output too large to keep goes to the summary with the call it answers (a call without its output,
    or an output without its call, is refused by a chat API); the small items of the tail stay."""
    context: list[ContextItem] = [
        user("Fix the bug."),
        call("small"),
        call("big"),
        output("small", "a.py"),
        output("big", words(3000)),
        user("Now fix it."),
    ]
    done = await compact(service, context, 2000)
    body = carries(done.item)
    assert body is not None
    assert body.users == [user("Fix the bug.")]
    assert body.tail == [call("small"), output("small", "a.py"), user("Now fix it.")]  # in their order
    assert len(done.prompt) < 1000


async def test_kept_users_past_the_bound_are_shed_largest_first(service: Service) -> None:
    """Users within the character budget (the threshold) can still be more tokens than the bound."""
    large, medium, small = user(digits(900)), user(digits(600)), user("Use Python 3.11.")
    history: list[ContextItem] = [small, assistant("ok"), large, assistant("ok"), medium, assistant("ok")]
    planned = plan(2000, [*history, user("Go.")], calls=0)
    assert kept_users(planned.history, budget_chars=2000) == [small, large, medium]  # all within the budget
    done = await compact(service, [*history, user("Go.")], 2000)
    body = carries(done.item)
    assert body is not None and body.tail == [user("Go.")]
    assert body.users == [small, medium]
    assert len(done.prompt) < 1000


async def test_the_summary_is_bounded_by_a_quarter_of_the_threshold(service: Service) -> None:
    done = await compact(service, [user(words(1500))], 1000, summary=2000)
    assert done.usage.output_tokens == 250
    big = await compact(service, [user(words(1500))], 100_000, summary=2000)
    assert big.usage.output_tokens == SUMMARY_MAX_TOKENS


async def test_a_chat_model_is_measured_by_characters(service: Service) -> None:
    """A model that takes messages gets items, no prompt; what it keeps is measured at characters / 4."""
    sim = service.models.resolve(SIM)
    chat = Model("chat", sim.backend, sim.chat, WINDOW, takes_messages=True)
    context: list[ContextItem] = [user("Fix the bug."), assistant("ok"), user("x" * 8000)]  # ~2 000 "tokens"
    create = msgspec.convert({"model": SIM, "metadata": {"sim_output_tokens": "20"}}, CreateRequest)
    done = await compaction.run(service, chat, create, (), plan(2000, context, calls=0), "resp_1", "http")
    body = carries(done.item)
    assert body is not None and body.users == [user("Fix the bug.")] and body.tail == []
    assert len(done.prompt) == 0 and done.rendered is None
    assert done.items[0] == user("Fix the bug.") and len(done.items) == 2  # the user, then the summary
