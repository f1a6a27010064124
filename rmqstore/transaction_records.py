"""The records of a transactional message as RocketMQ 4.9 stores them, for every front end
that takes transactions (the RocketMQ 5 proxy, the 4.x remoting broker):

* half: the message in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, an ordinary record (transaction
  bits cleared, as 4.9 resets them) with ``REAL_TOPIC``, ``REAL_QID``, ``TRAN_MSG=true`` and
  ``PGROUP`` (the producer group);
* commit: the half's message re-put to its real topic and queue with sys flag COMMIT_TYPE and
  ``PREPAREDTRANSACTIONOFFSET`` = the half's commitlog offset (``TRAN_MSG``/``REAL_*`` gone);
* op record (after a commit or a rollback): ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0, tag
  ``d``, body = the half's queue offset in decimal.
"""

from rmqstore.formats import commitlog
from rmqstore.formats import properties as P
from rmqstore.layout import TRANS_HALF_TOPIC, TRANS_OP_TOPIC
from rmqstore.v1 import common_pb2

OP_TAG = "d"
# properties of the half record that the commit record does not carry over (the writer
# sets TAGS, KEYS, UNIQ_KEY, WAIT and CLUSTER from their own fields)
_NOT_CARRIED = frozenset(
    (P.TAGS, P.KEYS, P.UNIQ_KEY, P.WAIT, P.CLUSTER, P.REAL_TOPIC, P.REAL_QID, P.TRAN_MSG, P.DELAY)
)


def half_record(m: common_pb2.Message, producer_group: str = "") -> common_pb2.Message:
    """The half record of a transactional message bound for ``m.topic``/``m.queue_id``.
    ``PGROUP``: ``producer_group`` (RocketMQ 5's proxy names the topic), unless ``m`` has
    one; ``TRAN_MSG`` unless ``m`` has it."""
    half = common_pb2.Message()
    half.CopyFrom(m)
    half.topic, half.queue_id = TRANS_HALF_TOPIC, 0
    half.sys_flag = m.sys_flag & ~commitlog.TRANSACTION_TYPE_MASK
    present = {p.name for p in m.properties}
    added = (
        (P.TRAN_MSG, "true"), (P.PGROUP, producer_group or m.topic),
        (P.REAL_TOPIC, m.topic), (P.REAL_QID, str(m.queue_id)),
    )  # fmt: skip
    half.properties.extend(
        common_pb2.Property(name=n, value=v) for n, v in added if n not in present
    )
    return half


def commit_record(r: commitlog.Record) -> common_pb2.Message:
    props = r.property_map
    return common_pb2.Message(
        topic=props[P.REAL_TOPIC],
        queue_id=int(props[P.REAL_QID]),
        body=r.body,
        tags=r.tags,
        keys=r.keys,
        unique_key=r.uniq_key,
        properties=[
            common_pb2.Property(name=n, value=v) for n, v in props.items() if n not in _NOT_CARRIED
        ],
        flag=r.flag,
        sys_flag=commitlog.TRANSACTION_COMMIT_TYPE,
        born_timestamp=r.born_timestamp,
        born_host=str(r.born_host),
        prepared_transaction_offset=r.physical_offset,
    )


def op_record(half_queue_offset: int) -> common_pb2.Message:
    return common_pb2.Message(
        topic=TRANS_OP_TOPIC,
        queue_id=0,
        body=str(half_queue_offset).encode(),
        tags=OP_TAG,
        without_unique_key=True,
    )
