"""``python -m services.remoting``: the broker's RocketMQ 4.x remoting front end. RocketMQ 4.x
producers and ``mqadmin`` send to it; it appends through the commitlog writer, answers
lookups through the query service, serves 4.x consumers' pulls from the store's files (it runs
on the store's machine, as the proxy does), and registers with the name servers every 30 s."""

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from rmqstore import access_keys, metrics, tls
from rmqstore.appender import Appender
from rmqstore.broker_perm import PermissionReader
from rmqstore.formats.hosts import parse_host
from rmqstore.formats.plain_acl import AclFileError
from rmqstore.formats.remoting import RequestCode
from rmqstore.metrics_remoting import ConsumerGroupMetrics, RemotingMetrics
from rmqstore.remoting_net import Handler, RemotingServer
from rmqstore.server import announce, configure_logging, freeze_startup_objects
from rmqstore.startup import StartupError, check_port_free, run_main, split_address
from rmqstore.v1 import groups_pb2_grpc
from services.remoting import registration
from services.remoting.acl import Accounts, Signed
from services.remoting.broker import Broker, BrokerInfo
from services.remoting.broker_config import BrokerConfig
from services.remoting.clients import Clients
from services.remoting.consumer_admin import ConsumerAdmin, SignedStub
from services.remoting.consumer_groups import ConsumerGroups
from services.remoting.offsets import GroupOffsets, OffsetHandlers
from services.remoting.pull import Puller
from services.remoting.send import Sender, append_refused
from services.remoting.send_back import RetrySendDiverter, SendBack
from services.remoting.topics import Topics
from services.remoting.transactions import Transactions

log = logging.getLogger("rmqstore.remoting")
C = RequestCode
CLIENT_SCAN_S = 10.0
MERGE_BELOW = 16  # a writer batch of fewer messages from several connections: one request


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m services.remoting", description=__doc__)
    p.add_argument("--listen", default="127.0.0.1:10911", help="HOST:PORT (port 0: any free)")
    p.add_argument(
        "--store",
        default="",
        help="the store root: pulls read its consume-queue and commitlog files (required)",
    )
    p.add_argument("--commitlog", default="127.0.0.1:8100", help="the commitlog writer")
    p.add_argument(
        "--commitlog-socket",
        default="",
        help="the writer's --put-socket (same machine): puts go there",
    )
    p.add_argument("--query", default="127.0.0.1:8101", help="the query service")
    p.add_argument(
        "--proxy",
        default="",
        help="the proxy, which owns consumer progress (its ConsumerGroups API): 4.x "
        "consumers' offsets are queried and committed there (none: offset commands answer "
        "SYSTEM_ERROR, no consume stats or offset resets)",
    )
    p.add_argument(
        "--namesrv",
        default="",
        help="name servers to register with, HOST:PORT;HOST:PORT (none: register nowhere)",
    )
    p.add_argument(
        "--broker-ip",
        default="",
        help="the address clients reach this broker at (RocketMQ's brokerIP1): "
        "registered with the name servers and carried by offset message ids "
        "(default: the host of --listen)",
    )
    p.add_argument("--ha-address", default="",
                   help="the writer's HA address the broker registers (haServerAddr; default: "
                        "--broker-ip and this port + 1, as RocketMQ)")  # fmt: skip
    p.add_argument("--broker-name", default="broker-a")
    p.add_argument("--cluster-name", default="DefaultCluster")
    p.add_argument(
        "--no-auto-create-topics",
        dest="auto_create_topics",
        action="store_false",
        help="refuse sends to unknown topics (RocketMQ's autoCreateTopicEnable=false)",
    )
    p.add_argument(
        "--max-pending-sends",
        type=int,
        default=10_000,
        help="sends waiting for the writer beyond which new ones are answered "
        "SYSTEM_BUSY (default: %(default)s)",
    )
    p.add_argument(
        "--batches-in-flight",
        type=int,
        default=1,
        help="writer batches put at once; the sends that arrive meanwhile make the next one "
        "(1: a group commit in arrival order; default: %(default)s)",
    )
    p.add_argument(
        "--batch-linger-ms",
        type=float,
        default=16.0,
        help="while a pipelining connection's sends keep arriving, its writer batch "
        "waits up to this long to fill up (default: %(default)s)",
    )
    p.add_argument(
        "--batch-gather-ms",
        type=float,
        default=2.0,
        help="while other connections that sent in the last 50 ms have no send waiting, a "
        "writer batch waits up to this long for them: one batch of all the synchronous "
        "senders instead of one each (0: no wait; default: %(default)s)",
    )
    p.add_argument(
        "--register-interval",
        type=float,
        default=registration.INTERVAL_S,
        help="seconds between registrations (default: %(default)s)",
    )
    p.add_argument(
        "--transaction-timeout",
        type=float,
        default=6.0,
        help="seconds before an open transaction is first checked (RocketMQ's "
        "transactionTimeOut; default: %(default)s)",
    )
    p.add_argument(
        "--transaction-check-interval",
        type=float,
        default=60.0,
        help="seconds between checks of an open transaction (RocketMQ's "
        "transactionCheckInterval; default: %(default)s)",
    )
    p.add_argument(
        "--transaction-check-max",
        type=int,
        default=15,
        help="checks of an open transaction before it is no longer checked (default: %(default)s)",
    )
    p.add_argument("--metrics-port", type=int, default=0)
    p.add_argument("--metrics-host", default="", help="default: the host of --listen")
    p.add_argument("--log-level", default="INFO")
    access_keys.add_secret_flags(p, "to sign calls to the proxy with, when it requires them; "
                                 "with --acl, the one 4.x clients must sign with",
                                 access_env=False)  # fmt: skip
    p.add_argument("--acl", action="store_true",
                   help="take only requests signed with --access-key and its secret (RocketMQ "
                   "4.x ACL signatures); the others are answered SYSTEM_ERROR")
    p.add_argument("--acl-file", default="", metavar="PATH",
                   help="RocketMQ's plain_acl.yml: its accounts may sign, with its permissions "
                   "on topics and groups and its address white lists (and --access-key as an "
                   "admin); read again when it changes. Implies --acl")
    tls.add_tls_flags(p)
    return p.parse_args(argv)


async def serve(args: argparse.Namespace, observe: RemotingMetrics | None,
                group_metrics: ConsumerGroupMetrics | None = None) -> None:  # fmt: skip
    host, port = split_address(args.listen)
    try:
        namesrvs = registration.parse_namesrv(args.namesrv)
        proxy_keys = access_keys.client_keys(args, access_env=False)
    except ValueError as e:
        raise StartupError(str(e)) from None
    if args.acl and not args.acl_file and not proxy_keys[0]:
        raise StartupError("--acl needs --access-key, with its secret in --secret-key-file or "
                           f"${access_keys.SECRET_KEY_ENV}, or --acl-file")  # fmt: skip
    accounts = None
    if args.acl or args.acl_file:
        try:
            accounts = Accounts(proxy_keys, Path(args.acl_file) if args.acl_file else None)
        except (OSError, AclFileError) as e:
            raise StartupError(f"--acl-file {args.acl_file}: {e}") from None
    if not args.store:
        raise StartupError("--store is required: pulls read the store's consume-queue and "
                           "commitlog files")  # fmt: skip
    writer = tls.aio_client_channel(args.commitlog, args)
    query = tls.aio_client_channel(args.query, args)
    if args.batches_in_flight < 1 or not 0 <= args.batch_linger_ms <= 1000:
        raise StartupError("--batches-in-flight must be >= 1, --batch-linger-ms in 0..1000")
    if not 0 <= args.batch_gather_ms <= 1000:
        raise StartupError("--batch-gather-ms must be in 0..1000")
    appender = Appender(
        writer,
        slots=args.batches_in_flight,
        put_socket=args.commitlog_socket,
        linger_s=args.batch_linger_ms / 1000,
        gather_s=args.batch_gather_ms / 1000,
        merge_below=MERGE_BELOW,
        make_error=append_refused,
    )
    topics = Topics(writer)
    clients = Clients()
    holder: dict[str, registration.Registration] = {}

    def topics_changed(_topic: str = "") -> None:
        if "r" in holder:
            holder["r"].soon()

    sender = Sender(
        appender,
        topics,
        parse_host("127.0.0.1:0"),
        args.broker_name,
        args.auto_create_topics,
        args.max_pending_sends,
        topics_changed,
    )
    reads: dict[str, Broker] = {}

    async def read(offset: int) -> bytes:
        return await reads["broker"].read_record(offset)

    sender.transactions = Transactions(
        appender, clients, read, sender.msg_id, args.transaction_timeout,
        args.transaction_check_interval, args.transaction_check_max,
    )  # fmt: skip
    info = BrokerInfo(args.cluster_name, args.broker_name, "")
    broker = reads["broker"] = Broker(info, sender, topics, query, writer, clients,
                                      topics_changed)  # fmt: skip
    proxy = tls.aio_client_channel(args.proxy, args) if args.proxy else None
    registry = None
    if proxy is not None:
        registry = SignedStub(groups_pb2_grpc.ConsumerGroupsStub(proxy), *proxy_keys)
    groups = ConsumerGroups(clients, topics, topics_changed, watcher=group_metrics,
                            registry=registry)  # fmt: skip
    broker.handlers.update(groups.handlers())
    send_back = broker.handlers[C.CONSUMER_SEND_MSG_BACK] = SendBack(
        appender, topics, read, topics_changed, group_metrics, groups.retry_max_times
    )
    permission = sender.permission = send_back.permission = PermissionReader(writer)

    async def register_now() -> None:
        if "r" in holder:
            await holder["r"].register_all()

    config = BrokerConfig(args.cluster_name, args.broker_name, permission, register_now)
    broker.handlers.update(config.handlers())
    for code in (C.SEND_MESSAGE, C.SEND_MESSAGE_V2):
        diverter = RetrySendDiverter(sender.send, topics, topics_changed, group_metrics,
                                     sender.handle)  # fmt: skip
        diverter.permission = permission
        broker.handlers[code] = diverter
    if proxy is not None:
        admin = ConsumerAdmin(args.broker_name, clients, topics, registry, query)
        broker.handlers.update(admin.handlers())
    broker.group_offsets = GroupOffsets(proxy, proxy_keys)
    puller = Puller(topics, Path(args.store), writer, clients, broker.group_offsets,
                    observe.pulled if observe else lambda group, code: None)  # fmt: skip
    offset_handlers = OffsetHandlers(broker.group_offsets, query)
    broker.handlers.update(
        {  # consuming: pulls and offsets (spec §3.3)
            C.PULL_MESSAGE: puller.pull,
            C.QUERY_CONSUMER_OFFSET: offset_handlers.query_offset,
            C.UPDATE_CONSUMER_OFFSET: offset_handlers.update_offset,
            C.GET_EARLIEST_MSG_STORETIME: offset_handlers.earliest_store_time,
        }
    )
    if observe is not None:
        observe.watch_pulls(puller)
    handler: Handler = broker
    if accounts is not None:
        handler = Signed(broker, accounts, observe.acl_refusals() if observe else None)
    server = RemotingServer(
        handler, observe.observe if observe else None, on_close=groups.connection_closed
    )
    try:
        address = await server.start(host, port)
    except OSError as e:
        raise StartupError(f"cannot listen on {args.listen}: {e.strerror}") from None
    bound = int(address.rpartition(":")[2])
    broker_ip = args.broker_ip or host
    if broker_ip in ("", "0.0.0.0", "::"):
        raise StartupError("--broker-ip is required when listening on all addresses")
    try:
        sender.store_host = parse_host(f"{broker_ip}:{bound}")
    except ValueError as e:
        raise StartupError(f"--broker-ip {broker_ip!r}: {e}") from None
    info.broker_addr = f"{broker_ip}:{bound}"
    reg = registration.Registration(
        namesrvs,
        args.broker_name,
        info.broker_addr,
        args.cluster_name,
        args.ha_address or f"{broker_ip}:{bound + 1}",
        config.registered(broker.topic_table),
        args.register_interval,
    )
    holder["r"] = reg
    reg.start()
    sender.transactions.start()
    puller.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    freeze_startup_objects()
    announce("remoting", address)
    while True:
        try:
            await asyncio.wait_for(stop.wait(), CLIENT_SCAN_S)
            break
        except TimeoutError:
            groups.expire()
    await reg.close()
    await sender.transactions.close()
    await server.close()
    await puller.close()
    await broker.group_offsets.close()  # the pulls' commits it keeps, to the proxy
    await appender.close()
    await writer.close()
    await query.close()
    if proxy is not None:
        await proxy.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level)
    check_port_free(args.listen, "remoting")
    registry = metrics.new_registry("remoting")
    observe = RemotingMetrics(registry, "remoting") if args.metrics_port else None
    group_metrics = ConsumerGroupMetrics(registry) if args.metrics_port else None
    host = metrics.metrics_host(args.listen, args.metrics_host)
    metrics_server = metrics.start_metrics_server(args.metrics_port, registry, host)
    try:
        asyncio.run(serve(args, observe, group_metrics))
    finally:
        if metrics_server is not None:
            metrics_server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(run_main("remoting", main))
