"""A schedule-topic record put again, as RocketMQ's schedule service puts it.

Delivered (due): the new record goes to ``REAL_TOPIC`` / ``REAL_QID`` with the body, flag,
sys flag, born time and host and reconsume times of the stored one, and a properties string
serialized from the stored properties as they are (so it still holds ``DELAY``,
``REAL_TOPIC`` and ``REAL_QID``); its tags code is its TAGS hash again.
Parked again (a delivery time not reached yet): the same record on the schedule topic with
``DELAY`` set to the new level.
"""

from rmqstore import delay
from rmqstore.errors import MessageIllegalError
from rmqstore.formats import commitlog
from rmqstore.formats import commitlog_batch as batch_fmt
from rmqstore.formats import properties as P
from rmqstore.formats.javahash import tags_code
from rmqstore.layout import SCHEDULE_TOPIC, validate_topic
from services.commitlog.messages import MessageBuilder

TRANSACTION_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"  # never delivered (RocketMQ drops it)
_VALID: set[str] = set()  # real topics checked already
_ORDERS: dict[tuple[str, ...], list[str]] = {}  # property names -> HashMap order


def encode_properties(props: dict[str, str]) -> str:
    """``properties.encode`` of a parsed map (its HashMap order cached by its names)."""
    names = tuple(props)
    order = _ORDERS.get(names)
    if order is None:
        order = P.hashmap_order(names)
        if len(_ORDERS) < 10_000:
            _ORDERS[names] = order
    return P.PROPERTY_SEPARATOR.join(f"{k}{P.NAME_VALUE_SEPARATOR}{props[k]}" for k in order)


def real_destination(rec: commitlog.Record) -> tuple[str, int]:
    """(REAL_TOPIC, REAL_QID) of a schedule record; MessageIllegalError if they are unusable."""
    props = rec.property_map
    topic, qid = props.get(P.REAL_TOPIC, ""), props.get(P.REAL_QID, "")
    try:
        if topic not in _VALID:
            validate_topic(topic)
            if len(_VALID) < 100_000:
                _VALID.add(topic)
    except Exception as e:
        where = rec.physical_offset
        raise MessageIllegalError(f"REAL_TOPIC of the record at {where}: {e}") from None
    if topic in (SCHEDULE_TOPIC, TRANSACTION_HALF_TOPIC):
        raise MessageIllegalError(f"REAL_TOPIC {topic} is not delivered")
    if not qid.isdigit() or int(qid) >= 1 << 16:
        raise MessageIllegalError(f"REAL_QID {qid!r} of the record at {rec.physical_offset}")
    return topic, int(qid)


def _prepare(builder: MessageBuilder, rec: commitlog.Record, topic: str, queue_id: int,
             props: str) -> tuple[batch_fmt.Prepared, int, str, int, int]:  # fmt: skip
    record = builder.encoder.prepare(
        topic.encode(), queue_id, rec.body, props.encode(), rec.flag, rec.sys_flag,
        rec.born_timestamp, rec.born_host, rec.reconsume_times,
        rec.prepared_transaction_offset,
    )  # fmt: skip
    return record, record[1], topic, queue_id, record[5]


def delivered(builder: MessageBuilder, rec: commitlog.Record, topic: str, queue_id: int) -> tuple:
    """The columns entry (see messages.Prepared) of a due record put to its real queue."""
    props = rec.property_map
    record, size, topic, queue_id, sys_flag = _prepare(
        builder, rec, topic, queue_id, encode_properties(props)
    )
    return (
        record, size, topic, queue_id, sys_flag, tags_code(props.get(P.TAGS)),
        props.get(P.KEYS, ""), props.get(P.UNIQ_KEY, ""), 0, rec.prepared_transaction_offset,
        not sys_flag & commitlog.NO_QUEUE_OFFSET_BIT,
    )  # fmt: skip


def parked(builder: MessageBuilder, rec: commitlog.Record, level: int) -> tuple:
    """The columns entry of a record parked again on ``level`` of the schedule topic."""
    props = dict(rec.property_map)
    props[P.DELAY] = str(level)
    record, size, topic, queue_id, sys_flag = _prepare(
        builder, rec, SCHEDULE_TOPIC, level - 1, encode_properties(props)
    )
    return (
        record, size, topic, queue_id, sys_flag, 0, props.get(P.KEYS, ""),
        props.get(P.UNIQ_KEY, ""), delay.delay_ms(level), rec.prepared_transaction_offset,
        not sys_flag & commitlog.NO_QUEUE_OFFSET_BIT,
    )  # fmt: skip
