"""``rmqstore serve``: run every service of one store node locally, as supervised processes.

Ports come from ``SERVICES``: writer N (``--port-base N``), query N+1, consume-queue builder
N+2, index builder N+3, proxy N+4, console (HTTP, loopback only) N+5, RocketMQ 4.x name
server N+8, RocketMQ 4.x remoting broker N+7 (registered with that name server; its address
is the writer's store host, so offset message ids reach it); metrics N + 10 + slot.

With ``--namesrv HOST:PORT;...`` serve starts no name server: the remoting broker registers
with those, under ``--broker-name`` (default: the host name) and ``--cluster-name``, and the
query service announces itself there for cluster-wide lookups (see ``docs/cluster.md``).

``serve`` is a supervisor: when a service fails to start or dies, it says which and why in
one line, stops the others (services first, the writer last) and exits ``UNAVAILABLE`` (3).
Its services die with it, even under ``kill -9`` of serve: each runs through
``rmqstore.launch``, which asks the kernel for SIGTERM when its parent dies. Ctrl-C or SIGTERM
stops them all and exits 0.
"""

import argparse
import importlib.util
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rmqstore import access_keys, tls
from rmqstore.remoting_net import parse_namesrv
from rmqstore.startup import PARENT_PID_ENV, StopSignal
from services.cli.errors import UNAVAILABLE, USAGE, CliError
from services.commitlog.config import (
    HA_PORT_SLOT,
    WriterConfig,
    add_background_flags,
    add_replication_flags,
    background_args,
    replication_args,
)
from services.proxy import config as proxy_config

START_TIMEOUT_S = 600.0  # a large store's recovery may take minutes
STOP_TIMEOUT_S = 30.0
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


def _writer_flags(args: argparse.Namespace, ports: dict[str, int]) -> list[str]:
    return [
        "--flush", args.flush, "--max-message-size", str(args.max_message_size),
        "--queues-per-topic", str(args.queues_per_topic),
        "--dispatch-linger-ms", str(args.dispatch_linger_ms),
        *_given(args, "commitlog-segment-size"), *background_args(args),
        *(["--put-socket", args.put_socket] if getattr(args, "put_socket", "") else []),
        *(["--store-host", _broker_address(args, ports)] if _remoting_runs(args, ports) else []),
        "--cluster-name", args.cluster_name,
        *replication_args(args, args.ha_port or args.port_base + HA_PORT_SLOT),
    ]


def _remoting_runs(args: argparse.Namespace, ports: dict[str, int]) -> bool:
    return not args.read_only and "remoting" in ports and _exists("services.remoting")


def _broker_address(args: argparse.Namespace, ports: dict[str, int]) -> str:
    """Where 4.x clients reach the remoting broker: ``--broker-ip`` (else ``--host``) and its
    port; records and offset message ids carry it."""
    ip = args.broker_ip or args.host
    return f"[{ip}]:{ports['remoting']}" if ":" in ip else f"{ip}:{ports['remoting']}"


def _namesrvs(args: argparse.Namespace, ports: dict[str, int]) -> str:
    """The name servers the broker registers with: ``--namesrv``, else serve's own."""
    if args.namesrv:
        return str(args.namesrv)
    if args.read_only or not _exists("services.namesrv"):
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
        *(["--proxy", f"{host}:{ports['proxy']}"] if "proxy" in ports else []),
        *(["--access-key", args.access_key] if args.access_key else []),  # its proxy calls
        *(["--secret-key-file", args.secret_key_file]
          if args.access_key and args.secret_key_file else []),
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


def _remoting_proxy(args: argparse.Namespace, ports: dict[str, int]) -> list[str]:
    """The proxy owns consumer progress: the broker queries and commits 4.x consumers'
    offsets there, signing its calls as the proxy requires."""
    if not _exists("services.proxy"):
        return []
    host = f"[{args.host}]" if ":" in args.host else args.host
    flags = ["--proxy", f"{host}:{ports['proxy']}"]
    if args.access_key:
        flags += ["--access-key", args.access_key]
        flags += ["--secret-key-file", args.secret_key_file] if args.secret_key_file else []
    return flags


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
    proxy = [] if args.read_only or not _exists("services.proxy") else \
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


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(f"{module}.__main__") is not None
    except ModuleNotFoundError:
        return False


def _command(spec: ServiceSpec, args: argparse.Namespace, ports: dict[str, int]) -> list[str]:
    cmd = [sys.executable, "-m", spec.module, *spec.extra, "--store", args.store,
           "--listen", f"{args.host}:{ports[spec.name]}"]
    if args.metrics and spec.metrics:
        cmd += ["--metrics-port", str(ports[spec.name] + METRICS_OFFSET)]
        if args.metrics_host:
            cmd += ["--metrics-host", args.metrics_host]
    if args.read_only and spec.takes_read_only:
        cmd.append("--read-only")
    return cmd + spec.flags(args, ports)


class Child:
    """A running service: its stdout is watched for the listening line; its stderr (its log)
    is passed through as it comes, except its own ``error:`` line, which ``serve`` quotes in
    its one line when the service fails."""

    def __init__(self, spec: ServiceSpec, cmd: list[str]) -> None:
        self.spec = spec
        env = {**os.environ, PARENT_PID_ENV: str(os.getpid()), "PYTHONUNBUFFERED": "1"}
        assert cmd[1:2] == ["-m"], cmd  # python -m MODULE …, run through the launcher
        self.proc = subprocess.Popen([cmd[0], "-m", "rmqstore.launch", *cmd[2:]],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.address = ""
        self.announced = threading.Event()
        self.errors: list[str] = []
        threading.Thread(target=self._stdout, daemon=True).start()
        self._err = threading.Thread(target=self._stderr, daemon=True)
        self._err.start()

    def _stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not self.address and " listening on " in line:
                self.address = line.rsplit(" listening on ", 1)[1].strip()
                self.announced.set()
        self.announced.set()  # EOF: it exited

    def _stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if line.startswith("error: "):
                self.errors.append(line[len("error: "):].strip())
            else:
                sys.stderr.write(line)
                sys.stderr.flush()

    def failure(self) -> str:
        """Why it did not start: its own ``error:`` line, else how it ended."""
        self._err.join(5)
        prefix = f"{self.spec.name}: "
        if self.errors:
            reason = self.errors[-1]
            return reason[len(prefix):] if reason.startswith(prefix) else reason
        code = self.proc.poll()
        how = "is still running" if code is None else _exit_text(code)
        return f"{how} without serving (its log is above)"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while self.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _ports(args: argparse.Namespace) -> dict[str, int]:
    ports = {}
    for spec in SERVICES:
        port = getattr(args, spec.port_flag.replace("-", "_")) or args.port_base + spec.slot
        if not 0 < port < 65536 or (args.metrics and port + METRICS_OFFSET > 65535):
            raise CliError(f"--{spec.port_flag} / --port-base: port {port} is outside 1..65535"
                           + (" (with its metrics port)" if args.metrics else ""), USAGE)
        ports[spec.name] = port
    return ports


def _check_tls() -> None:
    """The services take TLS from RMQSTORE_TLS_*: refuse a setting that cannot work before
    starting any (see ``tls.check_internal``)."""
    ns = argparse.Namespace(**{k: os.environ.get(v, "") for k, v in tls.ENV.items()})
    try:
        tls.server_credentials(ns)
        tls.check_internal(ns)
    except ValueError as e:
        raise CliError(f"TLS (from the environment): {e}", USAGE) from None


SOCKETS = "rmqstore-serve-"  # + serve's pid + "-" + mkdtemp's random part
STALE_AFTER_S = 60  # a younger socket directory may be a serve's that is starting


def socket_dir(tmp: str | None = None) -> str:
    """A new directory for the writer's put socket, named with this process's pid, in
    ``tmp`` (the system's temporary directory by default). Those a serve killed with -9
    left behind are removed first: this user's, over a minute old, their pid gone and no
    writer answering on their socket (a serve in another pid namespace may share ``tmp``)."""
    tmp = tmp or tempfile.gettempdir()
    for name in os.listdir(tmp):
        pid = name.removeprefix(SOCKETS).partition("-")[0]
        if not name.startswith(SOCKETS) or not pid.isdigit() or _alive(int(pid)):
            continue
        path = os.path.join(tmp, name)
        try:
            st = os.lstat(path)
            if (st.st_uid != os.getuid() or not os.path.isdir(path)
                    or time.time() - st.st_mtime < STALE_AFTER_S
                    or _answers(os.path.join(path, "writer.sock"))):  # fmt: skip
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{SOCKETS}{os.getpid()}-", dir=tmp)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def _answers(path: str) -> bool:
    """Whether something listens on the Unix socket ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
        except OSError:
            return False
    return True


def _check_keys(args: argparse.Namespace) -> None:
    """An access key needs its secret (from --secret-key-file or the environment, which the
    proxy and the console inherit): refuse to start without it."""
    try:
        if args.access_key and not proxy_config.secret_key(args):
            raise ValueError(f"--access-key needs a secret key: give --secret-key-file or set "
                             f"{access_keys.SECRET_KEY_ENV}")  # fmt: skip
    except ValueError as e:
        raise CliError(str(e), USAGE) from None


def _check_namesrv(args: argparse.Namespace) -> None:
    try:
        if args.namesrv:
            parse_namesrv(args.namesrv)
    except ValueError as e:
        raise CliError(str(e), USAGE) from None


def run(args: argparse.Namespace) -> int:
    ports = _ports(args)
    _check_namesrv(args)
    _check_tls()
    _check_keys(args)
    stopping = StopSignal()
    children: list[Child] = []
    failure = ""
    # the proxy puts over a Unix socket of the writer's (see rmqstore.put_socket), in a
    # directory of serve's own: a store path can be longer than a socket path may be
    sockets = "" if args.read_only or not args.put_socket_on else socket_dir()
    args.put_socket = os.path.join(sockets, "writer.sock") if sockets else ""
    try:
        for spec in SERVICES:
            if (args.read_only and not spec.read_only) or not _exists(spec.module):
                continue
            if why := spec.skip(args):
                print(f"{spec.name:14s} not started: {why}", flush=True)
                continue
            child = Child(spec, _command(spec, args, ports))
            children.append(child)
            deadline = time.monotonic() + START_TIMEOUT_S
            while not child.announced.wait(0.1) and not stopping.is_set():
                if time.monotonic() > deadline:
                    break
            if stopping.is_set():
                break
            if not child.address:
                failure = f"{spec.name} failed to start: {child.failure()}"
                break
            metrics = (f"  metrics http://{args.metrics_host or args.host}:"
                       f"{ports[spec.name] + METRICS_OFFSET}/metrics"
                       if args.metrics and spec.metrics else "")
            where = (f"http://{child.address}/" if spec.scheme == "http"
                     else f"{spec.scheme} {child.address}")
            print(f"{spec.name:14s} {where}{metrics}", flush=True)
            if spec.name == "commitlog" and not args.read_only and args.role != "slave":
                ha_port = args.ha_port or args.port_base + HA_PORT_SLOT
                print(f"{'replication':14s} {args.role}, slaves connect to "
                      f"{args.host}:{ha_port}", flush=True)  # fmt: skip
        if not failure and not stopping.is_set():
            print("serving" + (" read-only" if args.read_only else "") + "; Ctrl-C to stop",
                  flush=True)
        while not failure and not stopping.wait(0.2):
            for child in children:
                code = child.proc.poll()
                if code is not None:
                    said = f": {child.errors[-1]}" if child.errors else ""
                    failure = f"{child.spec.name} {_exit_text(code)}{said}; stopping the others"
                    break
    finally:
        for child in reversed(children):  # services first, the writer last
            child.stop()
        if sockets:
            shutil.rmtree(sockets, ignore_errors=True)
    if failure:
        raise CliError(failure, UNAVAILABLE)
    print("stopped", flush=True)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run every service locally on one store")
    p.add_argument("--store", default="./data/store")
    p.add_argument("--host", default="127.0.0.1", help="address every service listens on")
    p.add_argument("--port-base", type=int, default=8100)
    for spec in SERVICES:
        p.add_argument(f"--{spec.port_flag}", type=int, default=0,
                       help=f"{spec.name} port (default: base + {spec.slot})")
    p.add_argument("--no-metrics", dest="metrics", action="store_false")
    p.add_argument("--metrics-host", default="", help="where metrics listen (default: --host)")
    p.add_argument("--read-only", action="store_true",
                   help="serve queries from the store without writing a byte into it (no "
                        "builders, no puts)")
    p.add_argument("--commitlog-segment-size", type=int, default=None,
                   help="default: read from the store's segments, else 1 GiB")
    p.add_argument("--no-put-socket", dest="put_socket_on", action="store_false",
                   help="the proxy puts over gRPC, not the writer's Unix socket (as when they "
                        "run on different machines)")
    p.add_argument("--flush", choices=("async", "sync"), default="async")
    p.add_argument("--max-message-size", type=int, default=WriterConfig.max_message_size)
    p.add_argument("--queues-per-topic", type=int, default=WriterConfig.queues_per_topic)
    p.add_argument(
        "--dispatch-linger-ms",
        type=float,
        default=WriterConfig.dispatch_linger_ms,
        help="how long the writer lets more puts join a short dispatch batch (0 = off; "
        "default: %(default)s)",
    )
    add_background_flags(p)
    add_replication_flags(p, ha_port_help=f"the writer's HA port, where slaves connect "
                          f"(default: base + {HA_PORT_SLOT})")  # fmt: skip
    p.add_argument("--index-slots", type=int, default=None,
                   help="default: read from the store's index files, else 5,000,000")
    p.add_argument("--index-entries", type=int, default=None,
                   help="default: read from the store's index files, else 20,000,000")
    p.add_argument("--cq-entries-per-file", type=int, default=None,
                   help="default: read from the store's consume queues, else 300,000")
    proxy_config.add_flags(p.add_argument_group("proxy (RocketMQ 5 protocol)"))
    g = p.add_argument_group("name server and remoting broker (RocketMQ 4.x protocol)")
    g.add_argument("--broker-ip", default="",
                   help="the address 4.x clients reach the remoting broker at (RocketMQ's "
                        "brokerIP1; default: --host): registered with the name server, carried "
                        "by offset message ids")
    g.add_argument("--cluster-name", default="DefaultCluster")
    g.add_argument("--namesrv", default="",
                   help="name servers HOST:PORT;HOST:PORT (RocketMQ's namesrvAddr) the broker "
                        "registers with, instead of a name server of serve's own (which is "
                        "then not started): how several brokers form one cluster")
    p.set_defaults(run=run, broker_name=socket.gethostname())
