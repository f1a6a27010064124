"""RocketMQ 4.x consumer groups at the broker (``spec/rocketmq-remoting.md`` §3.3): who is in
a group, and which client holds which queue of an orderly consumer.

* HEART_BEAT 34 keeps each member (``clients.Clients``: its connection, client id,
  subscriptions, consumeType/messageModel/consumeFromWhere), creates ``%RETRY%<group>``
  (1 queue, perm 6, registered with the name servers) and, when the group's client ids or
  subscribed topics changed, sends NOTIFY_CONSUMER_IDS_CHANGED 40 (oneway) to **every**
  member, the newcomer included, before the heartbeat's answer (as 4.9.8). Subscriptions
  are kept as the client sent them: a push consumer subscribes its ``%RETRY%<group>`` itself.
* UNREGISTER_CLIENT 35, a closed connection and ``clients.EXPIRY_S`` (120 s) without a
  heartbeat remove a member; the rest are notified.
* GET_CONSUMER_LIST_BY_GROUP 38: the members' client ids.
* LOCK_BATCH_MQ 41 / UNLOCK_BATCH_MQ 42: a lock per (group, topic, broker name, queue),
  free when unheld, held by the same client id, or not renewed for ``LOCK_EXPIRY_S`` (60 s).
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from rmqstore import retries
from rmqstore.formats import remoting as R
from rmqstore.formats.topics_json import PERM_READ, PERM_WRITE
from rmqstore.remoting_net import Answer, Connection
from rmqstore.v1 import groups_pb2
from services.remoting import topics as T
from services.remoting.clients import Clients

log = logging.getLogger("rmqstore.remoting")
C = R.RequestCode
RC = R.ResponseCode
LOCK_EXPIRY_S = 60.0  # RocketMQ's rocketmq.broker.rebalance.lockMaxLiveTime
RETRY_QUEUES = 1  # an auto-created group's retryQueueNums
RETRY_PERM = PERM_READ | PERM_WRITE
REGISTRY_TIMEOUT_S = 10.0

Handler = Callable[[Connection, R.Command], Answer | Awaitable[Answer]]
LockKey = tuple[str, str, str, int]  # group, topic, broker name, queue id


@dataclass
class Lock:
    client_id: str
    renewed: float


class GroupWatcher(Protocol):
    """What the groups' metrics are told (``metrics_remoting.ConsumerGroupMetrics``)."""

    def members(self, group: str, count: int) -> None: ...


def _shape(clients: Clients, group: str) -> tuple[frozenset[str], frozenset[str]]:
    """What a change of notifies the members: their client ids and their topics."""
    members = clients.consumers.get(group, {}).values()
    return (
        frozenset(m.client_id for m in members),
        frozenset(t for m in members for t in m.subscriptions),
    )


def _mq(value: Any) -> tuple[str, str, int]:
    """(topic, brokerName, queueId) of a MessageQueue in a lock body."""
    if not isinstance(value, dict):
        raise ValueError(f"a message queue is not an object: {value!r}")
    try:
        return str(value["topic"]), str(value["brokerName"]), int(value["queueId"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"a message queue lacks topic, brokerName or queueId: {value}") from None


def _lock_body(req: R.Command) -> tuple[str, str, list[tuple[str, str, int]]]:
    body = R.parse_json_body(req.body) if req.body else None
    if not isinstance(body, dict):
        raise ValueError("the lock body is not an object")
    group, client_id = body.get("consumerGroup"), body.get("clientId")
    if not group or not client_id:
        raise ValueError("the lock body lacks consumerGroup or clientId")
    return str(group), str(client_id), [_mq(v) for v in body.get("mqSet") or ()]


class ConsumerGroups:
    """``topics_changed`` is called after a retry topic was created (the name servers must
    learn of it)."""

    def __init__(
        self,
        clients: Clients,
        topics: T.Topics,
        topics_changed: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
        watcher: GroupWatcher | None = None,
        registry: Any = None,
    ) -> None:
        self.clients = clients
        self.topics = topics
        self.topics_changed = topics_changed
        self.clock = clock
        self.watcher = watcher
        self.locks: dict[LockKey, Lock] = {}
        self._retry_topics: set[str] = set()  # known to exist
        # the proxy's ConsumerGroups (a stub), owner of subscriptionGroup.json; None: none
        self.registry = registry
        self.configs: dict[str, groups_pb2.GroupConfig] = {}  # groups known to it
        self._asking: set[str] = set()  # CreateGroup under way (or refused for good)
        self._tasks: set[asyncio.Task[None]] = set()

    def handlers(self) -> dict[int, Handler]:
        return {
            C.HEART_BEAT: self.heartbeat,
            C.UNREGISTER_CLIENT: self.unregister_client,
            C.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            C.LOCK_BATCH_MQ: self.lock,
            C.UNLOCK_BATCH_MQ: self.unlock,
        }

    # --- membership --------------------------------------------------------------------------

    def members(self, group: str) -> list[Any]:
        return list(self.clients.consumers.get(group, {}).values())

    def _changing(self, groups: list[str], change: Callable[[], None]) -> None:
        """Run ``change`` (of the client table); notify the members of every group in
        ``groups`` whose client ids or topics it changed."""
        before = {g: _shape(self.clients, g) for g in groups}
        change()
        for g in groups:
            if _shape(self.clients, g) != before[g]:
                self.notify(g)
            if self.watcher is not None:
                self.watcher.members(g, len(self.clients.consumers.get(g, {})))

    def notify(self, group: str) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED to every member of ``group`` (oneway)."""
        for m in self.members(group):
            m.connection.oneway(
                R.Command(code=C.NOTIFY_CONSUMER_IDS_CHANGED, ext={"consumerGroup": group})
            )

    async def heartbeat(self, conn: Connection, req: R.Command) -> R.Command:
        body = R.parse_json_body(req.body) if req.body else {}
        if not isinstance(body, dict):
            raise ValueError("the heartbeat body is not an object")
        groups = [str(c.get("groupName", "")) for c in body.get("consumerDataSet") or ()]
        for g in groups:
            try:
                await self._retry_topic(g)
            except T.TopicError as e:  # the member is kept all the same; tried again next time
                log.warning("retry topic of consumer group %s not created: %s", g, e)
            self._subscription_group(g)
        self._changing(
            groups, lambda: self.clients.heartbeat(conn, body, req.language, req.version)
        )
        return R.response_to(req)  # version 409: the client's idea of the broker's version

    async def _retry_topic(self, group: str) -> None:
        """``%RETRY%<group>`` created unless it exists (nothing for a group whose retry
        topic cannot be a topic name)."""
        name = retries.group_retry_topic(group)
        if name is None or name in self._retry_topics:
            return
        if await self.topics.get(name) is None:
            await self.topics.create(name, RETRY_QUEUES, RETRY_PERM)
            log.info("created %s for consumer group %s", name, group)
            self.topics_changed()
        self._retry_topics.add(name)

    def _subscription_group(self, group: str) -> None:
        """The group created in the proxy's ``subscriptionGroup.json`` unless it is there
        (RocketMQ's autoCreateSubscriptionGroup), in the background: the heartbeat's answer
        never waits for the proxy. A failure is logged and tried again on a later heartbeat
        (a name the proxy refuses: never again)."""
        if self.registry is None or group in self.configs or group in self._asking:
            return
        self._asking.add(group)
        task = asyncio.ensure_future(self._create_group(group))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _create_group(self, group: str) -> None:
        assert self.registry is not None
        try:
            self.configs[group] = await self.registry.CreateGroup(
                groups_pb2.CreateGroupRequest(group=group), timeout=REGISTRY_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as e:
            log.warning("subscription group %s not created: %s", group, e.details())
            if e.code() == grpc.StatusCode.INVALID_ARGUMENT:
                return  # stays in _asking: not asked again
        self._asking.discard(group)

    def retry_max_times(self, group: str) -> int:
        """The group's retryMaxTimes (16 for a group the proxy has not told us of)."""
        config = self.configs.get(group)
        return config.retry_max_times if config is not None else retries.DEFAULT_MAX_RECONSUME_TIMES

    def unregister_client(self, conn: Connection, req: R.Command) -> R.Command:
        producer, consumer = req.field("producerGroup"), req.field("consumerGroup")
        self._changing(
            [consumer] if consumer else [],
            lambda: self.clients.unregister(conn, producer, consumer),
        )
        return R.response_to(req, ext={})

    def _groups_of(self, conn: Any) -> list[str]:
        return [g for g, ms in self.clients.consumers.items() if conn in ms]

    def connection_closed(self, conn: Any) -> None:
        self._changing(self._groups_of(conn), lambda: self.clients.connection_closed(conn))

    def expire(self) -> None:
        """Members without a heartbeat for ``clients.EXPIRY_S`` removed (and locks not
        renewed for ``LOCK_EXPIRY_S`` forgotten)."""
        self._changing(list(self.clients.consumers), self.clients.expire)
        limit = self.clock() - LOCK_EXPIRY_S
        for key in [k for k, lock in self.locks.items() if lock.renewed < limit]:
            del self.locks[key]

    def consumer_list(self, conn: Connection, req: R.Command) -> R.Command:
        group = req.field("consumerGroup")
        if group is None:
            raise ValueError("the custom field <consumerGroup> is null")
        ids = [m.client_id for m in self.members(group)]
        if not ids:
            return R.response_to(
                req, RC.SYSTEM_ERROR, remark=f"no consumer for this group, {group}"
            )
        return R.response_to(req, body=R.json_body({"consumerIdList": ids}))

    # --- orderly consumers' queue locks -----------------------------------------------------

    def lock(self, conn: Connection, req: R.Command) -> R.Command:
        group, client_id, mqs = _lock_body(req)
        now = self.clock()
        held = []
        for topic, broker, queue_id in mqs:
            key = (group, topic, broker, queue_id)
            lock = self.locks.get(key)
            if lock is None or lock.client_id == client_id or now - lock.renewed > LOCK_EXPIRY_S:
                self.locks[key] = Lock(client_id, now)
                held.append({"brokerName": broker, "queueId": queue_id, "topic": topic})
            else:
                log.info("%s of %s stays locked by %s, refused to %s",
                         key[1:], group, lock.client_id, client_id)  # fmt: skip
        return R.response_to(req, body=R.json_body({"lockOKMQSet": held}))

    def unlock(self, conn: Connection, req: R.Command) -> R.Command:
        group, client_id, mqs = _lock_body(req)
        for topic, broker, queue_id in mqs:
            key = (group, topic, broker, queue_id)
            lock = self.locks.get(key)
            if lock is not None and lock.client_id == client_id:
                del self.locks[key]
        return R.response_to(req)
