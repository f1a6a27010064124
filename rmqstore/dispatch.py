"""The dispatch record: what the commitlog writer hands every builder for one stored record."""

from typing import NamedTuple

from rmqstore import delay
from rmqstore.formats import commitlog
from rmqstore.formats import properties as props_fmt
from rmqstore.formats.javahash import tags_code as tag_hash
from rmqstore.layout import SCHEDULE_TOPIC

_new_tuple = tuple.__new__


class DispatchRecord(NamedTuple):
    topic: str
    queue_id: int
    queue_offset: int
    phy_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    keys: str
    uniq_key: str
    sys_flag: int
    prepared_transaction_offset: int


def tags_code(topic: str, props: dict[str, str], store_timestamp: int) -> int:
    """Consume-queue tags code: delivery time on the schedule topic, else the tag hash."""
    if topic == SCHEDULE_TOPIC:
        level = props.get(props_fmt.DELAY, "")
        if level.lstrip("-").isdigit() and int(level) > 0:
            return store_timestamp + delay.delay_ms(int(level))
    return tag_hash(props.get(props_fmt.TAGS))


def from_meta(m: commitlog.RecordMeta | commitlog.Record) -> DispatchRecord:
    """The dispatch record of a record checked by ``commitlog.decode_meta`` (no body copy) or
    decoded in full by ``commitlog.decode``."""
    p = m.property_map if isinstance(m, commitlog.Record) else props_fmt.parse(m.properties)
    topic, ts = m.topic, m.store_timestamp
    return _new_tuple(
        DispatchRecord,  # in field order, without NamedTuple's slower keyword __new__
        (
            topic, m.queue_id, m.queue_offset, m.physical_offset, m.total_size,
            tags_code(topic, p, ts), ts, p.get(props_fmt.KEYS, ""),
            p.get(props_fmt.UNIQ_KEY, ""), m.sys_flag, m.prepared_transaction_offset,
        ),
    )  # fmt: skip


def from_record(r: commitlog.Record) -> DispatchRecord:
    return from_meta(r)


def goes_to_consume_queue(sys_flag: int) -> bool:
    """Only non-transactional and committed records get a consume-queue unit."""
    return not sys_flag & commitlog.NO_QUEUE_OFFSET_BIT


def index_keys(d: DispatchRecord) -> list[str]:
    """Index keys of a record: ``topic#UNIQ_KEY`` and ``topic#k`` per non-empty KEYS token.

    Rollback records are not indexed.
    """
    return index_keys_of(d.topic, d.uniq_key, d.keys, d.sys_flag)


def index_keys_of(topic: str, uniq_key: str, keys: str, sys_flag: int) -> list[str]:
    """``index_keys`` from the fields of a record."""
    if commitlog.transaction_type(sys_flag) == commitlog.TRANSACTION_ROLLBACK_TYPE:
        return []
    out = []
    if uniq_key:
        out.append(f"{topic}#{uniq_key}")
    if keys:
        out.extend(f"{topic}#{k}" for k in keys.split(" ") if k)
    return out
