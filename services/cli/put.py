"""``rmqstore put``: send messages to the writer; also a load generator.

Input: flags (``--topic --body/--body-file --keys --tags --count``) or ``--file`` with one JSON
message per line (fields: topic, queueId, body | bodyB64, tags, keys, uniqKey, properties,
flag, sysFlag, bornTimestamp, bornHost, delayLevel, deliverAt, reconsumeTimes, preparedTxOfMsg,
waitStoreMsgOK). ``{i}`` in --keys/--body expands to the message number.
"""

import argparse
import asyncio
import base64
import json
import sys
import threading
import time
from collections.abc import Iterator

import grpc

from rmqstore import tls
from rmqstore.times import TimeFormatError, parse_time
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from services.cli import producers, put_stream


def message_from_json(d: dict, earlier: list | None = None) -> common_pb2.Message:
    """A message from one JSON line. ``preparedTxOfMsg`` names an earlier line (0-based) whose
    physical offset becomes the prepared-transaction offset; ``earlier`` holds their results."""
    ptx = 0
    if "preparedTxOfMsg" in d:
        ref = int(d["preparedTxOfMsg"])
        if earlier is None or not 0 <= ref < len(earlier):
            raise ValueError(f"preparedTxOfMsg {ref} does not name an earlier message")
        ptx = earlier[ref].phy_offset
    body = base64.b64decode(d["bodyB64"]) if "bodyB64" in d else d.get("body", "").encode()
    return common_pb2.Message(
        topic=d["topic"],
        queue_id=int(d.get("queueId", 0)),
        body=body,
        tags=d.get("tags") or "",
        keys=d.get("keys") or "",
        unique_key=d.get("uniqKey") or "",
        properties=[
            common_pb2.Property(name=k, value=str(v))
            for k, v in (d.get("properties") or {}).items()
        ],
        flag=int(d.get("flag", 0)),
        sys_flag=int(d.get("sysFlag", 0)),
        born_timestamp=int(d.get("bornTimestamp", 0)),
        born_host=d.get("bornHost") or "",
        delay_level=int(d.get("delayLevel", 0)),
        deliver_at_ms=parse_time(str(d["deliverAt"])) if "deliverAt" in d else 0,
        reconsume_times=int(d.get("reconsumeTimes", 0)),
        prepared_transaction_offset=ptx,
        no_wait_store=not d.get("waitStoreMsgOK", True),
        without_unique_key=not d.get("uniqKey"),
    )


def result_json(r: commitlog_pb2.PutResult) -> str:
    return json.dumps(
        {
            "msgId": r.msg_id,
            "uniqKey": r.unique_key,
            "phyOffset": r.phy_offset,
            "queueOffset": r.queue_offset,
            "size": r.size,
            "storeTimestamp": r.store_timestamp,
            "topic": r.topic,
            "queueId": r.queue_id,
        }
    )


def _fixed_body(args: argparse.Namespace) -> bytes | None:
    """The body every generated message carries, or None when --body has ``{i}``."""
    if args.body_file:
        with open(args.body_file, "rb") as f:
            return f.read()
    if args.body is not None:
        return None if "{i}" in args.body else args.body.encode()
    return b"x" * args.body_size


def _generated(args: argparse.Namespace, start: int, count: int) -> Iterator[common_pb2.Message]:
    fixed = _fixed_body(args)
    for i in range(start, start + count):
        body = fixed if fixed is not None else args.body.replace("{i}", str(i)).encode()
        q = args.queue if args.queue is not None else i % args.queues
        yield common_pb2.Message(
            topic=args.topic,
            queue_id=q,
            body=body,
            tags=args.tags or "",
            keys=(args.keys or "").replace("{i}", str(i)),
            delay_level=args.delay_level,
            deliver_at_ms=args.deliver_at or 0,
        )


def _generated_columns(
    args: argparse.Namespace, start: int, count: int
) -> Iterator[commitlog_pb2.MessageColumns]:
    """The same messages as ``_generated``, a batch at a time as columns (--columns)."""
    fixed, keys = _fixed_body(args), args.keys or ""
    for first in range(start, start + count, args.batch):
        numbers = range(first, min(first + args.batch, start + count))
        if fixed is not None:
            bodies, sizes = fixed * len(numbers), [len(fixed)] * len(numbers)
        else:
            each = [args.body.replace("{i}", str(i)).encode() for i in numbers]
            bodies, sizes = b"".join(each), [len(b) for b in each]
        yield commitlog_pb2.MessageColumns(
            topic=args.topic,
            body_size=sizes,
            bodies=bodies,
            queue_id=[args.queue] if args.queue is not None else [i % args.queues for i in numbers],
            tags=[args.tags] if args.tags else [],
            keys=[keys.replace("{i}", str(i)) for i in numbers] if "{i}" in keys else [keys],
        )


def _batches(msgs: Iterator[common_pb2.Message], size: int) -> Iterator[list]:
    batch = []
    for m in msgs:
        batch.append(m)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _send(stub, batch: list, latencies: list[float], out: list | None) -> int:
    t0 = time.perf_counter()
    if len(batch) == 1:
        results = [stub.Put(commitlog_pb2.PutRequest(message=batch[0]))]
    else:
        results = list(stub.PutBatch(commitlog_pb2.PutBatchRequest(messages=batch)).results)
    latencies.append(time.perf_counter() - t0)
    if out is not None:
        out.extend(results)
    return len(results)


def _sources(args: argparse.Namespace, start: int, count: int) -> Iterator:
    """A producer's batches: lists of Messages, or MessageColumns with --columns."""
    if args.columns:
        return _generated_columns(args, start, count)
    return _batches(_generated(args, start, count), args.batch)


def _requests(args: argparse.Namespace, start: int, count: int) -> Iterator:
    """A streaming producer's requests."""
    return map(put_stream.request, _sources(args, start, count))


async def _stream_one(args: argparse.Namespace, latencies: list[float]) -> int:
    """One producer's batches over one ``PutStream``; the messages acknowledged."""
    async with tls.aio_client_channel(args.commitlog, args) as ch:
        return await put_stream.send_all(commitlog_pb2_grpc.CommitLogStub(ch),
                                         _requests(args, 0, args.count), args.inflight,
                                         latencies)  # fmt: skip


def _send_all(args: argparse.Namespace, starts: list[int], per: list[int],
              latencies: list[float], collected: list) -> int:
    """Each producer's batches as one call each (``Put`` or ``PutBatch``), a thread and a
    channel per producer; the messages acknowledged."""
    counts = [0] * len(starts)
    errors: list[BaseException] = []

    def producer(p: int) -> None:
        own = commitlog_pb2_grpc.CommitLogStub(tls.client_channel(args.commitlog, args))
        lat: list[float] = []
        try:
            for b in _sources(args, starts[p], per[p]):
                counts[p] += _send(own, b, lat, collected if args.json else None)
        except BaseException as e:
            errors.append(e)
        latencies.extend(lat)

    threads = [threading.Thread(target=producer, args=(p,)) for p in range(len(starts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(counts)


def run(args: argparse.Namespace) -> int:
    for flag in ("batch", "producers", "inflight"):
        if getattr(args, flag) < 1:
            print(f"error: --{flag} must be at least 1", file=sys.stderr)
            return 2
    if args.columns and (args.file or args.json or args.delay_level or args.deliver_at):
        print("error: --columns sends generated plain messages: not with --file, --json "
              "or --delay-level", file=sys.stderr)  # fmt: skip
        return 2
    stub = commitlog_pb2_grpc.CommitLogStub(tls.client_channel(args.commitlog, args))
    latencies: list[float] = []
    collected: list = []
    t0 = time.perf_counter()
    elapsed: float | None = None
    try:
        if args.file:
            src = sys.stdin if args.file == "-" else open(args.file)  # noqa: SIM115
            sent = 0
            batch: list = []
            with src:
                for line in src:
                    if not line.strip():
                        continue
                    d = json.loads(line)
                    if "preparedTxOfMsg" in d and int(d["preparedTxOfMsg"]) >= len(collected):
                        sent += _send(stub, batch, latencies, collected) if batch else 0
                        batch = []
                    batch.append(message_from_json(d, collected))
                    if len(batch) >= args.batch:
                        sent += _send(stub, batch, latencies, collected)
                        batch = []
                if batch:
                    sent += _send(stub, batch, latencies, collected)
        else:
            if not args.topic:
                print("error: --topic (or --file) is required", file=sys.stderr)
                return 2
            per = [
                args.count // args.producers + (1 if p < args.count % args.producers else 0)
                for p in range(args.producers)
            ]
            starts = [sum(per[:p]) for p in range(args.producers)]
            streamed = args.columns or not (args.json or args.batch == 1)
            if streamed and args.producers > 1:  # timed from when every one is connected
                sent, lat, elapsed = producers.run_all(args, list(zip(starts, per, strict=True)),
                                                       _requests)  # fmt: skip
                latencies += lat
            elif streamed:
                sent = asyncio.run(_stream_one(args, latencies))
            else:
                sent = _send_all(args, starts, per, latencies, collected)
    except grpc.RpcError as e:
        print(f"error: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    if elapsed is None:
        elapsed = time.perf_counter() - t0
    if args.json:
        for r in collected:
            print(result_json(r))
    lat = sorted(latencies)

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else 0.0

    body_bytes = sent * (args.body_size if not (args.file or args.body or args.body_file) else 0)
    print(
        f"sent {sent} messages in {elapsed:.2f}s: {sent / elapsed:,.0f} msgs/s"
        + (f", {body_bytes / elapsed / 1e6:.1f} MB/s of body" if body_bytes else "")
        + f"; call latency p50 {pct(0.5):.2f} ms, p99 {pct(0.99):.2f} ms",
        file=sys.stderr if args.json else sys.stdout,
    )
    return 0


def _delivery_time(text: str) -> int:
    try:
        return parse_time(text)
    except TimeFormatError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("put", help="send messages to the commitlog writer (and measure)")
    p.add_argument("--commitlog", default="127.0.0.1:8100", help="writer address")
    tls.add_tls_flags(p)
    p.add_argument("--file", help="JSON lines of messages ('-' = stdin)")
    p.add_argument("--topic")
    p.add_argument("--queue", type=int, help="queue id (default: round robin)")
    p.add_argument("--queues", type=int, default=4, help="queues to spread over")
    p.add_argument("--tags")
    p.add_argument("--keys", help="space-separated keys; {i} = message number")
    p.add_argument("--body", help="body text; {i} = message number")
    p.add_argument("--body-file")
    p.add_argument("--body-size", type=int, default=128)
    p.add_argument("--delay-level", type=int, default=0)
    p.add_argument(
        "--deliver-at", type=_delivery_time, metavar="TIME",
        help="deliver at this time (epoch ms, ISO-8601 with a zone, or +30s, +2h...) instead "
        "of a delay level",
    )  # fmt: skip
    p.add_argument("--count", type=int, default=1)
    p.add_argument(
        "--producers",
        type=int,
        default=1,
        help="producers sending at once: streaming ones run a process each and are timed "
             "from when all are connected; with --json or --batch 1, a thread each",
    )
    p.add_argument("--batch", type=int, default=100, help="messages per call")
    p.add_argument(
        "--inflight",
        type=int,
        default=1,
        help="batches a producer sends before waiting for the oldest answer (load generator)",
    )
    p.add_argument(
        "--columns",
        action="store_true",
        help="send each batch as MessageColumns, the writer's fast path (generated messages)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON result per message")
    p.set_defaults(run=run)
