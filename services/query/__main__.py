"""``python -m services.query``: the read-only query service over one store directory."""

import argparse
import logging
import sys
from collections.abc import Awaitable
from typing import Any

import grpc

from rmqstore import metrics, store_hosts, store_shape, tls
from rmqstore.cluster_members import Peer, PeerBook
from rmqstore.errors import StoreError
from rmqstore.formats.index_file import DEFAULT_ENTRIES, DEFAULT_SLOTS
from rmqstore.layout import StoreLayout
from rmqstore.preflight import preflight
from rmqstore.remoting_net import parse_namesrv
from rmqstore.server import CHANNEL_OPTIONS, AsyncService, configure_logging
from rmqstore.startup import StartupError, run_main
from rmqstore.v1 import query_pb2, query_pb2_grpc
from services.query.app import QueryApp
from services.query.budget import BudgetLimits
from services.query.cluster_lookup import ClusterLookup
from services.query.metrics import QueryObserver
from services.query.peer_streams import PeerStreams
from services.query.record_source import GrpcRecordSource
from services.query.servicer import QueryServicer
from services.query.writer_watch import WriterWatch

log = logging.getLogger("services.query")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m services.query", description=__doc__)
    p.add_argument("--store", required=True, help="store directory (index/, consumequeue/)")
    p.add_argument("--commitlog", required=True, help="commitlog writer address HOST:PORT")
    p.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0 = any free)")
    p.add_argument("--index-slots", type=int, default=None,
                   help=f"default: read from the store's index files, else {DEFAULT_SLOTS}")
    p.add_argument("--index-entries", type=int, default=None,
                   help=f"default: read from the store's index files, else {DEFAULT_ENTRIES}")
    p.add_argument("--metrics-port", type=int, default=0, help="Prometheus port (0 = off)")
    p.add_argument("--metrics-host", default="", help="default: the host of --listen")
    p.add_argument("--read-only", action="store_true",
                   help="the store is served read-only (the query service never writes; "
                        "accepted so every service takes the same flag)")
    p.add_argument(
        "--budget-hops",
        type=int,
        default=BudgetLimits.hops,
        help="index chain entries one query may walk",
    )
    p.add_argument(
        "--budget-bytes",
        type=int,
        default=BudgetLimits.bytes,
        help="record bytes one query may fetch",
    )
    p.add_argument(
        "--budget-ms", type=int, default=BudgetLimits.millis, help="milliseconds one query may take"
    )
    g = p.add_argument_group("cluster (cluster-wide lookups; see docs/cluster.md)")
    g.add_argument("--namesrv", default="",
                   help="name servers HOST:PORT;HOST:PORT where this query service announces "
                        "itself and finds its peers (none: lookups of this broker only)")
    g.add_argument("--broker-name", default="", help="this broker's name (required with "
                   "--namesrv)")
    g.add_argument("--cluster-name", default="DefaultCluster")
    g.add_argument("--advertise", default="",
                   help="HOST:PORT peers reach this query service at (default: --listen)")
    g.add_argument("--store-host", default="",
                   help="IP:PORT the records of this store carry (offset message ids name it)")
    p.add_argument("--log-level", default="INFO")
    tls.add_tls_flags(p)
    args = p.parse_args(argv)
    if args.namesrv and not args.broker_name:
        p.error("--namesrv needs --broker-name")
    for name in ("index_slots", "index_entries", "budget_hops", "budget_bytes", "budget_ms"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    return args


async def _join_cluster(args: argparse.Namespace, servicer: QueryServicer
                        ) -> tuple[PeerBook, PeerStreams]:  # fmt: skip
    """The servicer's cluster-wide lookups over the members the name servers list."""
    try:
        namesrvs = parse_namesrv(args.namesrv)
    except ValueError as e:
        raise StartupError(str(e)) from None
    me = Peer(args.broker_name, args.advertise or args.listen, args.store_host)
    layout = StoreLayout.of(args.store)
    book = PeerBook(namesrvs, "query", args.cluster_name, me,
                    store_hosts=lambda: store_hosts.recorded(layout))  # fmt: skip
    peers = PeerStreams(lambda address: tls.aio_client_channel(address, args))

    def ask(peer: Peer, request: Any, timeout: float) -> Awaitable[Any]:
        if peer.name == me.name:  # a coroutine: run once the peers' calls are made
            if isinstance(request, query_pb2.QueryByKeyRequest):
                return servicer.local_by_key(request)
            return servicer.local_by_id(request)
        return peers.ask(peer, request, timeout)

    servicer.cluster = ClusterLookup(book.peers, ask)
    return book, peers


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level)
    return run_main("query", lambda: _serve(args))


def _serve(args: argparse.Namespace) -> int:
    layout = StoreLayout.of(args.store)
    credentials, m_host = preflight(args, calls_writer=True)
    limits = BudgetLimits(args.budget_hops, args.budget_bytes, args.budget_ms)
    # every query runs on the service's event loop, and so do its reads from the writer
    service = AsyncService(args.listen, credentials=credentials)

    async def open_source() -> GrpcRecordSource:  # the channel belongs to the loop it is made on
        return GrpcRecordSource(
            args.commitlog, grpc_channel=tls.aio_client_channel(args.commitlog, args)
        )

    async def open_probe() -> grpc.aio.Channel:  # its own connection: see WriterWatch
        return tls.aio_client_channel(args.commitlog, args,
                                      [*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)])

    source = service.call(open_source())
    watch = WriterWatch(source, layout, service.set_serving_here, service.call(open_probe()))

    async def close() -> None:
        await watch.stop()
        await source.close()

    try:
        problem = service.call(watch.check())
        if "another store" in problem:
            raise StartupError(problem)
        slots, entries = store_shape.index_shape(layout, args.index_slots, args.index_entries)
        app = QueryApp.build(args.store, source, slots, entries, limits)
    except (StoreError, StartupError) as e:
        service.stop(then=close)
        raise StartupError(str(e)) from None
    registry = metrics.new_registry("query")
    metrics_server = metrics.start_metrics_server(args.metrics_port, registry, m_host)
    servicer = app.servicer(QueryObserver(registry))
    book, peers = service.call(_join_cluster(args, servicer)) if args.namesrv else (None, None)
    service.add(
        query_pb2_grpc.add_QueryServicer_to_server,
        servicer,
        query_pb2.DESCRIPTOR,
        "Query",
    )

    async def start_watch() -> None:
        watch.start()
        if book is not None:
            book.start()

    async def close_all() -> None:
        await watch.stop()
        await source.close()
        if book is not None:
            await book.close()
        if peers is not None:
            await peers.close()

    def stop() -> None:
        service.stop(then=close_all)
        if metrics_server is not None:
            metrics_server.stop()
        app.close()

    service.call(start_watch())
    service.serve("query", stop, serving=not problem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
