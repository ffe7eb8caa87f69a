"""What came before a request's fresh input (pipeline/prior.py): each shape answers the same questions, and the
resolve stage (`gather`) picks the shape from the request, on a built service (hotloop-sim, SQLite in a temporary
directory) with no socket."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from hotloop.errors import InvalidParam
from hotloop.pipeline.inputs import gather, match_resent
from hotloop.pipeline.prepare import start_turn
from hotloop.pipeline.prior import NOTHING, Chain, Conversation, ResentHistory, conversation_id_of
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.session import Session
from hotloop.wire.items import FunctionCall, InputText, Message
from hotloop.wire.request import CreateRequest, decode_create

pytestmark = pytest.mark.fast

SIM = "hotloop-sim"
TOOLS = [{"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}}]


@pytest.fixture
def service(sim_service: Service) -> Service:
    return sim_service


def _create(**body: Any) -> CreateRequest:
    return decode_create(msgspec.json.encode({"model": SIM, **body}))


def _user(text: str, item_id: str) -> Message:
    return Message(role="user", content=[InputText(text=text)], id=item_id, status="completed")


async def _finished(service: Service, request: CreateRequest, session: Session | None = None) -> str:
    turn = await start_turn(service, session or service.session("owner", caching=True), request)
    async for _ in turn.events():
        pass
    return turn.response.id


async def test_a_request_from_nothing_has_nothing_before_it(service: Service) -> None:
    session = service.session("owner", caching=False)
    inputs = await gather(service, session, _create(input="hi"), None, None)
    prior = inputs.prior
    assert prior is NOTHING and inputs.fresh == inputs.items
    assert (prior.parent, prior.skip, tuple(prior.context), prior.call_ids, prior.call_count) == (
        None,
        0,
        (),
        frozenset(),
        0,
    )
    assert prior.prompt_base() is None and prior.tools(None) is None


async def test_a_chain_answers_from_its_parent(service: Service) -> None:
    session = service.session("owner", caching=True)
    parent_id = await _finished(service, _create(input="hi", tools=TOOLS, store=False), session)
    state = session.cached(parent_id)
    assert state is not None
    prior = Chain(state)
    assert prior.parent is state and prior.context is state.context and prior.call_ids == state.call_ids
    assert prior.used_tokens == state.response.usage.total_tokens > 0  # type: ignore[union-attr]
    # The tools are validated once per chain: reused while a request declares the same ones, not once it changes.
    assert prior.tools(TOOLS) is state.tools and prior.tools([]) is None
    base = prior.prompt_base()
    assert base is not None and base.rendered is state.rendered and list(base.pending) == state.response.output


async def test_a_conversation_refuses_an_id_it_holds_and_knows_its_calls(service: Service) -> None:
    call = FunctionCall(call_id="c1", name="shell", arguments="{}", id="fc_1", status="completed")
    prior = Conversation([_user("one", "msg_1"), call])
    assert prior.call_ids == frozenset({"c1"}) and prior.call_count == 1 and prior.parent is None
    prior.check([_user("two", "msg_2")])
    with pytest.raises(InvalidParam) as refused:
        prior.check([_user("two", "msg_2"), _user("again", "msg_1")])
    assert refused.value.param == "input[1].id" and refused.value.code == "duplicate_item"
    base = prior.prompt_base()
    assert base is not None and list(base.context) == prior.context and base.rendered is None


async def test_a_conversation_id_is_a_string_or_an_object_with_one() -> None:
    assert conversation_id_of(_create(input="x")) is None
    assert conversation_id_of(_create(input="x", conversation="conv_1")) == "conv_1"
    assert conversation_id_of(_create(input="x", conversation={"id": "conv_2"})) == "conv_2"
    with pytest.raises(InvalidParam) as refused:
        conversation_id_of(_create(input="x", conversation={"name": "nope"}))
    assert refused.value.param == "conversation"


async def test_a_resent_history_starts_after_the_earlier_requests_input(service: Service) -> None:
    session = service.session("owner", caching=False)
    first = [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
    await _finished(service, _create(input=first, store=False))
    again = _create(input=[*first, {"role": "user", "content": "three"}], store=False)
    resent = match_resent(service, session, again, None)
    assert resent is not None
    inputs = await gather(service, session, again, None, resent)
    prior = inputs.prior
    assert isinstance(prior, ResentHistory) and prior.skip == 2 and prior.parent is None
    assert list(prior.context) == inputs.items[:2] and [type(item) for item in inputs.fresh] == [Message]
    assert prior.call_ids == resent.calls and prior.tools(None) is resent.resolved_tools
    base = prior.prompt_base()
    assert base is not None and base.rendered is resent.rendered
    # Its safety result goes on from the earlier request's: the fresh items' findings move past its items.
    assert prior.scanned(resent.safety).findings == resent.safety.then(resent.safety, 2).findings
