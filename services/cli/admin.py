"""``rmqstore admin promote``: a switchover, run against the slave's writer
(``docs/replication.md``, "Switchover, step by step"); ``rmqstore admin set-perm`` drains a
broker (``set_perm``).

``promote`` turns a slave into a master at runtime: refused (exit 1, nothing changed) while
the slave's master still answers on its HA port unless ``--force``; it prints the new master
term, the offset it begins at and where slaves connect (``--json``: one object).
"""

import argparse
import json

import grpc

from rmqstore import tls
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from services.cli import set_perm
from services.cli.errors import NOT_FOUND, UNAVAILABLE, CliError

DEFAULT_WRITER = "127.0.0.1:8100"
TIMEOUT_S = 60  # the follower stops within its poll, then delivery and retention start


def run_promote(args: argparse.Namespace) -> int:
    request = commitlog_pb2.PromoteRequest(role=args.role, force=args.force, ha_port=args.ha_port)
    try:
        with tls.client_channel(args.commitlog, args) as channel:
            got = commitlog_pb2_grpc.CommitLogStub(channel).Promote(request, timeout=TIMEOUT_S)
    except grpc.RpcError as e:
        code = e.code()  # type: ignore[attr-defined]
        details = e.details()  # type: ignore[attr-defined]
        if code == grpc.StatusCode.FAILED_PRECONDITION:
            raise CliError(f"not promoted: {details}", NOT_FOUND) from None
        raise CliError(f"writer at {args.commitlog}: {code.name}: {details}", UNAVAILABLE) from None
    if args.json:
        print(json.dumps({"role": got.role, "term": got.term, "startOffset": got.start_offset,
                          "epoch": got.epoch, "haPort": got.ha_port,
                          "formerMaster": got.former_master}), flush=True)  # fmt: skip
    else:
        print(f"promoted: {got.role}, master term {got.term} from offset {got.start_offset} "
              f"(writer epoch {got.epoch}); slaves connect to HA port {got.ha_port}; no longer "
              f"following {got.former_master}", flush=True)  # fmt: skip
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("admin", help="operate brokers (promote a slave, drain a broker)")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    v = verbs.add_parser("promote", help="turn a caught-up slave into the master, at runtime")
    v.add_argument("--commitlog", default=DEFAULT_WRITER, help="the slave's writer address")
    v.add_argument("--role", choices=("async_master", "sync_master"), default="async_master",
                   help="the promoted writer's role (default: %(default)s)")
    v.add_argument("--force", action="store_true",
                   help="promote although the master still answers on its HA port")
    v.add_argument("--ha-port", type=int, default=0,
                   help="take slaves on this port (default: the writer's --ha-port)")
    v.add_argument("--json", action="store_true", help="print the result as one JSON object")
    tls.add_tls_flags(v)
    v.set_defaults(run=run_promote)
    set_perm.register(verbs)
