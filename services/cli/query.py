"""``rmqstore query-key | query-id | pull | offset-by-time``: read commands against the query
service.

Human-readable lines by default; ``--json`` prints one JSON document per command: the
messages (msgId, uniqKey, topic, queueId, queueOffset, phyOffset, storeTimestamp, keys, tags,
properties, body as text when it is UTF-8, else base64 with ``bodyEncoding``) plus status,
truncated and cursor where they apply. Exit status: 0, 1 when nothing was found, 2 on an error
status from the service.
"""

import argparse
import json
import sys
from typing import Any

import grpc

from rmqstore import tls
from rmqstore.message_json import id_fields, key_fields, message_json, pull_fields
from rmqstore.v1 import common_pb2, query_pb2, query_pb2_grpc

DEFAULT_QUERY = "127.0.0.1:8101"


def _line(m: common_pb2.StoredMessage) -> str:
    body = message_json(m)
    text = body["body"] if body["bodyEncoding"] == "text" else f"<{len(m.body)} bytes binary>"
    if len(text) > 80:
        text = text[:77] + "..."
    return (f"{m.msg_id} {m.topic}/{m.queue_id}@{m.queue_offset} phy={m.phy_offset} "
            f"time={m.store_timestamp} uniq={m.unique_key or '-'} keys={m.keys!r} "
            f"tags={m.tags!r} body={text!r}")


def _stub(args: argparse.Namespace) -> query_pb2_grpc.QueryStub:
    return query_pb2_grpc.QueryStub(tls.client_channel(args.query, args))


def _emit(args: argparse.Namespace, doc: dict[str, Any], messages: list) -> int:
    if args.json:
        doc["messages"] = [message_json(m) for m in messages]
        print(json.dumps(doc, ensure_ascii=False))
    else:
        for k, v in doc.items():
            print(f"{k}: {v}")
        for m in messages:
            print(_line(m))
    return 0


def _call(fn, request, timeout: float) -> Any:
    try:
        return fn(request, timeout=timeout)
    except grpc.RpcError as e:
        print(f"error: {e.code().name}: {e.details()}", file=sys.stderr)
        return None


def run_query_key(args: argparse.Namespace) -> int:
    resp = _call(_stub(args).QueryByKey, query_pb2.QueryByKeyRequest(
        topic=args.topic, key=args.key, begin_timestamp=args.begin, end_timestamp=args.end,
        max_results=args.max, cursor=args.cursor or ""), args.timeout)
    if resp is None:
        return 2
    _emit(args, key_fields(resp), list(resp.messages))
    return 0 if resp.messages else 1


def run_query_id(args: argparse.Namespace) -> int:
    resp = _call(_stub(args).QueryById,
                 query_pb2.QueryByIdRequest(id=args.id, topic=args.topic or ""), args.timeout)
    if resp is None:
        return 2
    _emit(args, id_fields(resp), list(resp.messages))
    return 0 if resp.messages else 1


def run_pull(args: argparse.Namespace) -> int:
    resp = _call(_stub(args).Pull, query_pb2.PullRequest(
        topic=args.topic, queue_id=args.queue, offset=args.offset, max_messages=args.max,
        tag_expression=args.tags or ""), args.timeout)
    if resp is None:
        return 2
    _emit(args, pull_fields(resp), list(resp.messages))
    return 0


def run_offset_by_time(args: argparse.Namespace) -> int:
    boundary = query_pb2.UPPER if args.boundary == "upper" else query_pb2.LOWER
    resp = _call(_stub(args).OffsetByTime, query_pb2.OffsetByTimeRequest(
        topic=args.topic, queue_id=args.queue, timestamp=args.time, boundary=boundary),
        args.timeout)
    if resp is None:
        return 2
    offsets = _call(_stub(args).QueueOffsets,
                    query_pb2.QueueOffsetsRequest(topic=args.topic, queue_id=args.queue),
                    args.timeout)
    if offsets is None:
        return 2
    doc = {"offset": resp.offset, "boundary": args.boundary,
           "minOffset": offsets.min_offset, "maxOffset": offsets.max_offset}
    if args.json:
        print(json.dumps(doc))
    else:
        for k, v in doc.items():
            print(f"{k}: {v}")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--query", default=DEFAULT_QUERY, help="query service address")
    tls.add_tls_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("query-key", help="messages of a topic by key and store-time range")
    _common(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--begin", type=int, default=0, help="ms, inclusive")
    p.add_argument("--end", type=int, default=0, help="ms, inclusive (0 = no bound)")
    p.add_argument("--max", type=int, default=0, help="results per page (0 = 64)")
    p.add_argument("--cursor", help="continue a truncated answer")
    p.set_defaults(run=run_query_key)

    p = sub.add_parser("query-id", help="a message by offset message id or UNIQ_KEY")
    _common(p)
    p.add_argument("id")
    p.add_argument("--topic", help="narrow a UNIQ_KEY lookup to one topic")
    p.set_defaults(run=run_query_id)

    p = sub.add_parser("pull", help="messages of a queue from an offset")
    _common(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--queue", type=int, required=True)
    p.add_argument("--offset", type=int, required=True)
    p.add_argument("--max", type=int, default=0, help="messages (0 = 32)")
    p.add_argument("--tags", help="tag expression: A||B or *")
    p.set_defaults(run=run_pull)

    p = sub.add_parser("offset-by-time", help="queue offset of a store time")
    _common(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--queue", type=int, required=True)
    p.add_argument("--time", type=int, required=True, help="ms")
    p.add_argument("--boundary", choices=("lower", "upper"), default="lower",
                   help="first at/after (lower) or last at/before (upper)")
    p.set_defaults(run=run_offset_by_time)
