"""``python -m services.proxy``: serve RocketMQ 5's gRPC protocol (``MessagingService``) in
front of the commitlog writer, so RocketMQ's own client libraries can produce and consume."""

import argparse
import logging
import sys
from pathlib import Path

from rmqstore import metrics, metrics_proxy, tls
from rmqstore.broker_perm import PermissionReader
from rmqstore.cluster_members import Peer, PeerBook
from rmqstore.errors import StoreLockedError
from rmqstore.remoting_net import parse_namesrv
from rmqstore.rocketmq import service_pb2
from rmqstore.server import AsyncService, configure_logging
from rmqstore.v1 import groups_pb2
from services.proxy import groups, recovery
from services.proxy.appender import Appender
from services.proxy.cluster_routes import ClusterRoutes
from services.proxy.config import ProxyConfig, add_flags, secret_key
from services.proxy.consume import ConsumeConfig, Consumption
from services.proxy.progress import ProgressLock
from services.proxy.routes import Router
from services.proxy.servicer import MessagingServicer, add_to_server
from services.proxy.topics import TopicBook

log = logging.getLogger("rmqstore.proxy")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m services.proxy", description=__doc__)
    p.add_argument(
        "--store",
        default="",
        help="the store root: consume queues are read from it (open transactions, "
        "consumption); consumer progress is written to its config/ (none given: no "
        "consumption)",
    )
    p.add_argument("--listen", default="127.0.0.1:8104")
    p.add_argument("--commitlog", default="127.0.0.1:8100", help="the commitlog writer")
    p.add_argument(
        "--commitlog-socket", default="",
        help="the writer's --put-socket (same machine): puts go there instead of over gRPC, "
        "at a fraction of the CPU (default: none)",
    )  # fmt: skip
    p.add_argument("--metrics-port", type=int, default=0)
    p.add_argument(
        "--batch-spacing-ms", type=float, default=ProxyConfig.batch_spacing_s * 1000,
        help="under load, writer batches start at most this often, so they fill up "
        "(default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--batch-linger-ms", type=float, default=ProxyConfig.batch_linger_s * 1000,
        help="while a pipelining sender's sends keep arriving, its writer batch waits up to "
        "this long to fill up (default: %(default)s)",
    )  # fmt: skip
    p.add_argument("--batches-in-flight", type=int, default=ProxyConfig.batches_in_flight,
                   help="writer batches put at once (default: %(default)s)")
    p.add_argument("--log-level", default="INFO")
    g = p.add_argument_group("cluster (routes across brokers; see docs/cluster.md)")
    g.add_argument("--namesrv", default="",
                   help="name servers HOST:PORT;HOST:PORT: QueryRoute and QueryAssignment "
                        "answer every live broker's queues, and this proxy announces its "
                        "--advertise address there (none: this broker's queues only)")
    g.add_argument("--cluster-name", default="DefaultCluster")
    add_flags(p)
    tls.add_tls_flags(p)
    args = p.parse_args(argv)
    configure_logging(args.log_level)
    try:
        namesrvs = parse_namesrv(args.namesrv)
        credentials = tls.server_credentials(args)
        service = AsyncService(args.listen, credentials=credentials)
        config = ProxyConfig(
            writer=args.commitlog,
            advertise=args.advertise or service.address,
            broker_name=args.broker_name,
            auto_create_topics=args.auto_create_topics,
            max_body_size=args.max_body_size,
            max_delay_ms=args.max_delay_ms,
            transaction_timeout_s=args.transaction_timeout,
            transaction_check_interval_s=args.transaction_check_interval,
            transaction_check_max=args.transaction_check_max,
            access_key=args.access_key or "",
            secret_key=secret_key(args),
            signature_window_s=args.signature_window,
            consume_from=args.consume_from,
            group_retry_max_times=args.group_retry_max_times,
            fifo_groups=tuple(args.fifo_groups),
            batch_spacing_s=args.batch_spacing_ms / 1000,
            batch_linger_s=args.batch_linger_ms / 1000,
            batches_in_flight=args.batches_in_flight,
        )
        # consumer progress has one writer: a second proxy on the store is refused here
        progress_lock = ProgressLock(Path(args.store)) if args.store else None
    except StoreLockedError as e:  # one line, as the writer refuses a second writer
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as e:
        log.error("cannot start: %s", e)
        print(f"error: {e}", file=sys.stderr)
        return 2
    registry = metrics.new_registry("proxy")
    proxy_metrics = metrics_proxy.ProxyMetrics(registry)
    group_metrics = metrics_proxy.ConsumerGroupMetrics(registry)
    metrics_server = metrics.start_metrics_server(args.metrics_port, registry)

    book: PeerBook | None = None
    others: ClusterRoutes | None = None

    async def build() -> MessagingServicer:
        nonlocal book, others
        if namesrvs:
            book = PeerBook(namesrvs, "proxy", args.cluster_name,
                            Peer(config.broker_name, config.advertise))  # fmt: skip
            others = ClusterRoutes(namesrvs, book)
            book.start()
        channel = tls.aio_client_channel(config.writer, args)
        appender = Appender(
            channel, config.batch_max, config.batches_in_flight, config.batch_spacing_s,
            args.commitlog_socket, config.batch_linger_s,
        )  # fmt: skip
        servicer = MessagingServicer(
            config, TopicBook(channel, config.auto_create_topics), appender,
            Router(config.broker_name, config.advertise, others, PermissionReader(channel)),
            proxy_metrics,
        )  # fmt: skip
        if args.store:
            consume = ConsumeConfig(
                config.consume_from, config.group_retry_max_times, config.fifo_groups
            )
            servicer.consumption = Consumption(
                Path(args.store), appender, consume, on_event=group_metrics.event
            )
            servicer.consumption.alive = servicer.clients.connected
            servicer.consumption.create_topic = servicer.topics.create
            servicer.consumption.start(group_metrics.observe)
        servicer.transactions.start(
            recovery.recover_when_built(Path(args.store), servicer.transactions)
            if args.store else None
        )  # fmt: skip
        servicer.channel = channel  # type: ignore[attr-defined]
        return servicer

    servicer = service.call(build())
    service.add(add_to_server, servicer, service_pb2.DESCRIPTOR, "MessagingService")
    service.add(
        groups.add_to_server,
        groups.GroupsServicer(servicer.consumption, servicer.topics, servicer.auth),
        groups_pb2.DESCRIPTOR, "ConsumerGroups",
    )  # fmt: skip

    async def close() -> None:
        if servicer.consumption is not None:
            await servicer.consumption.close()
        await servicer.transactions.close()
        await servicer.appender.close()
        await servicer.channel.close()  # type: ignore[attr-defined]
        if book is not None and others is not None:
            await book.close()
            await others.close()
        if progress_lock is not None:
            progress_lock.release()

    def stop() -> None:
        service.stop(then=close)
        if metrics_server is not None:
            metrics_server.stop()

    service.serve("proxy", stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
