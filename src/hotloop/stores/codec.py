"""How every store encodes what it keeps: items as (type, JSON body) pairs, a response's size for the byte budget,
usage records as JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from hotloop.metering.records import UsageRecord
from hotloop.stores.base import Chain
from hotloop.wire.items import KNOWN_ITEM_TYPES, ContextItem, OtherItem, item_to_builtins
from hotloop.wire.response import Response, response_decoder
from hotloop.wire.tool_items import TYPED_ITEMS

encode = msgspec.json.Encoder().encode
_decoders = {name: msgspec.json.Decoder(cls) for name, cls in KNOWN_ITEM_TYPES.items()}
# Item types stored raw (as OtherItem) before they had a Struct: MCP items (protocol.md §1.10) and the typed
# client tools' items (§1.11).
_ONCE_RAW = frozenset(
    {"mcp_list_tools", "mcp_call", "mcp_approval_request", "mcp_approval_response"}
    | {str(cls.__struct_config__.tag) for cls in TYPED_ITEMS}
)
# A blob of items: [[type, item], ...]; each item stays raw until its type picks the decoder.
_blob_decoder = msgspec.json.Decoder(list[tuple[str, msgspec.Raw]])
usage_decoder = msgspec.json.Decoder(UsageRecord)
_timings_decoder = msgspec.json.Decoder(dict[str, float])


class ItemRow(msgspec.Struct, array_like=True):
    """One item as stored: its id (for `item_reference` lookups), its type and its JSON body."""

    item_id: str | None
    type: str
    body: bytes


def decode_item(type_name: str, body: bytes) -> ContextItem:
    decoder = _decoders.get(type_name)
    if decoder is None:
        return OtherItem(raw=msgspec.json.decode(body))
    try:
        item: ContextItem = decoder.decode(body)
    except msgspec.ValidationError:
        if type_name not in _ONCE_RAW:
            raise
        # Stored while its type had no Struct, kept raw then, and not of the shape it has now: still raw.
        return OtherItem(raw=msgspec.json.decode(body))
    return item


def item_rows(items: list[Any]) -> list[ItemRow]:
    rows = []
    for item in items:
        raw = item_to_builtins(item)
        item_id = raw.get("id")
        rows.append(ItemRow(item_id if isinstance(item_id, str) else None, raw.get("type", "message"), encode(raw)))
    return rows


def encode_blob(rows: list[ItemRow]) -> bytes:
    """Several items in one value (Redis keeps a response's input and output items as two such blobs)."""
    return encode([(row.type, msgspec.Raw(row.body)) for row in rows])


def decode_blob(blob: bytes) -> list[ContextItem]:
    return [decode_item(type_name, bytes(body)) for type_name, body in _blob_decoder.decode(blob)]


def stored_size(body: bytes, rows: list[ItemRow]) -> int:
    """The bytes a response counts against `retention_max_bytes`: its JSON and its items' JSON."""
    return len(body) + sum(len(row.body) for row in rows)


class Encoded(msgspec.Struct):
    """A response ready for any store: its body, its input and output item rows and its size."""

    body: bytes
    inputs: list[ItemRow]
    outputs: list[ItemRow]
    size: int


def encode_response(response: Response, input_items: list[ContextItem]) -> Encoded:
    body = encode(response)
    inputs, outputs = item_rows(input_items), item_rows(response.output)
    return Encoded(body, inputs, outputs, stored_size(body, inputs + outputs))


def usage_record(row: tuple[Any, ...]) -> UsageRecord:
    """A usage row of the SQL stores, columns in the order of their USAGE_COLUMNS."""
    return UsageRecord(
        response_id=row[0],
        owner=row[1],
        model=row[2],
        status=row[3],
        input_tokens=row[4],
        cached_tokens=row[5],
        output_tokens=row[6],
        created_at=row[7],
        transport=row[8],
        timings=_timings_decoder.decode(row[9]),
    )


def chain_from_rows(
    rows: Sequence[Sequence[Any]], head_body: bytes, *, parent: int, type_: int, body: int
) -> Chain | None:
    """A chain from the rows of a recursive query (oldest ancestor first, one row per item, a row with a NULL type
    for a response without items), given which columns hold the parent id, the item type and its body; None when
    the oldest ancestor still names a parent: that parent is gone."""
    if rows[0][parent] is not None:
        return None
    context = [decode_item(row[type_], row[body]) for row in rows if row[type_] is not None]
    return Chain(response=response_decoder.decode(head_body), context=context)
