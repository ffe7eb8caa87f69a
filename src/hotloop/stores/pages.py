"""The pages a store's list queries return: items (a response's input, a conversation's) and usage records."""

from __future__ import annotations

import msgspec

from hotloop.metering.records import UsageRecord, UsageTotals
from hotloop.wire.items import ContextItem


class ItemPage(msgspec.Struct):
    items: list[ContextItem]
    has_more: bool


class UsagePage(msgspec.Struct):
    """A page of one owner's usage records, oldest first, and the totals of every record the query selects."""

    records: list[UsageRecord]
    has_more: bool
    totals: UsageTotals
