"""The list endpoints' shared query parameters: `after`, `limit` (1 to 100) and `order`."""

from __future__ import annotations

from typing import Literal

from starlette.datastructures import QueryParams

from hotloop.errors import InvalidParam


def page_params(
    query: QueryParams, default_order: Literal["asc", "desc"] = "desc"
) -> tuple[str | None, int, Literal["asc", "desc"]]:
    raw_limit = query.get("limit", "20")
    if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= 100:
        raise InvalidParam("limit must be an integer between 1 and 100.", param="limit")
    raw_order = query.get("order", default_order)
    if raw_order not in ("asc", "desc"):
        raise InvalidParam("order must be 'asc' or 'desc'.", param="order")
    order: Literal["asc", "desc"] = "asc" if raw_order == "asc" else "desc"
    return query.get("after"), int(raw_limit), order
