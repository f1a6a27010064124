"""``python -m services.indexer {consume-queue,index}``: run one builder service.

python -m services.indexer consume-queue --store DIR --commitlog ADDR --listen HOST:PORT
python -m services.indexer index --store DIR --commitlog ADDR --listen HOST:PORT
"""

import argparse
import logging
import sys

from rmqstore import metrics, store_shape, tls
from rmqstore.errors import StoreError
from rmqstore.formats import consume_queue as cq
from rmqstore.formats import index_file as ixf
from rmqstore.layout import StoreLayout
from rmqstore.preflight import preflight
from rmqstore.server import (
    Service,
    Termination,
    announce,
    configure_logging,
    freeze_startup_objects,
)
from rmqstore.startup import StartupError, run_main
from rmqstore.v1 import indexer_pb2, indexer_pb2_grpc
from rmqstore.writer_link import check_writer
from services.indexer.consume_queue_builder import ConsumeQueueBuilder
from services.indexer.index_builder import IndexBuilder
from services.indexer.metrics import BuilderObserver
from services.indexer.servicer import BuilderServicer
from services.indexer.subscriber import Subscriber

log = logging.getLogger("rmqstore.indexer")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m services.indexer",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="builder", required=True)
    for name, help_ in (
        ("consume-queue", "build consumequeue/ files"),
        ("index", "build index/ files"),
    ):
        s = sub.add_parser(name, help=help_)
        s.add_argument("--store", required=True, help="store root directory")
        s.add_argument("--commitlog", required=True, help="writer address HOST:PORT")
        s.add_argument("--listen", default="127.0.0.1:0")
        s.add_argument("--metrics-port", type=int, default=0, help="0 = no metrics endpoint")
        s.add_argument("--metrics-host", default="", help="default: the host of --listen")
        s.add_argument("--flush-interval-ms", type=int, default=500)
        s.add_argument("--log-level", default="INFO")
        tls.add_tls_flags(s)
        if name == "consume-queue":
            s.add_argument("--cq-entries-per-file", type=int, default=None,
                           help="default: read from the store's consume-queue files, else "
                                f"{cq.DEFAULT_ENTRIES_PER_FILE}")
        else:
            s.add_argument("--index-slots", type=int, default=None,
                           help=f"default: read from the store's index files, else "
                                f"{ixf.DEFAULT_SLOTS}")
            s.add_argument("--index-entries", type=int, default=None,
                           help=f"default: read from the store's index files, else "
                                f"{ixf.DEFAULT_ENTRIES}")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure_logging(args.log_level)
    return run_main(args.builder, lambda: _serve(args))


def _serve(args: argparse.Namespace) -> int:
    layout = StoreLayout.of(args.store)
    credentials, m_host = preflight(args, calls_writer=True)
    check_writer(args.builder, args.commitlog, layout, args)
    try:
        if args.builder == "consume-queue":
            builder: ConsumeQueueBuilder | IndexBuilder = ConsumeQueueBuilder(
                layout, store_shape.cq_entries_per_file(layout, args.cq_entries_per_file,
                                                        cq.DEFAULT_ENTRIES_PER_FILE))
        else:
            builder = IndexBuilder(layout, *store_shape.index_shape(
                layout, args.index_slots, args.index_entries))
    except (StoreError, OSError, ValueError) as e:
        raise StartupError(f"cannot open the {args.builder} files: {e}") from None
    subscriber = Subscriber(
        builder,
        args.commitlog,
        args.flush_interval_ms / 1000,
        channel=tls.client_channel(args.commitlog, args),
    )
    service = Service(args.listen, credentials=credentials)
    service.add(
        indexer_pb2_grpc.add_BuilderServicer_to_server,
        BuilderServicer(subscriber),
        indexer_pb2.DESCRIPTOR,
        "Builder",
    )
    termination = Termination()  # before the listening line
    service.start()
    service.set_serving(True)
    registry = metrics.new_registry(builder.name)
    BuilderObserver(subscriber, registry)
    metrics_server = metrics.start_metrics_server(args.metrics_port, registry, m_host)
    freeze_startup_objects()
    announce(builder.name, service.address)  # before any other thread of ours logs
    subscriber.start()

    def stop() -> None:
        service.set_serving(False)
        subscriber.stop()
        service.stop()
        if metrics_server is not None:
            metrics_server.stop()
        log.info("%s stopped at durable offset %d", builder.name, builder.durable_offset)

    termination.wait(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
