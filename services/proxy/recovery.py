"""Open transactions found again when the proxy starts: the half messages of
``RMQ_SYS_TRANS_HALF_TOPIC`` that no op record of ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` ends, as
RocketMQ 4.9's check service compares the two queues. Each is checked again from the first
check on (its producer may have gone: the checks then go to any producer of the topic).

The queues are read from the store's consume-queue files (read-only), the records through
the writer. Every half message written before the proxy started is looked at, however old
(records retention deleted excepted: they can no longer be committed), and only once the
consume-queue builder has made the queues durable up to the writer's end at the start: a
half message (or op record) not yet in the queue files then is neither missed nor taken
for open. Until then recovery waits in the background; the proxy serves meanwhile.
"""

import asyncio
import json
import logging
import time
from pathlib import Path

import grpc

from rmqstore.formats import commitlog
from rmqstore.formats import consume_queue as cq
from rmqstore.formats import properties as P
from rmqstore.layout import TRANS_HALF_TOPIC, TRANS_OP_TOPIC, StoreLayout
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.segments import parse_segment_name
from rmqstore.v1 import commitlog_pb2
from services.proxy.produce import RESERVED
from services.proxy.transactions import Open, Transactions, transaction_id

log = logging.getLogger(__name__)
READ_BATCH = 256
BUILDER = "consume-queue"  # the consume-queue builder's progress record (layout.progress)
POLL_S = 1.0  # how often the builder's progress is looked at while recovery waits for it


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


def built_upto(store: Path) -> int:
    """The commitlog offset below which the consume-queue builder has made every queue
    durable (0: it recorded none)."""
    try:
        return int(json.loads(StoreLayout.of(store).progress(BUILDER).read_text())["offset"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


async def recover_when_built(store: Path, transactions: Transactions,
                             poll_s: float = POLL_S) -> int:  # fmt: skip
    """``recover`` once the queue files hold everything the writer had when this started;
    how many transactions were found open."""
    while True:
        try:
            offsets = await transactions.appender.stub.GetOffsets(commitlog_pb2.GetOffsetsRequest())
            break
        except grpc.aio.AioRpcError as e:  # the writer is not up yet
            log.debug("recovery waits for the writer: %s", e.details())
            await asyncio.sleep(poll_s)
    end = offsets.max_offset
    if built_upto(store) < end:
        log.info("open transactions are recovered once the consume queues are built up to "
                 "commitlog offset %d (now %d)", end, built_upto(store))  # fmt: skip
        while built_upto(store) < end:
            await asyncio.sleep(poll_s)
    return await recover(store, transactions, end, offsets.min_offset)


async def recover(store: Path, transactions: Transactions, below: int | None = None,
                  lowest: int = 0) -> int:  # fmt: skip
    """Register the open transactions of the store whose half message lies in [lowest,
    below) of the commitlog (below: None, everything the queue files hold), unless this
    process knows them already (sent or ended since it started); how many."""
    halves = [(q, o) for q, o in queue_units(store, TRANS_HALF_TOPIC)
              if o >= lowest and (below is None or o < below)]  # fmt: skip
    if not halves:
        return 0
    ops = [o for _q, o in queue_units(store, TRANS_OP_TOPIC) if o >= lowest]
    done: set[int] = set()
    for at in range(0, len(ops), READ_BATCH):
        for raw in await transactions.appender.read_many(ops[at : at + READ_BATCH]):
            body = commitlog.decode(raw, 0, check_crc=False).body
            if body.isdigit():
                done.add(int(body))
    known = transactions.open.keys() | transactions.resolved.keys()
    todo = [(q, o) for q, o in halves if q not in done and transaction_id(o, q) not in known]
    first_check = time.monotonic() + transactions.config.transaction_timeout_s
    found = 0
    for at in range(0, len(todo), READ_BATCH):
        batch = todo[at : at + READ_BATCH]
        for (queue_offset, phy), raw in zip(
            batch, await transactions.appender.read_many([o for _q, o in batch]), strict=True
        ):
            r = commitlog.decode(raw, 0, check_crc=False)
            if P.REAL_TOPIC not in r.property_map:
                continue
            tid = transaction_id(phy, queue_offset)
            if tid in transactions.open or tid in transactions.resolved:
                continue  # sent or ended meanwhile
            transactions.open[tid] = Open(
                tid, r.uniq_key, r.property_map[P.REAL_TOPIC], message_of(r), "", first_check
            )
            found += 1
    transactions._count()
    if found:
        log.info("%d open transactions found in the store; checking them again", found)
    return found
