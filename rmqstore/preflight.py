"""The checks every service makes before it opens anything: TLS settings, its ports, its
store path. Each failure is a ``StartupError`` (one line, exit 2; see ``rmqstore.startup``)."""

import argparse
from pathlib import Path

import grpc

from rmqstore import tls
from rmqstore.metrics_http import metrics_host
from rmqstore.startup import StartupError, check_port_free


def preflight(args: argparse.Namespace, calls_writer: bool
              ) -> tuple[grpc.ServerCredentials | None, str]:
    """(server credentials, metrics host) from ``--listen``, ``--metrics-port``,
    ``--metrics-host``, ``--store`` and the TLS flags; ``calls_writer``: the service is also a
    client of the writer (builders, query), whose TLS settings must let it check the writer."""
    credentials = tls.startup_server_credentials(args)
    if calls_writer:
        tls.startup_client_check(args)
    host = metrics_host(args.listen, args.metrics_host)
    check_port_free(args.listen)
    if args.metrics_port:
        check_port_free(f"{host}:{args.metrics_port}", "metrics")
    store = Path(args.store)
    if store.exists() and not store.is_dir():
        raise StartupError(f"store {store} is not a directory")
    return credentials, host
