"""The list endpoints' shared query parameters: `after`, `limit` (1 to 100 unless an endpoint says otherwise) and
`order`."""

from __future__ import annotations

from typing import Literal

from starlette.datastructures import QueryParams

from hotloop.errors import InvalidParam


def page_params(
    query: QueryParams,
    default_order: Literal["asc", "desc"] = "desc",
    default_limit: int = 20,
    max_limit: int = 100,
) -> tuple[str | None, int, Literal["asc", "desc"]]:
    raw_limit = query.get("limit", str(default_limit))
    if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= max_limit:
        raise InvalidParam(f"limit must be an integer between 1 and {max_limit}.", param="limit")
    raw_order = query.get("order", default_order)
    if raw_order not in ("asc", "desc"):
        raise InvalidParam("order must be 'asc' or 'desc'.", param="order")
    order: Literal["asc", "desc"] = "asc" if raw_order == "asc" else "desc"
    return query.get("after"), int(raw_limit), order
