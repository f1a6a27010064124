"""``rmqstore consume --group G --topic T``: receive a consumer group's messages through the
RocketMQ 5 protocol service (as a SimpleConsumer would), print each, and acknowledge it
(``--no-ack``: print only; the messages become visible again after ``--invisible``).

Each message is printed (and flushed) before it is acknowledged, so a killed run has printed
everything it acknowledged. It stops after ``--count`` messages, or once a receive has waited
``--wait`` seconds for nothing (``--follow``: never). ``--json``: one JSON object a line.
"""

import argparse
import base64
import json
import os
import socket
import sys
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration

from rmqstore import access_keys, tls
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb
from rmqstore.rocketmq import service_pb2_grpc
from services.cli import client
from services.cli.errors import NOT_FOUND, UNAVAILABLE, USAGE, CliError

DEFAULT_PROXY = "127.0.0.1:8104"
OK_CODES = (pb.OK, pb.MESSAGE_NOT_FOUND, pb.MULTIPLE_RESULTS)


def _metadata(keys: tuple[str, str] = ("", "")) -> tuple[tuple[str, str], ...]:
    """A call's headers, signed now when there is an access key (each call signs afresh:
    the proxy refuses a date outside its window)."""
    return (("x-mq-client-id", f"{socket.gethostname()}@{os.getpid()}@0@rmqstore-cli"),
            ("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2"),
            *access_keys.metadata(*keys))  # fmt: skip


def message_json(m: pb.Message) -> dict[str, Any]:
    sp = m.system_properties
    try:
        body, encoding = m.body.decode("utf-8"), "text"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(m.body).decode(), "base64"
    return {
        "messageId": sp.message_id, "topic": m.topic.name, "queueId": sp.queue_id,
        "queueOffset": sp.queue_offset, "deliveryAttempt": sp.delivery_attempt,
        "tag": sp.tag, "keys": list(sp.keys), "messageGroup": sp.message_group,
        "bornTimestamp": sp.born_timestamp.ToMilliseconds(),
        "storeTimestamp": sp.store_timestamp.ToMilliseconds(),
        "properties": dict(m.user_properties), "body": body, "bodyEncoding": encoding,
    }  # fmt: skip


def _line(m: pb.Message) -> str:
    sp = m.system_properties
    body = m.body.decode("utf-8", errors="replace")
    return (f"{sp.message_id}  q{sp.queue_id}:{sp.queue_offset}  attempt {sp.delivery_attempt}"
            f"  tag {sp.tag or '-'}  keys {' '.join(sp.keys) or '-'}  {body}")  # fmt: skip


def _status(st: pb.Status, what: str) -> None:
    if st.code in OK_CODES:
        return
    code = pb.Code.Name(st.code) if st.code in pb.Code.values() else str(st.code)
    exit_code = USAGE if 40000 <= st.code < 50000 and st.code != pb.TOPIC_NOT_FOUND else UNAVAILABLE
    if st.code == pb.TOPIC_NOT_FOUND:
        exit_code = NOT_FOUND
    raise CliError(f"{what}: {code}: {st.message}", exit_code)


def _ack(stub: Any, keys: tuple[str, str], request: spb.ReceiveMessageRequest, m: pb.Message
         ) -> None:  # fmt: skip
    sp = m.system_properties
    entry = spb.AckMessageEntry(message_id=sp.message_id, receipt_handle=sp.receipt_handle)
    ack = spb.AckMessageRequest(
        group=request.group, topic=request.message_queue.topic, entries=[entry]
    )
    reply = stub.AckMessage(ack, metadata=_metadata(keys), timeout=10)
    _status(reply.status, f"ack of {sp.message_id}")


def run(args: argparse.Namespace) -> int:
    if args.count < 0 or not 1 <= args.batch <= 32 or args.invisible < 1 or args.wait < 0:
        raise CliError("--count >= 0, --batch 1..32, --invisible >= 1, --wait >= 0", USAGE)
    keys = client.signing_keys(args)
    done = 0
    try:
        with tls.client_channel(args.proxy, args) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            while not args.count or done < args.count:
                want = min(args.batch, args.count - done) if args.count else args.batch
                request = spb.ReceiveMessageRequest(
                    group=pb.Resource(name=args.group),
                    message_queue=pb.MessageQueue(topic=pb.Resource(name=args.topic)),
                    filter_expression=pb.FilterExpression(type=pb.TAG, expression=args.tags),
                    batch_size=want, invisible_duration=Duration(seconds=args.invisible),
                    long_polling_timeout=Duration(seconds=int(args.wait)),
                )  # fmt: skip
                got = []
                for r in stub.ReceiveMessage(request, metadata=_metadata(keys),
                                            timeout=args.wait + 10):
                    if r.HasField("status"):
                        _status(r.status, "receive")
                    elif r.HasField("message"):
                        got.append(r.message)
                for m in got:
                    print(json.dumps(message_json(m)) if args.json else _line(m), flush=True)
                    if not args.no_ack:
                        _ack(stub, keys, request, m)
                    done += 1
                if not got and not args.follow:
                    break
    except grpc.RpcError as e:
        code, details = e.code(), e.details()  # type: ignore[attr-defined]
        raise CliError(f"proxy at {args.proxy}: {code.name}: {details}", UNAVAILABLE) from None
    print(f"{done} message(s) {'received' if args.no_ack else 'consumed'}", file=sys.stderr)
    return 0 if done or not args.count else NOT_FOUND


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("consume", help="receive (and acknowledge) a consumer group's messages")
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--proxy", default=DEFAULT_PROXY, help="the RocketMQ 5 protocol service")
    p.add_argument("--tags", default="*", help="tag filter: * or a||b (default: *)")
    p.add_argument("--count", type=int, default=0, help="stop after this many (0: no limit)")
    p.add_argument("--batch", type=int, default=16, help="messages per receive (1..32)")
    p.add_argument("--invisible", type=int, default=30,
                   help="seconds a received message stays invisible to the group")  # fmt: skip
    p.add_argument("--wait", type=float, default=5, help="seconds a receive waits (default 5)")
    p.add_argument("--follow", action="store_true", help="keep waiting for new messages")
    p.add_argument("--no-ack", action="store_true", help="print only: do not acknowledge")
    p.add_argument("--json", action="store_true", help="one JSON object per message")
    access_keys.add_secret_flags(p, "to sign calls to the proxy with")
    tls.add_tls_flags(p)
    p.set_defaults(run=run)
