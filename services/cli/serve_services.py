"""What ``rmqstore serve`` runs: each service's module, port slot and the flags it is given,
built from serve's own flags (``SERVICES``, in start order; ``command`` for one service).

Ports: writer N (``--port-base N``), query N+1, consume-queue builder N+2, index builder
N+3, proxy N+4, console (HTTP, loopback only) N+5, HA N+6, RocketMQ 4.x remoting broker N+7,
name server N+8; metrics N + 10 + slot.
"""

import argparse
import importlib.util
import ipaddress
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from services.commitlog.config import HA_PORT_SLOT, background_args, replication_args
from services.proxy import config as proxy_config

METRICS_OFFSET = 10

Flags = Callable[[argparse.Namespace, dict[str, int]], list[str]]


def _given(args: argparse.Namespace, *names: str) -> list[str]:
    """``--flag value`` for each option the user gave (None: let the service decide)."""
    out: list[str] = []
    for name in names:
        value = getattr(args, name.replace("-", "_"))
        if value is not None:
            out += [f"--{name}", str(value)]
    return out


def _topics_file(args: argparse.Namespace) -> list[str]:
    """``--topics-file`` as an absolute path (the writer may run in another directory)."""
    path = getattr(args, "topics_file", "")
    return ["--topics-file", os.path.abspath(path)] if path else []


def _writer_flags(args: argparse.Namespace, ports: dict[str, int]) -> list[str]:
    return [
        "--flush", args.flush, "--max-message-size", str(args.max_message_size),
        "--queues-per-topic", str(args.queues_per_topic),
        *_topics_file(args),
        "--dispatch-linger-ms", str(args.dispatch_linger_ms),
        *_given(args, "commitlog-segment-size"), *background_args(args),
        *(["--put-socket", args.put_socket] if getattr(args, "put_socket", "") else []),
        *(["--store-host", _broker_address(args, ports)] if _remoting_runs(args, ports) else []),
        "--cluster-name", args.cluster_name,
        *replication_args(args, args.ha_port or args.port_base + HA_PORT_SLOT),
    ]


def _remoting_runs(args: argparse.Namespace, ports: dict[str, int]) -> bool:
    return not args.read_only and "remoting" in ports and exists("services.remoting")


def _broker_address(args: argparse.Namespace, ports: dict[str, int]) -> str:
    """Where 4.x clients reach the remoting broker: ``--broker-ip`` (else ``--host``) and its
    port; records and offset message ids carry it."""
    ip = args.broker_ip or args.host
    return f"[{ip}]:{ports['remoting']}" if ":" in ip else f"{ip}:{ports['remoting']}"


def _namesrvs(args: argparse.Namespace, ports: dict[str, int]) -> str:
    """The name servers the broker registers with: ``--namesrv``, else serve's own."""
    if args.namesrv:
        return str(args.namesrv)
    if args.read_only or not exists("services.namesrv"):
        return ""
    host = f"[{args.host}]" if ":" in args.host else args.host
    return f"{host}:{ports['namesrv']}"


def _namesrv_skip(args: argparse.Namespace) -> str:
    return "--namesrv given: the broker registers there" if args.namesrv else ""


def _remoting_flags(args: argparse.Namespace, ports: dict[str, int]) -> list[str]:
    put_socket = getattr(args, "put_socket", "")
    host = f"[{args.host}]" if ":" in args.host else args.host
    return [
        *_writer_address(args, ports), "--query", f"{host}:{ports['query']}",
        "--namesrv", _namesrvs(args, ports),
        *_remoting_keys(args),
        *(["--commitlog-socket", put_socket] if put_socket else []),
        *(["--broker-ip", args.broker_ip] if args.broker_ip else []),
        "--broker-name", args.broker_name, "--cluster-name", args.cluster_name,
        "--ha-address", f"{args.broker_ip or host}:{args.ha_port or args.port_base + HA_PORT_SLOT}",
        *([] if args.auto_create_topics else ["--no-auto-create-topics"]),
        "--transaction-timeout", str(args.transaction_timeout),
        "--transaction-check-interval", str(args.transaction_check_interval),
        "--transaction-check-max", str(args.transaction_check_max),
        *_remoting_proxy(args, ports),
    ]


def _remoting_keys(args: argparse.Namespace) -> list[str]:
    """The access key: the broker signs its calls to the proxy with it, and (unless
    ``--remoting-unsigned``) takes only requests signed with it (``--acl``); with
    ``--acl-file``, the file's accounts too, with their permissions."""
    acl_file = getattr(args, "acl_file", "")
    keys = ["--acl-file", os.path.abspath(acl_file)] if acl_file else []
    if not args.access_key:
        return keys
    return [*keys, "--access-key", args.access_key,
            *(["--secret-key-file", args.secret_key_file] if args.secret_key_file else []),
            *([] if getattr(args, "remoting_unsigned", False) else ["--acl"])]  # fmt: skip


def _remoting_proxy(args: argparse.Namespace, ports: dict[str, int]) -> list[str]:
    """The proxy owns consumer progress: the broker queries and commits 4.x consumers'
    offsets there (signing its calls with the access key, as the proxy requires)."""
    if not exists("services.proxy") or "proxy" not in ports:
        return []
    host = f"[{args.host}]" if ":" in args.host else args.host
    return ["--proxy", f"{host}:{ports['proxy']}"]


def _writer_address(args: argparse.Namespace, ports: dict[str, int]) -> list[str]:
    return ["--commitlog", f"{args.host}:{ports['commitlog']}"]


def _cq_flags(args: argparse.Namespace, ports: dict[str, int]) -> list[str]:
    return [*_writer_address(args, ports), *_given(args, "cq-entries-per-file")]


def _index_flags(args: argparse.Namespace, ports: dict[str, int]) -> list[str]:
    return [*_writer_address(args, ports), *_given(args, "index-slots", "index-entries")]


def _query_flags(args: argparse.Namespace, ports: dict[str, int]) -> list[str]:
    """The index's shape, and the cluster it answers cluster-wide lookups in: announced in
    the name servers' KV configuration with its address and the broker's store host."""
    namesrvs = _namesrvs(args, ports)
    if not namesrvs:
        return _index_flags(args, ports)
    ip = args.broker_ip or args.host
    ip = f"[{ip}]" if ":" in ip else ip
    return [*_index_flags(args, ports), "--namesrv", namesrvs,
            "--broker-name", args.broker_name, "--cluster-name", args.cluster_name,
            "--advertise", f"{ip}:{ports['query']}",
            "--store-host", _broker_address(args, ports)]  # fmt: skip


def _proxy_flags(args: argparse.Namespace, ports: dict[str, int]) -> list[str]:
    put_socket = getattr(args, "put_socket", "")
    socket = ["--commitlog-socket", put_socket] if put_socket else []
    namesrvs = _namesrvs(args, ports)
    cluster = ["--namesrv", namesrvs, "--cluster-name", args.cluster_name] if namesrvs else []
    return [*_writer_address(args, ports), *socket, *proxy_config.forward(args), *cluster]


def _console_flags(args: argparse.Namespace, ports: dict[str, int]) -> list[str]:
    proxy = [] if args.read_only or not exists("services.proxy") else \
        ["--proxy", f"{args.host}:{ports['proxy']}"]  # its consumer groups
    if proxy and args.access_key:  # it signs its calls as the proxy requires (the secret
        # by file or environment, as the proxy takes it)
        proxy += ["--access-key", args.access_key]
        proxy += ["--secret-key-file", args.secret_key_file] if args.secret_key_file else []
    return ["--query", f"{args.host}:{ports['query']}", *_writer_address(args, ports),
            *_given(args, "index-entries"), *proxy]


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _console_skip(args: argparse.Namespace) -> str:
    if _loopback(args.host):
        return ""
    return ("without authentication it serves loopback only (run python -m services.console "
            "with --auth basic or proxy-header)")


@dataclass(frozen=True)
class ServiceSpec:
    """One service ``serve`` runs: ``python -m <module> <extra>`` on port N + ``slot``."""

    name: str
    module: str
    slot: int
    port_flag: str  # serve's flag to override its port
    extra: tuple[str, ...] = ()
    flags: Flags = field(default=lambda _args, _ports: [])
    read_only: bool = True  # runs when the store is served --read-only
    takes_read_only: bool = True  # and is then given --read-only itself
    metrics: bool = True  # takes --metrics-port (N + 10 + slot)
    scheme: str = "grpc"  # how serve prints its address
    skip: Callable[[argparse.Namespace], str] = field(default=lambda _args: "")  # why not


# In start order; stopped in reverse. A service whose module is not in this build is skipped,
# so a service can be added here before it exists (proxy).
SERVICES: list[ServiceSpec] = [
    ServiceSpec("commitlog", "services.commitlog", 0, "commitlog-port", flags=_writer_flags),
    ServiceSpec("consume-queue", "services.indexer", 2, "cq-port", ("consume-queue",),
                _cq_flags, read_only=False),
    ServiceSpec("index", "services.indexer", 3, "index-port", ("index",), _index_flags,
                read_only=False),
    ServiceSpec("query", "services.query", 1, "query-port", flags=_query_flags),
    ServiceSpec("proxy", "services.proxy", 4, "proxy-port", flags=_proxy_flags,
                read_only=False),
    ServiceSpec("console", "services.console", 5, "console-port", flags=_console_flags,
                takes_read_only=False, metrics=False, scheme="http", skip=_console_skip),
    ServiceSpec("namesrv", "services.namesrv", 8, "namesrv-port", read_only=False,
                takes_read_only=False, scheme="remoting", skip=_namesrv_skip),
    ServiceSpec("remoting", "services.remoting", 7, "remoting-port", flags=_remoting_flags,
                read_only=False, takes_read_only=False, scheme="remoting"),
]


def exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(f"{module}.__main__") is not None
    except ModuleNotFoundError:
        return False


def command(spec: ServiceSpec, args: argparse.Namespace, ports: dict[str, int]) -> list[str]:
    cmd = [sys.executable, "-m", spec.module, *spec.extra, "--store", args.store,
           "--listen", f"{args.host}:{ports[spec.name]}"]
    if args.metrics and spec.metrics:
        cmd += ["--metrics-port", str(ports[spec.name] + METRICS_OFFSET)]
        if args.metrics_host:
            cmd += ["--metrics-host", args.metrics_host]
    if args.read_only and spec.takes_read_only:
        cmd.append("--read-only")
    return cmd + spec.flags(args, ports)
