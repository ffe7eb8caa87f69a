"""Incremental validation (pipeline/validate.py): new items checked against the chain's call ids give the verdict
a check of the whole context gives."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hotloop.errors import HotloopError
from hotloop.pipeline.validate import check_new_items
from hotloop.wire.items import ContextItem, FunctionCall, FunctionCallOutput, InputText, Message

pytestmark = pytest.mark.fast  # the fast tier: `make unit-fast`

SECRET = b"s" * 32


@st.composite
def conversations(draw: st.DrawFn) -> list[ContextItem]:
    items: list[ContextItem] = []
    calls: list[str] = []
    for step in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["message", "call", "output", "stray_output"]))
        if kind == "message":
            items.append(Message(role="user", content=[InputText(text=f"m{step}")]))
        elif kind == "call":
            calls.append(f"call_{step}")
            items.append(FunctionCall(call_id=f"call_{step}", name="f", arguments="{}"))
        elif kind == "output" and calls:
            items.append(FunctionCallOutput(call_id=draw(st.sampled_from(calls)), output="ok"))
        else:
            items.append(FunctionCallOutput(call_id=f"unknown_{step}", output="ok"))
    return items


def verdict(chunks: list[list[ContextItem]]) -> tuple[str, frozenset[str]]:
    known: frozenset[str] = frozenset()
    for chunk in chunks:
        try:
            known = check_new_items(chunk, known, SECRET)
        except HotloopError as exc:
            return f"{exc.code}:{exc.message}", known
    return "ok", known


@settings(max_examples=300, deadline=None)
@given(items=conversations(), data=st.data())
def test_chunked_validation_equals_full_validation(items: list[ContextItem], data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(0, len(items)), max_size=5)))
    bounds = [0, *cuts, len(items)]
    chunks = [items[start:end] for start, end in itertools.pairwise(bounds)]
    full_verdict, full_known = verdict([items])
    chunked_verdict, chunked_known = verdict(chunks)
    assert chunked_verdict == full_verdict
    if full_verdict == "ok":
        assert chunked_known == full_known
