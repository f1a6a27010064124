"""``rmqstore serve``: run every service of one store node locally, as supervised processes.

What runs, on which port and with which flags: ``serve_services`` (writer N with
``--port-base N``, the other services on N + their slot; the remoting broker registers with
the name server, and its address is the writer's store host, so offset message ids reach it).

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
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from rmqstore import access_keys, tls
from rmqstore.formats import plain_acl
from rmqstore.remoting_net import parse_namesrv
from rmqstore.startup import PARENT_PID_ENV, StopSignal
from services.cli.errors import UNAVAILABLE, USAGE, CliError
from services.cli.serve_services import METRICS_OFFSET, SERVICES, ServiceSpec, command, exists
from services.commitlog.config import (
    HA_PORT_SLOT,
    WriterConfig,
    add_background_flags,
    add_replication_flags,
)
from services.proxy import config as proxy_config

START_TIMEOUT_S = 600.0  # a large store's recovery may take minutes
STOP_TIMEOUT_S = 30.0
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
    if args.acl_file:
        if args.remoting_unsigned:
            raise CliError("--remoting-unsigned and --acl-file go against each other: let "
                           "unsigned clients in with the file's globalWhiteRemoteAddresses",
                           USAGE)  # fmt: skip
        try:
            plain_acl.parse(Path(args.acl_file).read_text())
        except (OSError, plain_acl.AclFileError) as e:
            raise CliError(f"--acl-file {args.acl_file}: {e}", USAGE) from None


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
            if (args.read_only and not spec.read_only) or not exists(spec.module):
                continue
            if why := spec.skip(args):
                print(f"{spec.name:14s} not started: {why}", flush=True)
                continue
            child = Child(spec, command(spec, args, ports))
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
    p.add_argument("--topics-file", default="",
                   help="a JSON list of topics ({name, queues, perm?, type?}) the writer "
                        "creates at start when the store lacks them")
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
    g.add_argument("--remoting-unsigned", action="store_true",
                   help="with --access-key, let the remoting broker take unsigned requests too "
                        "(default: with an access key, 4.x clients and mqadmin must sign with "
                        "it, RocketMQ's ACL signature)")
    g.add_argument("--acl-file", default="", metavar="PATH",
                   help="RocketMQ's plain_acl.yml for the remoting broker: its accounts may "
                        "sign requests, with its permissions on topics and groups (and "
                        "--access-key as an admin); read again when it changes")
    p.set_defaults(run=run, broker_name=socket.gethostname())
