"""``python -m services.console``: the read-only message console (HTTP) over the query
service.

Prints ``rmqstore console listening on HOST:PORT`` once it serves. ``--hash-password NAME``
reads a password on stdin and prints a users-file line instead.
"""

import argparse
import asyncio
import getpass
import logging
import signal
import socket
import sys

from aiohttp import web

from rmqstore import access_keys, tls
from rmqstore.formats.index_file import DEFAULT_ENTRIES
from rmqstore.layout import StoreLayout
from rmqstore.server import announce, configure_logging
from services.console import app as console_app
from services.console.auth import MODES, AuthConfigError, Authenticator, hash_line
from services.console.backend import Backend
from services.console.security import host_name
from services.console.views import Settings

log = logging.getLogger("services.console")
DEFAULT_MAX_WINDOW_S = 3600


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m services.console", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hash-password", metavar="NAME",
                   help="print a users-file line for NAME (password read on stdin) and exit")
    p.add_argument("--store", help="store directory (topics, segments, index files; read only)")
    p.add_argument("--query", default="127.0.0.1:8101", help="query service HOST:PORT")
    p.add_argument("--commitlog", default="",
                   help="commitlog writer HOST:PORT, for the store page's offsets")
    p.add_argument("--proxy", default="",
                   help="RocketMQ 5 protocol service HOST:PORT, for the consumer group pages")
    access_keys.add_secret_flags(p, "to sign calls to the proxy with, when it requires them",
                                 access_env=False)
    p.add_argument("--listen", default="127.0.0.1:8105", help="HOST:PORT (port 0 = any free)")
    p.add_argument("--auth", choices=MODES, default="none",
                   help="none (loopback only), basic (--users-file) or proxy-header")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a name the console is served under (repeatable); requests naming "
                   "another host in Host get 421. Always allowed: the --listen address, "
                   "localhost, 127.0.0.1, [::1]. Checked with --auth none, or whenever given")
    p.add_argument("--users-file", help="users and scrypt hashes for --auth basic")
    p.add_argument("--trusted-proxy", action="append", default=[],
                   help="address or network whose identity header is trusted (repeatable)")
    p.add_argument("--identity-header", default="X-Forwarded-User",
                   help="header naming the user for --auth proxy-header")
    p.add_argument("--secure-cookie", action="store_true",
                   help="mark the session cookie Secure (TLS ends at a proxy in front)")
    p.add_argument("--max-window", type=int, default=DEFAULT_MAX_WINDOW_S,
                   help="widest time window (s) a page may browse without a key or id")
    p.add_argument("--index-entries", type=int, default=DEFAULT_ENTRIES,
                   help="entries per index file, for the store page's fill")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per gRPC call")
    p.add_argument("--log-level", default="INFO")
    tls.add_tls_flags(p)
    args = p.parse_args(argv)
    if args.hash_password is None and not args.store:
        p.error("--store is required")
    if args.max_window <= 0 or args.index_entries <= 1 or args.timeout <= 0:
        p.error("--max-window, --index-entries and --timeout must be positive")
    return args


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def allowed_hosts(listen_host: str, mode: str, given: list[str]) -> frozenset[str] | None:
    """The names the console answers under: checked with ``--auth none`` (a page of another
    site could read it through DNS rebinding) and whenever ``--allowed-host`` is given."""
    if mode != "none" and not given:
        return None
    return frozenset(host_name(h) for h in (listen_host, *LOOPBACK_NAMES, *given))


def _split(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--listen {listen!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


async def serve(args: argparse.Namespace, auth: Authenticator, host: str, port: int,
                proxy_keys: tuple[str, str] = ("", "")) -> None:  # fmt: skip
    backend = Backend.connect(
        tls.aio_client_channel(args.query, args),
        tls.aio_client_channel(args.commitlog, args) if args.commitlog else None,
        args.timeout,
        tls.aio_client_channel(args.proxy, args) if args.proxy else None, proxy_keys)
    settings = Settings(StoreLayout.of(args.store), args.max_window * 1000, args.index_entries)
    application = console_app.build(backend, settings, auth,
                                    allowed_hosts(host, args.auth, args.allowed_host))
    runner = web.AppRunner(application, access_log=None, handle_signals=False)
    await runner.setup()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    site = web.SockSite(runner, sock)
    await site.start()
    bound = sock.getsockname()[1]
    announce("console", f"[{host}]:{bound}" if family == socket.AF_INET6 else f"{host}:{bound}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.hash_password is not None:
        password = getpass.getpass("password: ") if sys.stdin.isatty() else \
            sys.stdin.readline().rstrip("\n")
        try:
            print(hash_line(args.hash_password, password))
        except AuthConfigError as e:
            print(f"rmqstore console: {e}", file=sys.stderr)
            return 2
        return 0
    configure_logging(args.log_level)
    try:
        host, port = _split(args.listen)
        auth = Authenticator.configure(args.auth, host, args.users_file, args.trusted_proxy,
                                       args.identity_header)
        auth.secure_cookie = args.secure_cookie
        proxy_keys = access_keys.client_keys(args, access_env=False)
    except (ValueError, AuthConfigError) as e:
        print(f"rmqstore console: {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(args, auth, host, port, proxy_keys))
    except OSError as e:
        print(f"rmqstore console: cannot listen on {args.listen}: {e.strerror}",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
