"""A search's `filters` on the files' `attributes` (OpenAI's ComparisonFilter and CompoundFilter): checked at the
door, with a 400 naming the part that is wrong, and compiled to a predicate run once per file (not per chunk).

A key no file has compares as missing: `eq`, `gt`, `in`... are false for it, `ne` and `nin` true (as SQL's
`IS DISTINCT FROM` reads a missing value), so a filter on a key the store never saw matches nothing for `eq`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

from hotloop.errors import InvalidParam

Predicate = Callable[[Mapping[str, Any]], bool]
COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
MAX_DEPTH = 8  # compound filters nested deeper are refused
MAX_TERMS = 256  # comparisons in one filter, all levels together
_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)


def compile_filter(raw: Any, param: str = "filters") -> Predicate:
    """The predicate of a filter object; raises InvalidParam naming `param`'s offending part."""
    count = [0]
    return _compile(raw, param, 0, count)


def _compile(raw: Any, param: str, depth: int, count: list[int]) -> Predicate:
    if not isinstance(raw, dict):
        raise InvalidParam("A filter must be an object.", param=param)
    kind = raw.get("type")
    if kind in ("and", "or"):
        return _compound(raw, param, depth, count)
    if kind not in COMPARISONS:
        raise InvalidParam(f"type must be one of {', '.join((*COMPARISONS, 'and', 'or'))}.", param=f"{param}.type")
    extra = sorted(set(raw) - {"type", "key", "value"})
    if extra:
        raise InvalidParam(f"Unknown parameter: '{param}.{extra[0]}'.", param=f"{param}.{extra[0]}")
    count[0] += 1
    if count[0] > MAX_TERMS:
        raise InvalidParam(f"A filter may hold at most {MAX_TERMS} comparisons.", param=param)
    key, value = raw.get("key"), raw.get("value")
    if not isinstance(key, str) or not key or len(key) > 64:
        raise InvalidParam("key must be a string of 1 to 64 characters.", param=f"{param}.key")
    if kind in ("in", "nin"):
        if not isinstance(value, list) or not value or not all(_scalar(v) for v in value):
            raise InvalidParam(f"'{kind}' needs a non-empty list of strings or numbers.", param=f"{param}.value")
        members = frozenset(value)
        if kind == "in":
            return lambda attributes: key in attributes and _member(attributes[key], members)
        return lambda attributes: key not in attributes or not _member(attributes[key], members)
    if not _scalar(value):
        raise InvalidParam(f"'{kind}' needs a string, a number or a boolean.", param=f"{param}.value")
    if kind == "eq":
        return lambda attributes: key in attributes and _same(attributes[key], value)
    if kind == "ne":
        return lambda attributes: key not in attributes or not _same(attributes[key], value)
    if isinstance(value, bool):
        raise InvalidParam(f"'{kind}' compares numbers or strings, not booleans.", param=f"{param}.value")
    compare = _ORDER[kind]
    return lambda attributes: _ordered(attributes.get(key), value, compare)


def _compound(raw: dict[str, Any], param: str, depth: int, count: list[int]) -> Predicate:
    extra = sorted(set(raw) - {"type", "filters"})
    if extra:
        raise InvalidParam(f"Unknown parameter: '{param}.{extra[0]}'.", param=f"{param}.{extra[0]}")
    if depth >= MAX_DEPTH:
        raise InvalidParam(f"Filters may nest at most {MAX_DEPTH} deep.", param=param)
    parts = raw.get("filters")
    if not isinstance(parts, list) or not parts:
        raise InvalidParam("A compound filter needs a non-empty list 'filters'.", param=f"{param}.filters")
    compiled = [_compile(part, f"{param}.filters[{n}]", depth + 1, count) for n, part in enumerate(parts)]
    if raw["type"] == "and":
        return lambda attributes: all(test(attributes) for test in compiled)
    return lambda attributes: any(test(attributes) for test in compiled)


def _same(have: Any, want: Any) -> bool:
    # True == 1 in Python; an attribute's boolean matches only a boolean.
    return isinstance(have, bool) == isinstance(want, bool) and have == want


def _member(have: Any, members: frozenset[Any]) -> bool:
    return not isinstance(have, bool) and have in members


def _ordered(have: Any, want: Any, compare: Callable[[Any, Any], bool]) -> bool:
    if have is None or isinstance(have, bool):
        return False
    if isinstance(want, str) != isinstance(have, str):
        return False  # a number against a string never matches
    return compare(have, want)
