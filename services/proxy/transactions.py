"""Transactional messages as RocketMQ 4.9 stores them, and the checks of open ones.

* send: a *half* record in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, an ordinary record
  (sys flag NOT_TYPE, as 4.9 resets it) with ``REAL_TOPIC``, ``REAL_QID``, ``TRAN_MSG=true``
  and ``PGROUP`` (the topic, as RocketMQ 5's proxy names the producer group);
* commit: the half's message re-put to its real topic and queue with sys flag COMMIT_TYPE and
  ``PREPAREDTRANSACTIONOFFSET`` = the half's commitlog offset (``TRAN_MSG``/``REAL_*`` gone),
  plus an op record; rollback: the op record only. Op record: ``RMQ_SYS_TRANS_OP_HALF_TOPIC``
  queue 0, tag ``d``, body = the half's queue offset in decimal. Commit and op are one put.

The transaction id handed to the producer is ``<half commitlog offset><half queue offset>``,
16 hex digits each: an EndTransaction is resolved from the store even after a restart of the
proxy (the half record is read back and its UNIQ_KEY must be the request's message id).

Open transactions are kept in memory: after ``transaction_timeout_s`` the proxy pushes a
RecoverOrphanedTransactionCommand to a live producer (the one that sent it while connected,
else one declaring the topic), then again with back-off; after ``transaction_check_max``
checks it rolls the transaction back. A restarted proxy finds the open ones again in the
store (``recovery``, in the background: it waits for the consume queues to be built).
"""

import asyncio
import hashlib
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from rmqstore.formats import commitlog
from rmqstore.formats import properties as P
from rmqstore.layout import TRANS_HALF_TOPIC
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb
from rmqstore.transaction_records import commit_record, half_record, op_record
from rmqstore.v1 import common_pb2
from services.proxy.appender import Appender
from services.proxy.clients import ClientRegistry
from services.proxy.config import ProxyConfig
from services.proxy.status import BusinessError

log = logging.getLogger(__name__)
TRANSACTION_ID = re.compile(r"^[0-9A-F]{32}$")
RESOLVED_REMEMBERED = 100_000


def transaction_id(phy_offset: int, queue_offset: int) -> str:
    return f"{phy_offset:016X}{queue_offset:016X}"


def parse_transaction_id(tid: str) -> tuple[int, int]:
    if not TRANSACTION_ID.fullmatch(tid):
        raise BusinessError(pb.INVALID_TRANSACTION_ID, f"transaction id {tid!r} is malformed")
    return int(tid[:16], 16), int(tid[16:], 16)


def check_message(m: pb.Message) -> pb.Message:
    """The message of a check command, in the form deliveries have (spec §9.4)."""
    out = pb.Message()
    out.CopyFrom(m)
    sp = out.system_properties
    sp.message_type = pb.TRANSACTION
    sp.body_encoding = pb.IDENTITY
    sp.body_digest.CopyFrom(
        pb.Digest(type=pb.MD5, checksum=hashlib.md5(m.body).hexdigest().upper())
    )
    return out


@dataclass
class Open:
    tid: str
    message_id: str
    topic: str
    message: pb.Message  # as sent (for checks)
    producer: str  # x-mq-client-id of the sender
    next_check: float
    checks: int = 0


class Transactions:
    def __init__(self, config: ProxyConfig, appender: Appender, clients: ClientRegistry,
                 on_end: Callable[[str, str], None] | None = None,
                 on_check: Callable[[str], None] | None = None) -> None:  # fmt: skip
        self.config = config
        self.appender = appender
        self.clients = clients
        self.open: dict[str, Open] = {}
        self.resolved: OrderedDict[str, int] = OrderedDict()
        self.on_end = on_end
        self.on_check = on_check
        self._task: asyncio.Task | None = None
        self._recovery: asyncio.Task | None = None
        self.on_open_count: Callable[[int], None] | None = None  # the open count, on change

    def start(self, recovery: Coroutine[Any, Any, int] | None = None) -> None:
        """Start the checks; ``recovery`` (finding the store's open transactions again) runs
        beside them, in the background."""
        self._task = asyncio.ensure_future(self._check_loop())
        if recovery is not None:
            self._recovery = asyncio.ensure_future(self._recover(recovery))

    @staticmethod
    async def _recover(recovery: Coroutine[Any, Any, int]) -> None:
        try:
            await recovery
        except Exception:
            log.exception("recovering the open transactions failed")

    async def close(self) -> None:
        for task in (self._task, self._recovery):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def send(
        self, m: pb.Message, record: common_pb2.Message, producer: str
    ) -> tuple[str, int]:
        """Store the half message; (transaction id, its queue offset)."""
        [result] = await self.appender.put([half_record(record)])
        tid = transaction_id(result.phy_offset, result.queue_offset)
        self.open[tid] = Open(
            tid, m.system_properties.message_id, m.topic.name, m, producer,
            time.monotonic() + self.config.transaction_timeout_s,
        )  # fmt: skip
        self._count()
        return tid, result.queue_offset

    def _count(self) -> None:
        if self.on_open_count is not None:
            self.on_open_count(len(self.open))

    async def end(self, tid: str, message_id: str, resolution: int, source: str) -> None:
        phy, queue_offset = parse_transaction_id(tid)
        if resolution not in (pb.COMMIT, pb.ROLLBACK):
            return  # unspecified: the transaction stays open
        if tid in self.resolved:
            return  # a repeated resolution (a retry, or a check answered late)
        r = await self._half(phy, queue_offset, message_id)
        self.resolved[tid] = resolution
        try:
            ops = [op_record(queue_offset)]
            await self.appender.put([commit_record(r), *ops] if resolution == pb.COMMIT else ops)
        except BaseException:
            self.resolved.pop(tid, None)
            raise
        self.open.pop(tid, None)
        self._count()
        while len(self.resolved) > RESOLVED_REMEMBERED:
            self.resolved.popitem(last=False)
        if self.on_end is not None:
            self.on_end("commit" if resolution == pb.COMMIT else "rollback", source)

    async def _half(self, phy: int, queue_offset: int, message_id: str) -> commitlog.Record:
        """The half record the id names; INVALID_TRANSACTION_ID when it names none."""
        try:
            raw = await self.appender.read(phy)
            r = commitlog.decode(raw, 0, check_crc=False)
        except BusinessError:
            raise BusinessError(
                pb.INVALID_TRANSACTION_ID, "transaction id names no half message"
            ) from None
        except Exception:
            raise BusinessError(
                pb.INVALID_TRANSACTION_ID, "transaction id names no half message"
            ) from None
        props = r.property_map
        if (
            r.topic != TRANS_HALF_TOPIC
            or r.queue_offset != queue_offset
            or P.REAL_TOPIC not in props
            or (message_id and r.uniq_key != message_id)
        ):
            raise BusinessError(
                pb.INVALID_TRANSACTION_ID,
                "transaction id does not name a half message of this message id",
            )
        return r

    async def _check_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.checker_period_s)
            try:
                await self.check_due(time.monotonic())
            except Exception:
                log.exception("transaction check pass failed")

    async def check_due(self, now: float) -> None:
        for t in [t for t in self.open.values() if t.next_check <= now]:
            if t.checks >= self.config.transaction_check_max:
                log.info("transaction %s unresolved after %d checks: rolled back", t.tid, t.checks)
                try:
                    await self.end(t.tid, t.message_id, pb.ROLLBACK, "server")
                except BusinessError as e:
                    log.warning("rolling back %s failed: %s", t.tid, e)
                continue
            t.checks += 1
            t.next_check = now + self.config.check_delay_s(t.checks)
            producer = self.clients.producer_for(t.topic, t.producer)
            sent = producer is not None and producer.push(
                spb.TelemetryCommand(
                    recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                        message=check_message(t.message), transaction_id=t.tid
                    )
                )
            )
            if self.on_check is not None:
                self.on_check("sent" if sent else "no_producer")
