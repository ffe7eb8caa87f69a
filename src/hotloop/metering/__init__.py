"""The usage ledger: one record per response, written to the store in batches off the request path."""

from hotloop.metering.ledger import Ledger
from hotloop.metering.records import UsageRecord, record_for

__all__ = ["Ledger", "UsageRecord", "record_for"]
