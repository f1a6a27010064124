"""4.x transactions (``spec`` §3.2, §4 "Transactions"): a prepared send (sys flag 0x4) is
stored as a half message; END_TRANSACTION (commit 8, rollback 12, unknown 0) resolves it from
the store; a half left open longer than ``timeout_s`` is checked: CHECK_TRANSACTION_STATE
(oneway) goes to the connection of a live producer of its group (announced by HEART_BEAT),
every ``interval_s``, at most ``check_max`` times, as RocketMQ 4.9.8 does.

The records are ``rmqstore.transaction_records``'. Open halves are tracked in memory (a
restarted front end checks none of the halves left open before; their producers' own
END_TRANSACTION still resolves them, as the half is read back from the store).
"""

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rmqstore.appender import Appender
from rmqstore.formats import commitlog
from rmqstore.formats import properties as P
from rmqstore.formats import remoting as R
from rmqstore.layout import TRANS_HALF_TOPIC
from rmqstore.remoting_net import Connection
from rmqstore.transaction_records import commit_record, half_record, op_record
from rmqstore.v1 import common_pb2
from services.remoting.clients import Clients

log = logging.getLogger("rmqstore.remoting")
COMMIT, ROLLBACK, UNKNOWN = 8, 12, 0
CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
RESOLVED_REMEMBERED = 100_000


@dataclass
class OpenHalf:
    phy_offset: int
    queue_offset: int
    group: str
    msg_id: str  # the offset message id of the half
    uniq: str
    next_check: float
    checks: int = 0


class Transactions:
    """``read(offset)`` reads one record through the writer; ``msg_id(offset)`` is the offset
    message id of a half at that commitlog offset."""

    def __init__(self, appender: Appender, clients: Clients,
                 read: Callable[[int], Awaitable[bytes]], msg_id: Callable[[int], str],
                 timeout_s: float = 6.0, interval_s: float = 60.0, check_max: int = 15,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.appender = appender
        self.clients = clients
        self.read = read
        self.msg_id = msg_id
        self.timeout_s = timeout_s
        self.interval_s = interval_s
        self.check_max = check_max
        self.clock = clock
        self.open: dict[int, OpenHalf] = {}  # half commitlog offset ->
        self.resolved: OrderedDict[int, int] = OrderedDict()
        self.checks_sent = 0
        self._task: asyncio.Task[None] | None = None

    async def prepare(self, message: common_pb2.Message, group: str, sender: str) -> OpenHalf:
        """Store the half message of ``message`` (a prepared send of ``group``)."""
        [stored] = await self.appender.put([half_record(message, group)], sender=sender)
        half = OpenHalf(stored.phy_offset, stored.queue_offset, group,
                        self.msg_id(stored.phy_offset), message.unique_key,
                        self.clock() + self.timeout_s)  # fmt: skip
        self.open[stored.phy_offset] = half
        return half

    async def end(self, conn: Connection, req: R.Command) -> R.Command | None:
        """END_TRANSACTION: mostly oneway (no answer); as a request, SUCCESS or SYSTEM_ERROR."""
        try:
            group = req.required("producerGroup")
            queue_offset = int(req.required("tranStateTableOffset"))
            phy = int(req.required("commitLogOffset"))
            resolution = int(req.required("commitOrRollback"))
        except ValueError as e:
            return R.response_to(req, R.ResponseCode.SYSTEM_ERROR, remark=str(e))
        if resolution not in (COMMIT, ROLLBACK):
            if req.remark:
                log.info("transaction %d of %s left open: %s", phy, group, req.remark)
            return R.response_to(req)
        if phy in self.resolved:
            return R.response_to(req)  # a repeated resolution
        try:
            half = commitlog.decode(await self.read(phy), 0, check_crc=False)
        except Exception:
            half = None
        if (half is None or half.topic != TRANS_HALF_TOPIC or half.queue_offset != queue_offset
                or half.property_map.get(P.PGROUP) != group):  # fmt: skip
            log.warning("END_TRANSACTION from %s names no half message of group %s at %d/%d",
                        conn.remote, group, phy, queue_offset)  # fmt: skip
            return R.response_to(req, R.ResponseCode.SYSTEM_ERROR,
                                 remark="Find prepared transaction message failed")  # fmt: skip
        self.resolved[phy] = resolution
        try:
            ops = [op_record(queue_offset)]
            await self.appender.put([commit_record(half), *ops] if resolution == COMMIT else ops)
        except BaseException:
            self.resolved.pop(phy, None)
            raise
        self.open.pop(phy, None)
        while len(self.resolved) > RESOLVED_REMEMBERED:
            self.resolved.popitem(last=False)
        return R.response_to(req)

    def start(self, period_s: float = 0.5) -> None:
        self._task = asyncio.ensure_future(self._loop(period_s))

    async def _loop(self, period_s: float) -> None:
        while True:
            await asyncio.sleep(period_s)
            try:
                await self.check_due()
            except Exception:
                log.exception("transaction check pass failed")

    async def check_due(self) -> None:
        now = self.clock()
        for half in [h for h in self.open.values() if h.next_check <= now]:
            if half.checks >= self.check_max:
                log.warning("transaction %s of %s unresolved after %d checks: no longer checked",
                            half.msg_id, half.group, half.checks)  # fmt: skip
                del self.open[half.phy_offset]
                continue
            member = self.clients.producer(half.group)
            half.next_check = now + self.interval_s
            if member is None:
                continue  # not counted: checked again once a producer of the group is back
            half.checks += 1
            try:
                body = await self._check_body(half)
            except Exception as e:
                log.warning("cannot read half message %s: %s", half.msg_id, e)
                continue
            ext = {"commitLogOffset": str(half.phy_offset), "msgId": half.uniq or half.msg_id,
                   "tranStateTableOffset": str(half.queue_offset), "offsetMsgId": half.msg_id,
                   "transactionId": half.uniq or half.msg_id}  # fmt: skip
            member.connection.oneway(R.Command(code=R.RequestCode.CHECK_TRANSACTION_STATE,
                                               ext=ext, body=body))  # fmt: skip
            self.checks_sent += 1

    async def _check_body(self, half: OpenHalf) -> bytes:
        """The half's record with its real topic and queue, and the check count (as 4.9.8)."""
        r = commitlog.decode(await self.read(half.phy_offset), 0, check_crc=False)
        props = dict(r.property_map)
        props[CHECK_TIMES] = str(half.checks)
        r.topic = props.get(P.REAL_TOPIC, r.topic)
        r.queue_id = int(props.get(P.REAL_QID, r.queue_id))
        r.properties = P.encode(props)
        return commitlog.encode(r)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


