"""``rmqstore topic create | list | describe``: the topic configuration (``config/topics.json``,
RocketMQ's format), administered through the commitlog writer, the file's one writer.

``create`` is idempotent: an existing topic is shown unchanged (exit 0). With ``--namesrv``
it is created on every broker of a cluster (``topic_cluster``). ``describe`` of an
unknown topic exits 1. ``--json`` prints RocketMQ's field names.
"""

import argparse
import json
from typing import Any

import grpc

from rmqstore import access_keys, tls
from rmqstore.v1 import topics_pb2, topics_pb2_grpc
from services.cli.errors import NOT_FOUND, UNAVAILABLE, USAGE, CliError
from services.cli.topic_cluster import run_create_in_cluster

DEFAULT_WRITER = "127.0.0.1:8100"
TIMEOUT_S = 10


def topic_json(t: topics_pb2.TopicConfig) -> dict[str, Any]:
    out: dict[str, Any] = {
        "topicName": t.name,
        "readQueueNums": t.read_queue_nums,
        "writeQueueNums": t.write_queue_nums,
        "perm": t.perm,
        "order": t.order,
        "topicSysFlag": t.topic_sys_flag,
        "topicFilterType": t.topic_filter_type,
        "messageType": t.attributes.get("+message.type", "MIXED"),
    }
    if t.attributes:
        out["attributes"] = dict(t.attributes)
    return out


def _perm_text(perm: int) -> str:
    return ("r" if perm & 4 else "-") + ("w" if perm & 2 else "-")


def _line(t: topics_pb2.TopicConfig) -> str:
    kind = t.attributes.get("+message.type", "MIXED")
    return (f"{t.name}  queues r{t.read_queue_nums}/w{t.write_queue_nums}  "
            f"perm {t.perm} ({_perm_text(t.perm)})  type {kind}")  # fmt: skip


def _call(args: argparse.Namespace, fn: str, request: Any) -> Any:
    try:
        with tls.client_channel(args.commitlog, args) as channel:
            return getattr(topics_pb2_grpc.TopicsStub(channel), fn)(request, timeout=TIMEOUT_S)
    except grpc.RpcError as e:
        code = e.code()  # type: ignore[attr-defined]
        details = e.details()  # type: ignore[attr-defined]
        if code == grpc.StatusCode.NOT_FOUND:
            raise CliError(details, NOT_FOUND) from None
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            raise CliError(details, USAGE) from None
        raise CliError(f"writer at {args.commitlog}: {code.name}: {details}", UNAVAILABLE) from None


def _show(args: argparse.Namespace, topics: list[topics_pb2.TopicConfig]) -> None:
    for t in topics:
        print(json.dumps(topic_json(t)) if args.json else _line(t))


def run_create(args: argparse.Namespace) -> int:
    if args.namesrv:
        return run_create_in_cluster(args)
    t = _call(args, "CreateTopic", topics_pb2.CreateTopicRequest(
        name=args.name, queue_nums=args.queues, perm=args.perm, message_type=args.type,
    ))  # fmt: skip
    if not args.json:
        print("created" if t.created else "exists, unchanged", end=": ")
    _show(args, [t])
    return 0


def run_list(args: argparse.Namespace) -> int:
    _show(args, list(_call(args, "ListTopics", topics_pb2.ListTopicsRequest()).topics))
    return 0


def run_describe(args: argparse.Namespace) -> int:
    _show(args, [_call(args, "GetTopic", topics_pb2.GetTopicRequest(name=args.name))])
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("topic", help="create, list and describe topics (config/topics.json)")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(name: str, help_text: str, run) -> argparse.ArgumentParser:
        v = verbs.add_parser(name, help=help_text)
        v.add_argument("--commitlog", default=DEFAULT_WRITER, help="writer address")
        v.add_argument("--json", action="store_true", help="one JSON object per topic")
        tls.add_tls_flags(v)
        v.set_defaults(run=run)
        return v

    c = verb("create", "create a topic (an existing one is left as it is)", run_create)
    c.add_argument("name")
    c.add_argument(
        "--queues",
        type=int,
        default=0,
        help="read and write queues (default: the writer's --queues-per-topic, each broker's "
        "with --namesrv)",
    )
    c.add_argument(
        "--namesrv",
        default="",
        metavar="HOST:PORT;...",
        help="create it on the master of every broker of a cluster, found through these name "
        "servers (as mqadmin updateTopic -c); brokers that have it are left as they are",
    )
    c.add_argument(
        "--cluster", default="", help="with --namesrv: the cluster (default: the only one)"
    )
    access_keys.add_secret_flags(
        c, "with --namesrv: to sign the requests to the brokers with (ones that take only "
        "signed requests: serve --access-key)")  # fmt: skip
    c.add_argument(
        "--perm",
        type=int,
        default=6,
        choices=(2, 4, 6),
        help="6 read+write, 4 read only, 2 write only",
    )
    c.add_argument(
        "--type",
        default="",
        type=str.upper,
        choices=("", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"),
        help="message type the topic accepts (default: MIXED, every type)",
    )
    verb("list", "list the topics", run_list)
    d = verb("describe", "show one topic", run_describe)
    d.add_argument("name")
