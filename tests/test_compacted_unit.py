"""chat/compacted.py without a server: a context-carrying compaction sealed and read back (`carried`, `carries`),
found (`latest`), read as the context it stands for (`effective`, `count_calls`), and what it keeps verbatim
(`kept_users`, `kept_tail`)."""

from __future__ import annotations

import pytest

from hotloop.chat.compacted import (
    MARK,
    SUMMARY_HEADER,
    Carried,
    Kept,
    carried,
    carries,
    count_calls,
    effective,
    kept_tail,
    kept_users,
    latest,
)
from hotloop.chat.messages import other_item_text
from hotloop.sealing import seal
from hotloop.wire.items import (
    Compaction,
    ContextItem,
    CustomToolCall,
    CustomToolCallOutput,
    FunctionCall,
    FunctionCallOutput,
    InputImage,
    InputText,
    Message,
    OtherItem,
    OutputText,
    Reasoning,
)

pytestmark = pytest.mark.fast

SECRET = b"s" * 32


def user(text: str) -> Message:
    return Message(role="user", content=[InputText(text=text)])


def assistant(text: str) -> Message:
    return Message(role="assistant", content=[OutputText(text=text)])


def call(call_id: str) -> FunctionCall:
    return FunctionCall(call_id=call_id, name="shell", arguments='{"command": "ls"}')


def output(call_id: str) -> FunctionCallOutput:
    return FunctionCallOutput(call_id=call_id, output="a.py b.py")


def compaction(summary: str, users: list[ContextItem], tail: list[ContextItem], calls: int = 0) -> Compaction:
    return Compaction(encrypted_content=seal(carried(summary, users, tail, calls), SECRET), id="cmp_1")


# -- carried / carries: the sealed text and back ------------------------------------------------------------------


def test_carried_round_trips_through_the_seal() -> None:
    users: list[Kept] = [user("Fix the bug."), user("In parse().")]
    tail: list[Kept] = [call("c1"), output("c1"), CustomToolCallOutput(call_id="c2", output="ok")]
    body = carries(Compaction(encrypted_content=seal(carried("Found the bug.", users, tail, 7), SECRET)))
    assert body == Carried(summary="Found the bug.", users=users, tail=tail, calls=7)


def test_carried_strips_the_mark_and_keeps_every_item() -> None:
    other = OtherItem(raw={"type": "web_search_call"})
    text = carried(f"a{MARK}b\x1ec", [user("u"), other], [], 0)
    assert text.startswith(MARK) and text.count("\x1e") == 2  # the mark's own two: the summary's are gone
    body = carries(Compaction(encrypted_content=seal(text, SECRET)))
    assert body is not None and body.summary == "ahotloop-contextbc" and body.tail == []
    # An item of a type without a Struct stays as the message it renders as.
    assert body.users == [user("u"), Message(role="user", content=[InputText(text=other_item_text(other))])]
    reasoning = Reasoning(summary=[], encrypted_content="x")
    inner = Compaction(encrypted_content="nested")
    kept = carries(Compaction(encrypted_content=seal(carried("s", [], [reasoning, inner], 0), SECRET)))
    assert kept is not None and kept.tail == [reasoning]  # a compaction is not carried by another


def test_carries_is_none_for_anything_else() -> None:
    assert carries(user("hi")) is None
    assert carries(Compaction(encrypted_content=seal("a summary from /responses/compact", SECRET))) is None
    assert carries(Compaction(encrypted_content=seal(MARK + "{not json", SECRET))) is None
    assert carries(Compaction(encrypted_content=seal(MARK + '{"summary": 1}', SECRET))) is None
    assert carries(Compaction(encrypted_content="not a blob")) is None


# -- latest / effective / count_calls -----------------------------------------------------------------------------


def test_latest_finds_the_last_carrying_compaction() -> None:
    first, second = compaction("one", [], []), compaction("two", [], [])
    plain = Compaction(encrypted_content=seal("from /responses/compact", SECRET))
    assert latest([]) == -1 and latest([user("a"), plain]) == -1
    assert latest([user("a"), first, user("b")]) == 1
    assert latest([first, user("b"), second, plain, user("c")]) == 2


def test_effective_reads_from_the_latest_compaction_on() -> None:
    plain: list[ContextItem] = [user("a"), assistant("b")]
    assert effective(plain) is plain  # nothing carried: the items as they are
    older = compaction("old", [user("old task")], [])
    newer = compaction("Found it.", [user("Fix the bug.")], [call("c1"), output("c1")])
    items = effective([user("dropped"), older, assistant("x"), newer, assistant("after"), user("next")])
    summary = Message(role="user", content=[InputText(text=f"{SUMMARY_HEADER}\nFound it.")])
    assert items == [user("Fix the bug."), summary, call("c1"), output("c1"), assistant("after"), user("next")]


def test_count_calls_starts_again_from_a_compaction() -> None:
    custom = CustomToolCall(call_id="k", name="patch", input="diff")
    assert count_calls([]) == 0
    assert count_calls([call("a"), output("a"), custom, user("u")], before=2) == 4  # outputs are not calls
    carrying = compaction("s", [], [call("t"), output("t")], calls=10)
    # The calls before the compaction (and in its tail) are the `calls` it carries; those after it add up.
    assert count_calls([call("a"), call("b"), carrying, call("c")], before=5) == 11
    assert count_calls([carrying]) == 10


# -- kept_tail / kept_users ---------------------------------------------------------------------------------------


def test_kept_tail_puts_the_answered_calls_before_the_new_input() -> None:
    custom = CustomToolCall(call_id="k", name="patch", input="diff")
    history: list[ContextItem] = [user("go"), call("a"), call("b"), custom, assistant("done")]
    new: list[ContextItem] = [output("b"), CustomToolCallOutput(call_id="k", output="ok"), user("and now?")]
    assert kept_tail(history, new) == [call("b"), custom, *new]  # `a` is not answered here
    assert kept_tail(history, [user("only text")]) == [user("only text")]
    assert kept_tail([], []) == []


def test_kept_users_are_the_latest_within_the_budget_in_order() -> None:
    items: list[ContextItem] = [user("a" * 4), assistant("x" * 100), user("b" * 3), user("c" * 3)]
    assert kept_users(items, budget_chars=10) == [user("a" * 4), user("b" * 3), user("c" * 3)]
    assert kept_users(items, budget_chars=9) == [user("b" * 3), user("c" * 3)]  # the budget full: older ones go
    assert kept_users(items, budget_chars=6) == [user("b" * 3), user("c" * 3)]
    assert kept_users(items, budget_chars=5) == [user("c" * 3)]
    assert kept_users([], budget_chars=100) == []


def test_a_user_message_larger_than_the_budget_is_left_to_the_summary() -> None:
    """…and the older ones that fit are still kept: one message past the whole budget is skipped, not a stop."""
    items: list[ContextItem] = [user("task"), user("x" * 50), user("more")]
    assert kept_users(items, budget_chars=10) == [user("task"), user("more")]
    assert kept_users([user("x" * 11)], budget_chars=10) == []


def test_kept_users_skip_summaries_and_other_roles_and_count_only_text() -> None:
    summary = Message(role="user", content=[InputText(text=f"{SUMMARY_HEADER}\nearlier")])
    image = Message(role="user", content=[InputImage(image_url="data:image/png;base64," + "A" * 500)])
    system = Message(role="system", content=[InputText(text="rules")])
    developer = Message(role="developer", content=[InputText(text="more rules")])
    items: list[ContextItem] = [system, developer, summary, image, user("hi"), output("c"), assistant("hello")]
    assert kept_users(items, budget_chars=5) == [image, user("hi")]  # an image part has no text to count
    header_only = Message(role="user", content=[InputText(text=SUMMARY_HEADER)])  # not followed by a summary
    assert kept_users([header_only], budget_chars=100) == [header_only]
    assert kept_users([Message(role="user", content=[])], budget_chars=0) == [Message(role="user", content=[])]
