"""``python -m services.namesrv``: a RocketMQ 4.x name server. Brokers register with it every
30 s (and are dropped 120 s after their last registration, or after the timeout they give,
RocketMQ 5's ``heartbeatTimeoutMillis``: rmqstore's remoting broker registers every 10 s and
gives 20 s; or at once when their connection closes); clients and ``mqadmin`` ask it
for routes, cluster information and topic lists. It keeps everything in memory: several run
side by side and every broker registers with each."""

import argparse
import asyncio
import logging
import signal
import sys

from rmqstore import metrics
from rmqstore.metrics_remoting import RemotingMetrics
from rmqstore.remoting_net import RemotingServer
from rmqstore.server import announce, configure_logging, freeze_startup_objects
from rmqstore.startup import StartupError, check_port_free, run_main, split_address
from services.namesrv.handlers import NameServer
from services.namesrv.routes import BROKER_EXPIRY_S, RouteTable

log = logging.getLogger("rmqstore.namesrv")
SCAN_INTERVAL_S = 5.0  # as RocketMQ 5's scanNotActiveBrokerInterval


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m services.namesrv", description=__doc__)
    p.add_argument("--listen", default="127.0.0.1:9876", help="HOST:PORT (port 0: any free)")
    p.add_argument("--store", default="", help="ignored (a name server has no store)")
    p.add_argument("--broker-expiry", type=float, default=BROKER_EXPIRY_S,
                   help="seconds after its last registration a broker that gives no timeout of "
                        "its own is dropped "
                        "(default: %(default)s)")  # fmt: skip
    p.add_argument("--metrics-port", type=int, default=0)
    p.add_argument("--metrics-host", default="", help="default: the host of --listen")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


async def serve(args: argparse.Namespace, observe: RemotingMetrics | None) -> None:
    host, port = split_address(args.listen)
    table = RouteTable(expiry_s=args.broker_expiry)
    names = NameServer(table)
    server = RemotingServer(names, observe.observe if observe else None,
                            on_close=names.connection_closed)  # fmt: skip
    try:
        address = await server.start(host, port)
    except OSError as e:
        raise StartupError(f"cannot listen on {args.listen}: {e.strerror}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    freeze_startup_objects()
    announce("namesrv", address)
    while True:
        try:
            await asyncio.wait_for(stop.wait(), SCAN_INTERVAL_S)
            break
        except TimeoutError:
            for addr in table.expire():
                log.warning("broker %s dropped: not registered within its timeout", addr)
    await server.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level)
    check_port_free(args.listen, "remoting")
    registry = metrics.new_registry("namesrv")
    observe = RemotingMetrics(registry, "namesrv") if args.metrics_port else None
    host = metrics.metrics_host(args.listen, args.metrics_host)
    metrics_server = metrics.start_metrics_server(args.metrics_port, registry, host)
    try:
        asyncio.run(serve(args, observe))
    finally:
        if metrics_server is not None:
            metrics_server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(run_main("namesrv", main))
