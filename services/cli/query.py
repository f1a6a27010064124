"""``rmqstore query-key | query-id | pull | offset-by-time``: read commands against the query
service.

Human-readable lines by default (times as ISO-8601 with their offset); ``--json`` prints one
JSON document per command: the messages (msgId, uniqKey, topic, queueId, queueOffset,
phyOffset, storeTimestamp in epoch ms, keys, tags, properties, body as text when it is UTF-8,
else base64 with ``bodyEncoding``) plus status, truncated and cursor where they apply. Times
are given as epoch ms, ISO-8601 with a zone or relative (``-15m``). Exit status
(``services.cli.errors``): 0, 1 when nothing was found, 2 for a bad flag or a request the
service refused, 3 when the service could not be reached or failed.
"""

import argparse
import json
from typing import Any

import grpc

from rmqstore import tls
from rmqstore.message_json import (
    cluster_fields,
    id_fields,
    key_fields,
    message_json,
    pull_fields,
    with_messages,
)
from rmqstore.v1 import common_pb2, query_pb2, query_pb2_grpc
from services.cli import client
from services.cli.client import INT32_MAX, INT64_MAX, int_in
from services.cli.errors import NOT_FOUND, OK

DEFAULT_QUERY = "127.0.0.1:8101"
TIME_FORMS = "epoch ms, ISO-8601 with a zone (2026-11-26T10:00:00Z) or relative (-15m, now)"


def _line(m: common_pb2.StoredMessage) -> str:
    body = message_json(m)
    text = body["body"] if body["bodyEncoding"] == "text" else f"<{len(m.body)} bytes binary>"
    if len(text) > 80:
        text = text[:77] + "..."
    return (f"{m.msg_id} {m.topic}/{m.queue_id}@{m.queue_offset} phy={m.phy_offset} "
            f"time={client.format_time(m.store_timestamp)} uniq={m.unique_key or '-'} "
            f"keys={m.keys!r} tags={m.tags!r} body={text!r}")  # fmt: skip


def _stub(args: argparse.Namespace) -> query_pb2_grpc.QueryStub:
    return query_pb2_grpc.QueryStub(client.channel(args.query, args))


def _emit(args: argparse.Namespace, doc: dict[str, Any], messages: list,
          cluster: Any = None) -> int:  # fmt: skip
    """``cluster``: a cluster-wide answer (its brokers, and the broker of each message)."""
    brokers = list(cluster.message_brokers) if cluster is not None else []
    if cluster is not None:
        doc = {**doc, **cluster_fields(cluster)}
    if args.json:
        out = with_messages(doc, messages)
        if cluster is not None:
            for m, broker in zip(out["messages"], brokers, strict=True):
                m["broker"] = broker
        print(json.dumps(out, ensure_ascii=False))
    else:
        for k, v in doc.items():
            if k != "brokers":
                print(f"{k}: {v}")
        for b in doc.get("brokers", []):
            why = f" ({b['detail']})" if b["detail"] and b["answer"] != "ok" else ""
            print(f"broker {b['broker']} {b['address']}: {b['answer']}{why}, "
                  f"{b['messages']} messages")  # fmt: skip
        for i, m in enumerate(messages):
            print((f"[{brokers[i]}] " if brokers else "") + _line(m))
    return OK if messages else NOT_FOUND


def _call(args: argparse.Namespace, fn, request) -> Any:
    try:
        return fn(request, timeout=args.timeout)
    except grpc.RpcError as e:
        raise client.rpc_error(e, "Query", args.query) from None


def run_query_key(args: argparse.Namespace) -> int:
    if args.end and args.end < args.begin:
        raise client.CliError(f"--end {args.end} is before --begin {args.begin}")
    resp = _call(args, _stub(args).QueryByKey, query_pb2.QueryByKeyRequest(
        topic=args.topic, key=args.key, begin_timestamp=args.begin, end_timestamp=args.end,
        max_results=args.max, cursor=args.cursor or "", scope=_scope(args)))  # fmt: skip
    return _emit(args, key_fields(resp), list(resp.messages), resp if args.cluster else None)


def run_query_id(args: argparse.Namespace) -> int:
    resp = _call(args, _stub(args).QueryById, query_pb2.QueryByIdRequest(
        id=args.id, topic=args.topic or "", scope=_scope(args)))  # fmt: skip
    return _emit(args, id_fields(resp), list(resp.messages), resp if args.cluster else None)


def _scope(args: argparse.Namespace) -> query_pb2.Scope:
    return query_pb2.SCOPE_CLUSTER if args.cluster else query_pb2.SCOPE_BROKER


def _cluster_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", action="store_true",
                   help="every broker of the cluster (the query service asks its peers): "
                        "says per broker ok, unreachable or timeout, and whether the answer "
                        "is partial")  # fmt: skip


def run_pull(args: argparse.Namespace) -> int:
    resp = _call(args, _stub(args).Pull, query_pb2.PullRequest(
        topic=args.topic, queue_id=args.queue, offset=args.offset, max_messages=args.max,
        tag_expression=args.tags or ""))  # fmt: skip
    return _emit(args, pull_fields(resp), list(resp.messages))


def run_offset_by_time(args: argparse.Namespace) -> int:
    boundary = query_pb2.UPPER if args.boundary == "upper" else query_pb2.LOWER
    stub = _stub(args)
    resp = _call(args, stub.OffsetByTime, query_pb2.OffsetByTimeRequest(
        topic=args.topic, queue_id=args.queue, timestamp=args.time, boundary=boundary))
    offsets = _call(args, stub.QueueOffsets,
                    query_pb2.QueueOffsetsRequest(topic=args.topic, queue_id=args.queue))
    doc = {"offset": resp.offset, "boundary": args.boundary, "time": args.time,
           "minOffset": offsets.min_offset, "maxOffset": offsets.max_offset}  # fmt: skip
    if args.json:
        print(json.dumps(doc))
    else:
        doc["time"] = f"{client.format_time(args.time)} ({args.time})"
        for k, v in doc.items():
            print(f"{k}: {v}")
    return OK


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--query", type=client.address, default=DEFAULT_QUERY,
                   help="query service address (port base + 1 of 'rmqstore serve')")
    tls.add_tls_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--timeout", type=client.positive_seconds, default=30.0, help="seconds")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("query-key", help="messages of a topic by key and store-time range")
    _common(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--begin", type=client.time_ms, default=0,
                   help=f"store time, inclusive: {TIME_FORMS}")
    p.add_argument("--end", type=client.time_ms, default=0,
                   help="store time, inclusive (0 = no bound)")
    p.add_argument("--max", type=int_in(0, INT32_MAX), default=0, help="results per page (0 = 64)")
    p.add_argument("--cursor", help="continue a truncated answer")
    _cluster_flag(p)
    p.set_defaults(run=run_query_key)

    p = sub.add_parser("query-id", help="a message by offset message id or UNIQ_KEY")
    _common(p)
    p.add_argument("id")
    p.add_argument("--topic", help="narrow a UNIQ_KEY lookup to one topic")
    _cluster_flag(p)
    p.set_defaults(run=run_query_id)

    p = sub.add_parser("pull", help="messages of a queue from an offset")
    _common(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--queue", type=int_in(0, INT32_MAX), required=True)
    p.add_argument("--offset", type=int_in(0, INT64_MAX), required=True)
    p.add_argument("--max", type=int_in(0, INT32_MAX), default=0, help="messages (0 = 32)")
    p.add_argument("--tags", help="tag expression: A||B or *")
    p.set_defaults(run=run_pull)

    p = sub.add_parser("offset-by-time", help="queue offset of a store time")
    _common(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--queue", type=int_in(0, INT32_MAX), required=True)
    p.add_argument("--time", type=client.time_ms, required=True, help=f"store time: {TIME_FORMS}")
    p.add_argument("--boundary", choices=("lower", "upper"), default="lower",
                   help="first at/after (lower) or last at/before (upper)")  # fmt: skip
    p.set_defaults(run=run_offset_by_time)
