"""``rmqstore group list | describe G | reset G --topic T --to-time T | --to-offset N``:
consumer groups of the RocketMQ 5 protocol service, through its ``ConsumerGroups`` API (the
proxy owns the groups' progress files).

``describe`` shows per queue what ``mqadmin consumerProgress`` shows: committed offset, max
offset, lag and messages in flight, and the offsets skipped since the proxy started because
retention had deleted their messages — the queues of the topics the group consumes and of its
retry topics (``%RETRY%<group>_<topic>``, queue 0). ``reset`` moves the group's committed
offset of every queue of the topic; what it had in flight there is forgotten.
``describe --namesrv`` shows the group on every broker of a cluster (``group_cluster``).
"""

import argparse
import json
from typing import Any

import grpc

from rmqstore import access_keys, tls
from rmqstore.group_json import describe_json
from rmqstore.group_json import group_json as _group_json
from rmqstore.group_json import queue_json as _queue_json
from rmqstore.times import TimeFormatError, parse_time
from rmqstore.v1 import groups_pb2, groups_pb2_grpc
from services.cli import client
from services.cli.errors import NOT_FOUND, UNAVAILABLE, USAGE, CliError
from services.cli.group_cluster import run_describe_in_cluster

DEFAULT_PROXY = "127.0.0.1:8104"
TIMEOUT_S = 30


def _call(args: argparse.Namespace, fn: str, request: Any) -> Any:
    access_key, secret_key = client.signing_keys(args)
    try:
        with tls.client_channel(args.proxy, args) as channel:
            stub = groups_pb2_grpc.ConsumerGroupsStub(channel)
            md = access_keys.metadata(access_key, secret_key)
            return getattr(stub, fn)(request, timeout=TIMEOUT_S, metadata=md)
    except grpc.RpcError as e:
        code, details = e.code(), e.details()  # type: ignore[attr-defined]
        if code == grpc.StatusCode.NOT_FOUND:
            raise CliError(details, NOT_FOUND) from None
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            raise CliError(details, USAGE) from None
        if code == grpc.StatusCode.UNAUTHENTICATED:
            raise CliError(f"proxy at {args.proxy}: {details} (sign with --access-key and "
                           "--secret-key-file)", USAGE) from None
        raise CliError(f"proxy at {args.proxy}: {code.name}: {details}", UNAVAILABLE) from None


def _show_queues(args: argparse.Namespace, queues: Any) -> None:
    if args.json:
        for q in queues:
            print(json.dumps(_queue_json(q)))
        return
    w = max([24, *(len(q.topic) for q in queues)])  # retry topics' names are long
    print(f"{'topic':<{w}} {'queue':>5} {'committed':>12} {'max':>12} {'lag':>10} "
          f"{'in flight':>9} {'skipped':>10}")  # fmt: skip
    for q in queues:
        print(f"{q.topic:<{w}} {q.queue_id:>5} {q.committed_offset:>12} {q.max_offset:>12} "
              f"{q.lag:>10} {q.in_flight:>9} {q.skipped:>10}")  # fmt: skip
    print(f"total lag {sum(q.lag for q in queues)}, in flight {sum(q.in_flight for q in queues)}, "
          f"skipped {sum(q.skipped for q in queues)}")


def _group_line(g: groups_pb2.GroupConfig) -> str:
    kind = "fifo" if g.fifo else "normal"
    return f"{g.name}  {kind}  max attempts {g.retry_max_times + 1}" + (
        "" if g.consume_enable else "  (consumption disabled)"
    )


def run_list(args: argparse.Namespace) -> int:
    for g in _call(args, "ListGroups", groups_pb2.ListGroupsRequest()).groups:
        print(json.dumps(_group_json(g)) if args.json else _group_line(g))
    return 0


def run_describe(args: argparse.Namespace) -> int:
    if args.namesrv:
        return run_describe_in_cluster(args, _call)
    r = _call(args, "DescribeGroup", groups_pb2.DescribeGroupRequest(group=args.group))
    if args.json:
        print(json.dumps(describe_json(r.group, r.queues, r.dead_letters)))
    else:
        print(_group_line(r.group))
        _show_queues(args, r.queues)
        dead = r.dead_letters
        if dead.failed or dead.dropped:
            print(f"dead letters not written: {dead.failed} tries failed, {dead.dropped} "
                  f"messages settled without one (last error: {dead.last_error})")  # fmt: skip
    return 0


def run_reset(args: argparse.Namespace) -> int:
    if (args.to_time is None) == (args.to_offset is None):
        raise CliError("give one of --to-time and --to-offset", USAGE)
    request = groups_pb2.ResetGroupRequest(group=args.group, topic=args.topic)
    if args.to_offset is not None:
        if args.to_offset < 0:
            raise CliError("--to-offset must not be negative", USAGE)
        request.offset = args.to_offset
    else:
        try:
            request.timestamp_ms = parse_time(args.to_time)
        except TimeFormatError as e:
            raise CliError(f"--to-time: {e}", USAGE) from None
    r = _call(args, "ResetGroup", request)
    if not args.json:
        print(f"group {args.group} reset on {args.topic}:")
    _show_queues(args, r.queues)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("group", help="consumer groups: list, describe (progress, lag), reset")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(name: str, help_text: str, run) -> argparse.ArgumentParser:
        v = verbs.add_parser(name, help=help_text)
        v.add_argument("--proxy", default=DEFAULT_PROXY, help="the RocketMQ 5 protocol service")
        v.add_argument("--json", action="store_true", help="JSON lines")
        access_keys.add_secret_flags(v, "to sign calls to the proxy with")
        tls.add_tls_flags(v)
        v.set_defaults(run=run)
        return v

    verb("list", "list the consumer groups", run_list)
    d = verb("describe", "per queue: committed offset, max offset, lag, in flight", run_describe)
    d.add_argument("group")
    d.add_argument("--namesrv", default="", metavar="HOST:PORT;...",
                   help="every broker of a cluster, found through these name servers: the "
                   "queues per broker and the lag summed over all")  # fmt: skip
    d.add_argument("--cluster", default="", help="with --namesrv: the cluster (default: the "
                   "only one)")  # fmt: skip
    r = verb("reset", "move a group's committed offsets on a topic", run_reset)
    r.add_argument("group")
    r.add_argument("--topic", required=True)
    r.add_argument("--to-time", help="first message stored at or after this time "
                   "(epoch ms, ISO-8601, or relative: -1h)")  # fmt: skip
    r.add_argument("--to-offset", type=int, help="this queue offset in every queue")
