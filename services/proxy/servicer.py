"""``apache.rocketmq.v2.MessagingService``, send side: QueryRoute, Heartbeat, Telemetry,
SendMessage, EndTransaction, NotifyClientTermination. Each RPC answers business failures
as a ``Status`` in its reply (gRPC status OK), as the protocol requires.

The consumer RPCs (QueryAssignment, ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue) are in ``consumer_rpcs``, mixed in here.
"""

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb
from rmqstore.rocketmq import service_pb2_grpc
from rmqstore.v1 import common_pb2
from services.proxy import settings, status
from services.proxy.appender import Appender
from services.proxy.auth import Authenticator
from services.proxy.clients import Client, ClientRegistry
from services.proxy.config import ProxyConfig
from services.proxy.consume import Consumption
from services.proxy.consumer_rpcs import ConsumerRpcs
from services.proxy.produce import TYPE_NAMES, Sender, now_ms
from services.proxy.routes import Router
from services.proxy.status import BusinessError
from services.proxy.topics import TopicBook
from services.proxy.transactions import Transactions

log = logging.getLogger(__name__)
add_to_server = service_pb2_grpc.add_MessagingServiceServicer_to_server
CLIENT_ID = "x-mq-client-id"
REPEAT_SETTINGS_S = (0.5, 1, 2, 4, 8)
OK_STATUS = status.ok()
SOURCES = {pb.SOURCE_CLIENT: "client", pb.SOURCE_SERVER_CHECK: "check"}
CONSUMER_TYPES = frozenset((pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER))


def peer_host(peer: str) -> str:
    """``ipv4:1.2.3.4:5`` / ``ipv6:[::1]:5`` as the writer's host text ("" if neither)."""
    kind, _, rest = peer.partition(":")
    return rest if kind in ("ipv4", "ipv6") else ""


class MessagingServicer(ConsumerRpcs, service_pb2_grpc.MessagingServiceServicer):
    def __init__(self, config: ProxyConfig, topics: TopicBook, appender: Appender,
                 router: Router, metrics: Any) -> None:  # fmt: skip
        self.config = config
        self.topics = topics
        self.appender = appender
        self.router = router
        self.metrics = metrics
        self.consumption: Consumption | None = None  # set when the proxy knows the store
        self.auth = Authenticator(
            config.access_key, config.secret_key, config.signature_window_s
        )
        self.clients = ClientRegistry(metrics.set_clients)
        self.sender = Sender(config.max_body_size, config.max_delay_ms)
        self._send_counters: dict[tuple[str, int], Any] = {}  # (topic, type) -> its child
        self.transactions = Transactions(
            config, appender, self.clients,
            on_end=lambda outcome, source: metrics.transactions.labels(outcome, source).inc(),
            on_check=lambda result: metrics.transaction_checks.labels(result).inc(),
        )  # fmt: skip
        self.transactions.on_open_count = metrics.open_transactions.set
        appender.on_batch = metrics.batch_size.observe

    def _caller(self, context: Any, rpc: str) -> str:
        """Check the call's credentials and client id; the client id."""
        md = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        self.auth.check(md)
        client_id = md.get(CLIENT_ID, "")
        if not client_id.strip():
            raise BusinessError(pb.CLIENT_ID_REQUIRED, f"{CLIENT_ID} header is missing")
        if rpc not in ("QueryRoute", "Telemetry"):
            known = self.clients.clients.get(client_id)
            if known is not None:
                known.started = True
        return client_id

    def _refused(self, rpc: str, e: BusinessError) -> pb.Status:
        self.metrics.errors.labels(rpc, status.name(e.code)).inc()
        log.info("%s refused: %s %s", rpc, status.name(e.code), e)
        return status.of(e)

    async def QueryRoute(self, request, context):  # noqa: N802
        try:
            self._caller(context, "QueryRoute")
            topic = await self.topics.get(request.topic.name, fresh=True)
            queues = await self.router.cluster_queues(topic)
        except BusinessError as e:
            return spb.QueryRouteResponse(status=self._refused("QueryRoute", e))
        return spb.QueryRouteResponse(status=status.ok(), message_queues=queues)

    async def Heartbeat(self, request, context):  # noqa: N802
        try:
            client = self.clients.get(self._caller(context, "Heartbeat"))
            if request.client_type in CONSUMER_TYPES:  # a consumer's first call names its group
                self._group(request.group)
        except BusinessError as e:
            return spb.HeartbeatResponse(status=self._refused("Heartbeat", e))
        if request.client_type:
            client.client_type = request.client_type
        return spb.HeartbeatResponse(status=status.ok())

    async def NotifyClientTermination(self, request, context):  # noqa: N802
        try:
            client_id = self._caller(context, "NotifyClientTermination")
        except BusinessError as e:
            return spb.NotifyClientTerminationResponse(
                status=self._refused("NotifyClientTermination", e)
            )
        self.clients.drop(client_id)
        return spb.NotifyClientTerminationResponse(status=status.ok())

    async def Telemetry(self, request_iterator, context) -> AsyncIterator[spb.TelemetryCommand]:  # noqa: N802
        try:
            client_id = self._caller(context, "Telemetry")
        except BusinessError as e:
            yield spb.TelemetryCommand(status=self._refused("Telemetry", e))
            return
        client = self.clients.open_stream(client_id)
        outbox = client.outbox
        assert outbox is not None

        async def read() -> None:
            first = True
            try:
                async for command in request_iterator:
                    if command.HasField("settings"):
                        self.clients.settings(client_id, command.settings)
                        answer = self._settings_reply(command.settings)
                        outbox.put_nowait(answer)
                        if first and command.settings.user_agent.language == pb.NODE_JS:
                            repeats.append(asyncio.ensure_future(self._repeat(client, answer)))
                        first = False
                    # thread stack traces and verify results are not asked for: ignored
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the client went away
                log.debug("telemetry stream of %s ended: %s", client_id, e)
            finally:
                outbox.put_nowait(None)

        repeats: list[asyncio.Future] = []
        reader = asyncio.ensure_future(read())
        try:
            while (command := await outbox.get()) is not None:
                yield command
        finally:
            reader.cancel()
            for r in repeats:
                r.cancel()
            self.clients.close_stream(client, outbox)

    def _settings_reply(self, client: pb.Settings) -> spb.TelemetryCommand:
        """The Settings reply; a consumer's carries its group's FIFO flag and attempts."""
        if not client.HasField("subscription") or self.consumption is None:
            return settings.reply(client, self.config.max_body_size)
        try:
            g = self.consumption.group(self._group(client.subscription.group))
        except BusinessError:  # a bad group name is refused by its first receive
            return settings.reply(client, self.config.max_body_size)
        return settings.reply(client, self.config.max_body_size, g.orderly, g.max_attempts)

    async def _repeat(self, client: Client, answer: spb.TelemetryCommand) -> None:
        """Answer a Node.js client's first Settings again until it makes a call: its
        ``startup()`` waits for a reply without noticing one that came before it began to
        wait (its routes took longer than our answer), and would wait forever."""
        for delay_s in REPEAT_SETTINGS_S:
            await asyncio.sleep(delay_s)
            if client.started or not client.push(answer):
                return

    async def SendMessage(self, request, context):  # noqa: N802
        """Each message is checked on its own; the good plain ones are stored as one batch,
        each transactional one as its half message. One entry per message, in order."""
        try:
            client_id = self._caller(context, "SendMessage")
            if not request.messages:
                raise BusinessError(pb.BAD_REQUEST, "no message to send")
            if not await self.router.writable():  # drained: as RocketMQ 5's NO_PERMISSION
                raise BusinessError(pb.FORBIDDEN, f"broker {self.config.broker_name} is "
                                    "read-only (drained): send to another broker")  # fmt: skip
        except BusinessError as e:
            return spb.SendMessageResponse(status=self._refused("SendMessage", e))
        peer, now = peer_host(context.peer()), now_ms()
        entries: list[spb.SendResultEntry | None] = []
        plain: list[tuple[int, Any, str, int]] = []  # entry index, record, topic, type
        seen: dict[str, Any] = {}  # this request's topics, looked up once
        for m in request.messages:
            try:
                name = m.topic.name
                topic = seen.get(name)
                if topic is None:
                    topic = seen[name] = await self.topics.get(name)
                kind, record = self.sender.prepare(m, topic, peer, now)
                if kind == pb.TRANSACTION:
                    assert isinstance(record, common_pb2.Message)
                    tid, offset = await self.transactions.send(m, record, client_id)
                    entries.append(self._sent(record.unique_key, topic.name, kind, tid, offset))
                    continue
            except BusinessError as e:
                entries.append(self._failed(m, e))
                continue
            plain.append((len(entries), record, topic.name, kind))
            entries.append(None)
        if plain:
            try:
                results = await self.appender.put([r for _i, r, _t, _k in plain], sender=client_id)
            except BusinessError as e:
                for i, _r, _t, _k in plain:
                    entries[i] = self._failed(request.messages[i], e)
            else:
                if len(plain) == len(entries) and not any(r.status for r in results):
                    return self._all_sent(plain, results)  # every one stored: the common case
                for (i, r, topic_name, kind), result in zip(plain, results, strict=True):
                    entries[i] = self._sent(r.unique_key, topic_name, kind, "", result.queue_offset,
                                            result.status)  # fmt: skip
        done = [e for e in entries if e is not None]
        codes = {e.status.code for e in done}
        if codes == {pb.OK}:
            top = status.ok()
        elif len(codes) == 1:
            top = done[0].status
        else:
            top = pb.Status(code=pb.MULTIPLE_RESULTS, message="messages had different results")
        return spb.SendMessageResponse(status=top, entries=done)

    def _count(self, topic: str, kind: int, n: int = 1) -> None:
        counter = self._send_counters.get((topic, kind))
        if counter is None:
            counter = self.metrics.sends.labels(topic, TYPE_NAMES[kind].lower())
            if len(self._send_counters) < 10_000:
                self._send_counters[(topic, kind)] = counter
        counter.inc(n)

    def _sent(self, message_id: str, topic: str, kind: int, tid: str, offset: int,
              replica: int = 0) -> spb.SendResultEntry:  # fmt: skip
        """A stored message's entry: OK, or its replica status (spec rocketmq-ha.md §5)."""
        self._count(topic, kind)
        return spb.SendResultEntry(
            status=status.REPLICA_STATUSES.get(replica, OK_STATUS), message_id=message_id,
            transaction_id=tid, offset=offset,
        )  # fmt: skip

    def _all_sent(self, stored: list[tuple[int, Any, str, int]], results: list
                  ) -> spb.SendMessageResponse:  # fmt: skip
        """The reply when every message was stored (entries filled in place, metrics counted
        once per topic and type)."""
        reply = spb.SendMessageResponse(status=OK_STATUS)
        add = reply.entries.add
        counts: dict[tuple[str, int], int] = {}
        for (_i, r, topic, kind), result in zip(stored, results, strict=True):
            add(status=OK_STATUS, message_id=r.unique_key, offset=result.queue_offset)
            counts[(topic, kind)] = counts.get((topic, kind), 0) + 1
        for (topic, kind), n in counts.items():
            self._count(topic, kind, n)
        return reply

    def _failed(self, m: pb.Message, e: BusinessError) -> spb.SendResultEntry:
        return spb.SendResultEntry(
            status=self._refused("SendMessage", e), message_id=m.system_properties.message_id
        )

    async def EndTransaction(self, request, context):  # noqa: N802
        log.debug("EndTransaction %s", request)
        try:
            self._caller(context, "EndTransaction")
            await self.transactions.end(
                request.transaction_id,
                request.message_id,
                request.resolution,
                SOURCES.get(request.source, "client"),
            )
        except BusinessError as e:
            return spb.EndTransactionResponse(status=self._refused("EndTransaction", e))
        return spb.EndTransactionResponse(status=status.ok())
