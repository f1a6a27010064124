"""``rmqstore serve``: run every service of one store node locally, as separate processes.

Ports: writer N, query N+1, consume-queue builder N+2, index builder N+3, proxy (RocketMQ 5
protocol) N+4 (``--port-base N``), their metrics on N+10..N+14; the console (HTTP,
``--auth none``: loopback only) on N+5. Ctrl-C or SIGTERM stops them all (builders first,
writer last).
"""

import argparse
import importlib.util
import ipaddress
import signal
import subprocess
import sys
import threading
import time

from services.commitlog.config import WriterConfig
from services.proxy import config as proxy_config

SERVICES = (  # name, module, extra args, port slot
    ("commitlog", "services.commitlog", (), 0),
    ("consume-queue", "services.indexer", ("consume-queue",), 2),
    ("index", "services.indexer", ("index",), 3),
    ("query", "services.query", (), 1),
    ("proxy", "services.proxy", (), 4),
    ("console", "services.console", (), 5),
)


def _exists(module: str) -> bool:
    return importlib.util.find_spec(f"{module}.__main__") is not None


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _command(name: str, module: str, extra: tuple, args: argparse.Namespace, ports: dict) -> list:
    host = args.host
    if name == "console":  # HTTP, no metrics port; reads through the query service
        return [sys.executable, "-m", module, "--store", args.store, "--listen",
                f"{host}:{ports[name]}", "--query", f"{host}:{ports['query']}",
                "--commitlog", f"{host}:{ports['commitlog']}", "--index-entries",
                str(args.index_entries)]
    cmd = [
        sys.executable,
        "-m",
        module,
        *extra,
        "--store",
        args.store,
        "--listen",
        f"{host}:{ports[name]}",
    ]
    if args.metrics:
        cmd += ["--metrics-port", str(ports[name] + 10)]
    writer = f"{host}:{ports['commitlog']}"
    if name == "commitlog":
        cmd += [
            "--commitlog-segment-size",
            str(args.commitlog_segment_size),
            "--flush",
            args.flush,
            "--max-message-size",
            str(args.max_message_size),
            "--queues-per-topic",
            str(args.queues_per_topic),
            "--dispatch-linger-ms",
            str(args.dispatch_linger_ms),
        ]
    elif name == "proxy":
        cmd += ["--commitlog", writer, *proxy_config.forward(args)]
    elif name == "consume-queue":
        cmd += ["--commitlog", writer, "--cq-entries-per-file", str(args.cq_entries_per_file)]
    else:
        cmd += [
            "--commitlog",
            writer,
            "--index-slots",
            str(args.index_slots),
            "--index-entries",
            str(args.index_entries),
        ]
    return cmd


def run(args: argparse.Namespace) -> int:
    base = args.port_base
    ports = {
        "commitlog": args.commitlog_port or base,
        "query": args.query_port or base + 1,
        "consume-queue": args.cq_port or base + 2,
        "index": args.index_port or base + 3,
        "proxy": args.proxy_port or base + 4,
        "console": args.console_port or base + 5,
    }
    procs: list[tuple[str, subprocess.Popen]] = []
    stopping = threading.Event()

    def stop_all(*_a: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop_all)
    signal.signal(signal.SIGINT, stop_all)
    for name, module, extra, _slot in SERVICES:
        if name == "console" and not _loopback(args.host):
            print(f"{name:14s} not started: without authentication it serves loopback only "
                  "(run python -m services.console with --auth basic or proxy-header)",
                  flush=True)
            continue
        if not _exists(module):
            print(f"{name:14s} not available in this build", flush=True)
            continue
        cmd = _command(name, module, extra, args, ports)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None, text=True)
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the listening line, or EOF if it failed
        if " listening on " not in line:
            print(f"{name} failed to start", file=sys.stderr)
            procs.append((name, proc))
            stop_all()
            break
        where = line.rsplit(" listening on ", 1)[1].strip()
        print(
            f"{name:14s} http://{where}/" if name == "console" else
            f"{name:14s} grpc {where}"
            + (f"  metrics http://{args.host}:{ports[name] + 10}/metrics" if args.metrics else ""),
            flush=True,
        )
        threading.Thread(target=lambda s=proc.stdout: [None for _ in s], daemon=True).start()
        procs.append((name, proc))
    if not stopping.is_set():
        print("serving; Ctrl-C to stop", flush=True)
    code = 0
    while not stopping.is_set():
        for name, proc in procs:
            if proc.poll() is not None:
                print(f"{name} exited with code {proc.returncode}; stopping", file=sys.stderr)
                code = 1
                stopping.set()
        stopping.wait(0.5)
    for _name, proc in reversed(procs):  # builders and query first, the writer last
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 30
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if proc.poll() is None:
                proc.kill()
    print("stopped", flush=True)
    return code


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run every service locally on one store")
    p.add_argument("--store", default="./data/store")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port-base", type=int, default=8100)
    p.add_argument("--commitlog-port", type=int, default=0)
    p.add_argument("--query-port", type=int, default=0)
    p.add_argument("--cq-port", type=int, default=0)
    p.add_argument("--index-port", type=int, default=0)
    p.add_argument("--proxy-port", type=int, default=0)
    p.add_argument("--console-port", type=int, default=0)
    p.add_argument("--no-metrics", dest="metrics", action="store_false")
    p.add_argument("--commitlog-segment-size", type=int, default=WriterConfig.segment_size)
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
    p.add_argument("--index-slots", type=int, default=5_000_000)
    p.add_argument("--index-entries", type=int, default=20_000_000)
    p.add_argument("--cq-entries-per-file", type=int, default=300_000)
    proxy_config.add_flags(p.add_argument_group("proxy (RocketMQ 5 protocol)"))
    p.set_defaults(run=run)
