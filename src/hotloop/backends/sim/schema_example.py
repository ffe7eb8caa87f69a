"""An example value valid against a JSON schema: hotloop-sim's tool-call arguments and structured answers."""

from __future__ import annotations

import math
import random
from typing import Any

from hotloop.backends.sim.words import WORDS


def example_for_schema(
    schema: dict[str, Any], rng: random.Random, depth: int = 0, root: dict[str, Any] | None = None
) -> Any:
    """A value valid against a practical subset of JSON Schema.

    Handled: type (or a list of types), enum, const, local `$ref` (`#/$defs/…`), anyOf/oneOf (first branch),
    allOf (merged), object properties (all generated, so `required` holds), array items with minItems/maxItems,
    integer/number minimum/maximum (also exclusive), string minLength/maxLength and common formats.
    """
    root = schema if root is None else root
    if depth > 32:
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = _resolve_ref(root, ref)
        if target is not None:
            rest = {key: value for key, value in schema.items() if key != "$ref"}
            return example_for_schema({**target, **rest}, rng, depth + 1, root)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches and isinstance(branches[0], dict):
            rest = {name: value for name, value in schema.items() if name != key}
            return example_for_schema({**rest, **branches[0]}, rng, depth + 1, root)
    if isinstance(schema.get("allOf"), list):
        merged = {name: value for name, value in schema.items() if name != "allOf"}
        for branch in schema["allOf"]:
            if isinstance(branch, dict):
                props = {**merged.get("properties", {}), **branch.get("properties", {})}
                merged = {**merged, **branch, "properties": props}
        return example_for_schema(merged, rng, depth + 1, root)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if depth > 8 and kind in ("object", "array") and _nullable(schema):
        return None  # a recursive schema: stop where the schema allows it
    if kind == "object":
        props = schema.get("properties") or {}
        return {
            name: example_for_schema(sub, rng, depth + 1, root) for name, sub in props.items() if isinstance(sub, dict)
        }
    if kind == "array":
        items = schema.get("items")
        if not isinstance(items, dict):
            items = {"type": "string"}
        count = max(1, int(schema.get("minItems", 1)))
        if "maxItems" in schema:
            count = max(0, min(count, int(schema["maxItems"])))
        return [example_for_schema(items, rng, depth + 1, root) for _ in range(count)]
    if kind == "integer":
        floor, ceiling = _bounds(schema, integer=True)
        return rng.randint(int(floor), int(ceiling))
    if kind == "number":
        low, high = _bounds(schema, integer=False)
        # A whole number when the range holds one: still a valid JSON-schema "number", and what clients that
        # declare "number" but parse an integer (Codex's `max_output_tokens`, `yield_time_ms`) accept.
        if math.ceil(low) <= math.floor(high):
            return rng.randint(math.ceil(low), math.floor(high))
        value = round(rng.uniform(low, high), 2)
        return value if low <= value <= high else low
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return _string(schema, rng)


def _resolve_ref(root: dict[str, Any], ref: str) -> dict[str, Any] | None:
    """A local JSON pointer (`#`, `#/$defs/Name`, `#/definitions/Name`); remote references are not followed."""
    if not ref.startswith("#"):
        return None
    node: Any = root
    for token in filter(None, ref[1:].split("/")):
        token = token.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or token not in node:
            return None
        node = node[token]
    return node if isinstance(node, dict) else None


def _nullable(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return isinstance(kind, list) and "null" in kind


def _bounds(schema: dict[str, Any], integer: bool) -> tuple[float, float]:
    """The inclusive range a number must fall in; without bounds, [0, 100] (shifted to meet a lone bound)."""
    step = 1.0 if integer else 0.01
    low: float | None = None
    high: float | None = None
    if isinstance(schema.get("minimum"), int | float):
        low = float(schema["minimum"])
    if isinstance(schema.get("exclusiveMinimum"), int | float):
        bound = float(schema["exclusiveMinimum"]) + step
        low = bound if low is None else max(low, bound)
    if isinstance(schema.get("maximum"), int | float):
        high = float(schema["maximum"])
    if isinstance(schema.get("exclusiveMaximum"), int | float):
        bound = float(schema["exclusiveMaximum"]) - step
        high = bound if high is None else min(high, bound)
    if low is None:
        low = 0.0 if high is None or high >= 0 else high - 100
    if high is None:
        high = low + 100
    if integer:
        low, high = float(math.ceil(low)), float(math.floor(high))
    return low, max(low, high)


_FORMATS = {
    "date-time": "2025-01-02T03:04:05Z",
    "date": "2025-01-02",
    "time": "03:04:05Z",
    "email": "user@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "123e4567-e89b-42d3-a456-426614174000",
    "ipv4": "192.0.2.1",
    "hostname": "example.com",
}


def _string(schema: dict[str, Any], rng: random.Random) -> str:
    text = _FORMATS.get(str(schema.get("format")), f"{rng.choice(WORDS)}-{rng.randint(0, 999)}")
    low = int(schema.get("minLength", 0))
    high = int(schema.get("maxLength", max(low, len(text))))
    if len(text) < low:
        text += "x" * (low - len(text))
    return text[: max(low, high)]
