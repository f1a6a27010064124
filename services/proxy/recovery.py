"""Open transactions found again when the proxy starts: the half messages of
``RMQ_SYS_TRANS_HALF_TOPIC`` that no op record of ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` ends, as
RocketMQ 4.9's check service compares the two queues. Each is checked again from the first
check on (its producer may have gone: the checks then go to any producer of the topic).

The queues are read from the store's consume-queue files (read-only), the records through
the writer. Half messages not yet in the consume queue when the proxy starts are not seen.
"""

import logging
import time
from pathlib import Path

from rmqstore.formats import commitlog
from rmqstore.formats import consume_queue as cq
from rmqstore.formats import properties as P
from rmqstore.layout import TRANS_HALF_TOPIC, TRANS_OP_TOPIC, StoreLayout
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.segments import parse_segment_name
from services.proxy.produce import RESERVED
from services.proxy.transactions import Open, Transactions, transaction_id

log = logging.getLogger(__name__)
SCAN_LIMIT = 100_000  # newest half messages looked at
READ_BATCH = 256


def queue_units(store: Path, topic: str) -> list[tuple[int, int]]:
    """(queue offset, commitlog offset) of every valid unit of ``topic`` queue 0."""
    qdir = StoreLayout.of(store).queue_dir(topic, 0)
    out: list[tuple[int, int]] = []
    if not qdir.is_dir():
        return out
    for f in sorted(p for p in qdir.iterdir() if p.name.isdigit()):
        start = parse_segment_name(f.name)
        if start is None:
            continue
        data = f.read_bytes()
        first = start // cq.UNIT_SIZE
        arr = cq.units(data)[: cq.valid_count(data)]
        out += [(first + i, int(u["offset"])) for i, u in enumerate(arr)]
    return out


def message_of(r: commitlog.Record) -> pb.Message:
    """The half record as the Message a check command carries."""
    props = r.property_map
    sp = pb.SystemProperties(
        message_id=r.uniq_key, keys=[k for k in r.keys.split(" ") if k],
        message_type=pb.TRANSACTION, born_host=props.get("__BORNHOST", str(r.born_host)),
    )  # fmt: skip
    if r.tags:
        sp.tag = r.tags
    sp.born_timestamp.FromMilliseconds(r.born_timestamp)
    user = {k: v for k, v in props.items() if k not in RESERVED and k != P.CLUSTER}
    return pb.Message(
        topic=pb.Resource(name=props[P.REAL_TOPIC]), body=r.body, user_properties=user,
        system_properties=sp,
    )  # fmt: skip


async def recover(store: Path, transactions: Transactions) -> int:
    """Register the open transactions of the store; how many."""
    halves = queue_units(store, TRANS_HALF_TOPIC)[-SCAN_LIMIT:]
    if not halves:
        return 0
    ops = queue_units(store, TRANS_OP_TOPIC)
    done: set[int] = set()
    for at in range(0, len(ops), READ_BATCH):
        for raw in await transactions.appender.read_many(
            [o for _q, o in ops[at : at + READ_BATCH]]
        ):
            body = commitlog.decode(raw, 0, check_crc=False).body
            if body.isdigit():
                done.add(int(body))
    todo = [(q, o) for q, o in halves if q not in done]
    first_check = time.monotonic() + transactions.config.transaction_timeout_s
    for at in range(0, len(todo), READ_BATCH):
        batch = todo[at : at + READ_BATCH]
        for (queue_offset, phy), raw in zip(
            batch, await transactions.appender.read_many([o for _q, o in batch]), strict=True
        ):
            r = commitlog.decode(raw, 0, check_crc=False)
            if P.REAL_TOPIC not in r.property_map:
                continue
            tid = transaction_id(phy, queue_offset)
            transactions.open[tid] = Open(
                tid, r.uniq_key, r.property_map[P.REAL_TOPIC], message_of(r), "", first_check
            )
    transactions._count()
    if todo:
        log.info("%d open transactions found in the store; checking them again", len(todo))
    return len(todo)
