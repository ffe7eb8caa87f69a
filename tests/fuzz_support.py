"""Hypothesis strategies for the fuzz tests (test_fuzz_http.py, test_fuzz_websocket.py): create bodies with random
wrong types, broken input items and tools, and raw bodies that are not JSON at all (protocol.md §1.2, §1.3, §1.9).

The example count of every fuzz test is `HOTLOOP_FUZZ_EXAMPLES` scaled per test (default sized for a ~40 s suite);
a longer campaign: `HOTLOOP_FUZZ_EXAMPLES=5000 pytest tests/test_fuzz_http.py tests/test_fuzz_websocket.py`.
"""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

BASE_EXAMPLES = int(os.environ.get("HOTLOOP_FUZZ_EXAMPLES", "100"))
NAN_TOKENS = ("NaN", "Infinity", "-Infinity")


def fuzz_settings(share: float) -> settings:
    """`share` x HOTLOOP_FUZZ_EXAMPLES examples, no deadline (the server runs in threads beside the test)."""
    return settings(
        max_examples=max(1, int(BASE_EXAMPLES * share)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
        derandomize=os.environ.get("HOTLOOP_FUZZ_RANDOM") is None,
    )


# -- JSON values ---------------------------------------------------------------------------------------------------

short_text = st.text(max_size=12)
huge_ints = st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**40, -(10**40)])
ints = st.one_of(st.integers(-1000, 1000), huge_ints)
# Non-finite floats encode as NaN / Infinity tokens (json.dumps' extension); the server must reject them cleanly.
floats = st.floats(allow_nan=True, allow_infinity=True)
scalars = st.one_of(st.none(), st.booleans(), ints, floats, short_text)
garbage: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(short_text, inner, max_size=4)),
    max_leaves=12,
)


def wrong(value: Any) -> st.SearchStrategy[Any]:
    """A value of another type than `value`'s: a number as a string, a list as an object, null, garbage."""
    options: list[st.SearchStrategy[Any]] = [st.none(), garbage, huge_ints, floats]
    if isinstance(value, int | float) and not isinstance(value, bool):
        options.append(st.just(str(value)))
    if isinstance(value, list):
        options.append(st.just({str(i): v for i, v in enumerate(value)}))
    if isinstance(value, dict):
        options.append(st.just(list(value.values())))
    if isinstance(value, str):
        options += [st.just([value]), st.just({"value": value}), st.just(len(value))]
    return st.one_of(options)


@st.composite
def mutate(draw: st.DrawFn, obj: dict[str, Any], *, max_changes: int = 3) -> dict[str, Any]:
    """Drop, mistype or add random keys of `obj` (a shallow copy)."""
    out = dict(obj)
    for _ in range(draw(st.integers(0, max_changes))):
        action = draw(st.sampled_from(["drop", "mistype", "mistype", "add"]))
        keys = sorted(out)
        if action == "add" or not keys:
            out[draw(short_text)] = draw(garbage)
            continue
        key = draw(st.sampled_from(keys))
        if action == "drop":
            del out[key]
        else:
            out[key] = draw(wrong(out[key]))
    return out


# -- input items (protocol.md §1.3) --------------------------------------------------------------------------------

PNG_1x1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
image_urls = st.one_of(
    st.just(f"data:image/png;base64,{PNG_1x1}"),
    st.just(f"data:image/png;base64,{PNG_1x1[:-7]}"),  # truncated image
    st.just("data:image/png;base64,!!!not-base64!!!"),
    st.just("data:image/png;base64,"),
    st.just("data:,"),
    st.just("data:"),
    st.just("data:image/png,%ZZ%00garbage"),
    st.just("data:image/svg+xml;base64,PHN2Zz48L3N2Zz4="),
    st.just("data:text/plain;base64,aGVsbG8="),
    st.just("https://example.invalid/cat.png"),
    st.just(""),
    st.text(max_size=20).map(lambda s: "data:" + s),
    st.binary(max_size=40).map(lambda b: "data:image/png;base64," + b.hex()),
)
text_parts = st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text", "text"]), "text": short_text})
image_parts = st.fixed_dictionaries(
    {"type": st.just("input_image"), "image_url": image_urls},
    optional={"detail": st.sampled_from(["low", "high", "auto", "original", "ultra"]), "file_id": short_text},
)
file_parts = st.fixed_dictionaries(
    {"type": st.just("input_file")},
    optional={
        "file_data": st.one_of(image_urls, st.just("data:text/plain;base64,aGVsbG8=")),
        "file_url": short_text,
        "file_id": short_text,
        "filename": st.sampled_from(["a.txt", "b.pdf", "", "x" * 300, "../../etc/passwd"]),
    },
)
other_parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("refusal"), "refusal": short_text}),
    st.fixed_dictionaries({"type": short_text}),
    garbage,
)
parts = st.one_of(text_parts, image_parts, file_parts, other_parts).flatmap(
    lambda p: mutate(p, max_changes=1) if isinstance(p, dict) else st.just(p)
)
content = st.one_of(short_text, st.lists(parts, max_size=3))
call_ids = st.sampled_from(["call_1", "call_2", "", "call_x"])

message_items = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "developer", "tool", ""]), "content": content},
    optional={
        "type": st.just("message"),
        "id": short_text,
        "status": st.sampled_from(["completed", "in_progress", "incomplete", "bogus"]),
        "phase": st.sampled_from(["commentary", "final_answer", "other"]),
    },
)
function_call_items = st.fixed_dictionaries(
    {
        "type": st.just("function_call"),
        "call_id": call_ids,
        "name": short_text,
        "arguments": st.one_of(st.just('{"city":"Paris"}'), short_text),
    },
    optional={"namespace": short_text, "id": short_text, "status": short_text},
)
function_output_items = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["function_call_output", "custom_tool_call_output"]),
        "call_id": call_ids,
        "output": content,
    },
    optional={"id": short_text, "status": short_text},
)
custom_call_items = st.fixed_dictionaries(
    {"type": st.just("custom_tool_call"), "call_id": call_ids, "name": short_text, "input": short_text}
)
reasoning_items = st.fixed_dictionaries(
    {
        "type": st.just("reasoning"),
        "summary": st.lists(st.fixed_dictionaries({"type": st.just("summary_text"), "text": short_text}), max_size=2),
    },
    optional={
        "id": short_text,
        "content": st.lists(st.fixed_dictionaries({"type": st.just("reasoning_text"), "text": short_text}), max_size=2),
        "encrypted_content": st.one_of(short_text, st.just("gAAAA" + "A" * 40), st.binary(max_size=30).map(bytes.hex)),
    },
)
compaction_items = st.fixed_dictionaries(
    {"type": st.just("compaction"), "encrypted_content": st.one_of(short_text, st.just("x.y.z"))},
    optional={"id": short_text},
)
reference_items = st.fixed_dictionaries(
    {"id": st.one_of(short_text, st.just("msg_" + "a" * 24))}, optional={"type": st.just("item_reference")}
)
# The typed client tools' items and the tool-loading items (protocol.md §1.11), well formed or mutated.
typed_items = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.just("shell_call_output"),
            "call_id": short_text,
            "output": st.just([{"stdout": "x", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]),
        }
    ),
    st.fixed_dictionaries(
        {"type": st.just("shell_call"), "call_id": short_text, "action": st.just({"commands": ["ls"]})}
    ),
    st.fixed_dictionaries(
        {"type": st.just("apply_patch_call_output"), "call_id": short_text, "status": st.just("completed")}
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("computer_call_output"),
            "call_id": short_text,
            "output": st.just({"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"}),
        }
    ),
    st.fixed_dictionaries({"type": st.just("local_shell_call_output"), "id": short_text, "output": short_text}),
    st.fixed_dictionaries(
        {"type": st.just("tool_search_output"), "call_id": short_text, "tools": st.just([{"name": "f"}])}
    ),
    st.fixed_dictionaries({"type": st.just("additional_tools"), "role": st.just("developer"), "tools": garbage}),
)
unknown_items = st.one_of(
    typed_items,
    st.fixed_dictionaries({"type": st.sampled_from(["web_search_call", "local_shell_call", "zzz"]), "id": short_text}),
    st.dictionaries(short_text, garbage, max_size=3),
    garbage,
)
items: st.SearchStrategy[Any] = st.one_of(
    message_items,
    function_call_items,
    function_output_items,
    custom_call_items,
    reasoning_items,
    compaction_items,
    reference_items,
    unknown_items,
).flatmap(lambda item: mutate(item, max_changes=2) if isinstance(item, dict) else st.just(item))

# -- tools ---------------------------------------------------------------------------------------------------------

schemas = st.one_of(
    st.just({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    st.just({"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}}),
    st.just({"type": "object", "properties": {"x": {"type": "wat"}}, "required": "x"}),
    st.just({"type": ["object", "null"], "properties": []}),
    st.just({"anyOf": [{"$ref": "#"}]}),
    st.just({"type": "object", "properties": {"a": {"enum": []}}, "required": ["zz"], "additionalProperties": 3}),
    garbage,
)
function_tools = st.fixed_dictionaries(
    {"type": st.just("function"), "name": st.one_of(st.just("get_weather"), short_text)},
    optional={"description": short_text, "parameters": schemas, "strict": st.one_of(st.booleans(), garbage)},
)
tools: st.SearchStrategy[Any] = st.one_of(
    function_tools,
    function_tools.map(lambda tool: {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}),
    st.fixed_dictionaries(
        {"type": st.just("namespace"), "name": short_text, "tools": st.lists(function_tools, max_size=2)}
    ),
    st.fixed_dictionaries(
        {"type": st.just("custom"), "name": short_text},
        optional={
            "format": st.one_of(st.just({"type": "grammar", "syntax": "lark", "definition": "start: /x/"}), garbage)
        },
    ),
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(
                ["web_search", "mcp", "local_shell", "apply_patch", "shell", "computer", "file_search", "??"]
            )
        },
        optional={"environment": garbage, "defer_loading": st.booleans()},
    ),
    st.fixed_dictionaries({"type": st.just("tool_search")}, optional={"execution": garbage, "parameters": garbage}),
    garbage,
).flatmap(lambda tool: mutate(tool, max_changes=1) if isinstance(tool, dict) else st.just(tool))

# -- the create body -----------------------------------------------------------------------------------------------

tool_choices = st.one_of(
    st.sampled_from(["auto", "none", "required", "bogus", ""]),
    st.fixed_dictionaries({"type": st.just("function"), "name": short_text}),
    st.fixed_dictionaries(
        {
            "type": st.just("allowed_tools"),
            "mode": st.sampled_from(["auto", "required", "x"]),
            "tools": st.one_of(
                st.lists(st.fixed_dictionaries({"type": st.just("function"), "name": short_text}), max_size=2), garbage
            ),
        }
    ),
    st.dictionaries(short_text, garbage, max_size=3),
)
text_configs = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "format": st.one_of(
                st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object", "json_schema", "xml"])}),
                st.fixed_dictionaries(
                    {"type": st.just("json_schema"), "name": st.one_of(short_text, garbage), "schema": schemas},
                    optional={"strict": garbage, "description": garbage},
                ),
                garbage,
            ),
            "verbosity": st.one_of(st.sampled_from(["low", "medium", "high", "max"]), garbage),
        },
    ),
    garbage,
)
reasoning_configs = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "effort": st.one_of(
                st.sampled_from(["none", "minimal", "low", "medium", "high", "xhigh", "max", "x"]), garbage
            ),
            "summary": st.one_of(st.sampled_from(["auto", "concise", "detailed", "x"]), garbage),
        },
    ),
    garbage,
)
metadata_values = st.one_of(
    st.dictionaries(st.text(max_size=70), st.one_of(st.text(max_size=20), garbage), max_size=18),
    st.just({"k": "v" * 600}),
    st.just({"k" * 65: "v"}),
    garbage,
)
previous_ids = st.one_of(
    st.just(""),
    st.just("resp_" + "0" * 24),
    st.text(max_size=40),
    st.just("resp_" + "\x00" * 3),
    st.just("x" * 5000),
    garbage,
)

VALID_BODY: dict[str, Any] = {
    "model": "hotloop-sim",
    "input": "Say hi.",
    "instructions": "Be brief.",
    "max_output_tokens": 32,
    "temperature": 0.5,
    "top_p": 0.9,
    "store": False,
    "metadata": {"fuzz": "1"},
}

# Values a field may take: valid ones, near-misses and garbage.
FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "model": st.one_of(st.sampled_from(["hotloop-sim", "smollm2-135m", "nope", ""]), garbage),
    "input": st.one_of(short_text, st.lists(items, max_size=4), st.just("x" * 20_000), garbage),
    "instructions": st.one_of(short_text, garbage),
    "previous_response_id": previous_ids,
    "tools": st.one_of(st.lists(tools, max_size=3), garbage),
    "tool_choice": st.one_of(tool_choices, garbage),
    "parallel_tool_calls": st.one_of(st.booleans(), garbage),
    "store": st.one_of(st.booleans(), garbage),
    "stream_options": garbage,
    "background": st.one_of(st.booleans(), garbage),
    "generate": st.one_of(st.booleans(), garbage),
    "temperature": st.one_of(floats, ints, garbage),
    "top_p": st.one_of(floats, ints, garbage),
    "presence_penalty": st.one_of(floats, ints, garbage),
    "frequency_penalty": st.one_of(floats, ints, garbage),
    "top_logprobs": st.one_of(ints, floats, garbage),
    "max_output_tokens": st.one_of(ints, st.integers(16, 64), floats, garbage),
    "max_tool_calls": st.one_of(ints, garbage),
    "truncation": st.one_of(st.sampled_from(["auto", "disabled", "x"]), garbage),
    "text": text_configs,
    "reasoning": reasoning_configs,
    "include": st.one_of(
        st.lists(st.sampled_from(["reasoning.encrypted_content", "message.output_text.logprobs", "x"]), max_size=3),
        garbage,
    ),
    "metadata": metadata_values,
    "prompt_cache_key": st.one_of(short_text, garbage),
    "prompt_cache_options": garbage,
    "safety_identifier": st.one_of(short_text, garbage),
    "service_tier": st.one_of(st.sampled_from(["auto", "default", "flex"]), garbage),
    "user": st.one_of(short_text, garbage),
    "conversation": garbage,
    "prompt": garbage,
    "client_metadata": garbage,
    "context_management": garbage,
}


@st.composite
def create_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """A structurally valid create body with 1-4 fields replaced by random (often wrong) values, plus unknown keys."""
    body = dict(VALID_BODY)
    for field in draw(st.lists(st.sampled_from(sorted(FIELD_VALUES)), min_size=1, max_size=4, unique=True)):
        body[field] = draw(FIELD_VALUES[field])
    if draw(st.booleans()):
        body = draw(mutate(body, max_changes=2))
    # Keep generation short whatever the body says, unless the fuzzed field is max_output_tokens itself.
    if isinstance(body.get("metadata"), dict) and len(body["metadata"]) < 16:
        body["metadata"] = {**body["metadata"], "sim_output_tokens": "4"}
    return body


def dumps(body: Any) -> bytes:
    """JSON with NaN/Infinity tokens where a float is not finite (json.dumps' extension, as sloppy clients send)."""
    return json.dumps(body, allow_nan=True).encode()


# -- raw bodies that are not (valid) JSON --------------------------------------------------------------------------


def _nested(depth: int, opener: str, closer: str) -> bytes:
    return (opener * depth + closer * depth).encode()


@st.composite
def raw_bodies(draw: st.DrawFn) -> bytes:
    """Deep nesting, truncated JSON, invalid UTF-8, NaN tokens, long strings, non-objects."""
    valid = dumps(VALID_BODY)
    kind = draw(st.integers(0, 11))
    if kind == 0:
        depth = draw(st.sampled_from([100, 1000, 5000, 100_000]))
        return b'{"input":' + _nested(depth, "[", "]") + b"}"
    if kind == 1:
        depth = draw(st.sampled_from([1000, 5000, 100_000]))
        return b'{"metadata":' + ('{"a":' * depth).encode() + b"1" + b"}" * depth + b"}"
    if kind == 2:
        return valid[: draw(st.integers(0, len(valid) - 1))]
    if kind == 3:
        cut = draw(st.integers(0, len(valid)))
        junk = draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"]))
        return valid[:cut] + junk + valid[cut:]
    if kind == 4:
        junk = draw(st.sampled_from([b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80"]))
        return b'{"input":"' + junk + b'","model":"hotloop-sim"}'
    if kind == 5:
        field = draw(st.sampled_from(["temperature", "top_p", "max_output_tokens", "metadata", "input"]))
        return b'{"' + field.encode() + b'":' + draw(st.sampled_from(NAN_TOKENS)).encode() + b"}"
    if kind == 6:
        return draw(st.binary(max_size=200))
    if kind == 7:
        return dumps(draw(st.one_of(st.lists(garbage), scalars)))
    if kind == 8:
        size = draw(st.sampled_from([100_000, 1_000_000]))
        field = draw(st.sampled_from(["input", "instructions", "model", "previous_response_id", "user"]))
        return dumps({**VALID_BODY, field: "x" * size, "input": "hi" if field != "input" else "x" * size})
    if kind == 9:
        return b'{"input":"\\ud800","model":"hotloop-sim","store":false}'  # a lone surrogate escape
    if kind == 10:
        return b'{"model":"hotloop-sim","model":5,"input":"hi","store":false}'  # duplicate keys
    return dumps(draw(garbage)) + draw(st.sampled_from([b"", b" trailing", b"}", b"\x00"]))


# -- checking what comes back --------------------------------------------------------------------------------------

OR_EFFORTS = frozenset({"none", "low", "medium", "high", "xhigh"})


def or_view(response: dict[str, Any]) -> dict[str, Any]:
    """A Response as the OR schema can check it: hotloop's documented extensions taken out. Namespace and custom
    tools are echoed as sent (protocol.md §1.4) and the effort list is wider than OR's (§1.2)."""
    out = dict(response)
    if isinstance(out.get("tools"), list):
        out["tools"] = [tool for tool in out["tools"] if tool.get("type") == "function"]
    reasoning = out.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") not in OR_EFFORTS:
        out["reasoning"] = {**reasoning, "effort": None}
    return out


def or_frame(frame: dict[str, Any]) -> dict[str, Any]:
    """An event or error frame with its `response` (if any) reduced to `or_view`."""
    if isinstance(frame.get("response"), dict):
        return {**frame, "response": or_view(frame["response"])}
    return frame
