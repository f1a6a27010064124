"""Decoded records as plain rows, for export and find.

Every field comes from ``rmqstore.formats.commitlog.decode`` (via ``pipelines.source``); the
row adds the offset message id and the UTC date of the store time (the export partition).
"""

import datetime as dt
from collections.abc import Iterator

from pipelines.source import ByteRange, RangeEnd, iter_range
from rmqstore.formats import commitlog
from rmqstore.formats.msgid import offset_msg_id

FIELDS = (
    "topic", "queue_id", "queue_offset", "phy_offset", "size", "sys_flag", "flag",
    "store_timestamp", "born_timestamp", "store_host", "born_host", "msg_id", "keys", "tags",
    "uniq_key", "properties", "body", "body_crc", "reconsume_times",
    "prepared_transaction_offset", "date",
)


def utc_date(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d")


def key_tokens(keys: str) -> list[str]:
    """Non-empty tokens of a KEYS value (space separated)."""
    return [k for k in keys.split(" ") if k]


def row(rec: commitlog.Record) -> tuple:
    """A record as a tuple in FIELDS order."""
    return (
        rec.topic, rec.queue_id, rec.queue_offset, rec.physical_offset, rec.total_size,
        rec.sys_flag, rec.flag, rec.store_timestamp, rec.born_timestamp, str(rec.store_host),
        str(rec.born_host),
        offset_msg_id(rec.store_host.ip, rec.store_host.port, rec.physical_offset),
        key_tokens(rec.keys), rec.tags or None, rec.uniq_key or None, dict(rec.property_map),
        rec.body, rec.body_crc, rec.reconsume_times, rec.prepared_transaction_offset,
        utc_date(rec.store_timestamp),
    )


def range_records(r: ByteRange, check_crc: bool = True,
                  ) -> Iterator[commitlog.Record | RangeEnd]:
    """The records of a range, then its RangeEnd."""
    for item in iter_range(r, check_crc):
        yield item if isinstance(item, RangeEnd) else item[1]
