"""One record as an export row, field by field from ``commitlog.decode``: the oracle that
the export's column-wise batches are checked against."""

from pipelines.records import key_tokens, utc_date
from rmqstore.formats import commitlog
from rmqstore.formats.msgid import offset_msg_id


def row(rec: commitlog.Record) -> dict:
    """A record with the export's columns (``export_batches.SCHEMA``), as Arrow's
    ``to_pylist`` gives them back (a map as a list of pairs)."""
    return {
        "topic": rec.topic,
        "queue_id": rec.queue_id,
        "queue_offset": rec.queue_offset,
        "phy_offset": rec.physical_offset,
        "size": rec.total_size,
        "sys_flag": rec.sys_flag,
        "flag": rec.flag,
        "store_timestamp": rec.store_timestamp,
        "born_timestamp": rec.born_timestamp,
        "store_host": str(rec.store_host),
        "born_host": str(rec.born_host),
        "msg_id": offset_msg_id(rec.store_host.ip, rec.store_host.port, rec.physical_offset),
        "keys": key_tokens(rec.keys),
        "tags": rec.tags or None,
        "uniq_key": rec.uniq_key or None,
        "properties": list(rec.property_map.items()),
        "body": rec.body,
        "body_crc": rec.body_crc,
        "reconsume_times": rec.reconsume_times,
        "prepared_transaction_offset": rec.prepared_transaction_offset,
        "date": utc_date(rec.store_timestamp),
    }
