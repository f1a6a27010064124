"""``rmqstore put``: send messages to the writer; also a load generator.

Three ways:

* one message from flags (``--topic --body/--body-file --keys --tags``): prints what was
  stored (topic/queue, queue offset, commitlog offset, message ids, store time), as
  RocketMQ's send result does; ``--json`` as one JSON object;
* ``--file``: one JSON message per line (``services.cli.put_file``), each acknowledgement
  printed as its batch is answered;
* ``--count N`` (N > 1): the load generator. It prints a throughput summary; by default it
  streams batches of 100 with 4 in flight, as columns for plain messages (the settings of the
  documented put benchmark). ``{i}`` in --keys/--body expands to the message number.

A failure prints one line ``error: ...`` (``services.cli.errors``) that says what was stored.
"""

import argparse
import asyncio
import collections
import json
import os
import sys
import threading
import time
from collections.abc import Iterator

import grpc

from rmqstore import tls
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from services.cli import client, producers, put_file, put_stream
from services.cli.client import INT32_MAX, int_in
from services.cli.errors import PARTIAL, CliError
from services.cli.put_file import message_from_json

__all__ = ["message_from_json", "register", "run"]


def _fixed_body(args: argparse.Namespace) -> bytes | None:
    """The body every generated message carries, or None when --body has ``{i}``."""
    if args.body_file:
        return args.file_body
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


_print_lock = threading.Lock()


def _send(stub, batch: list, latencies: list[float], show: bool,
          statuses: collections.Counter) -> int:  # fmt: skip
    """One call for ``batch``; with ``show``, its results printed as JSON lines at once;
    its messages counted per put status in ``statuses``."""
    t0 = time.perf_counter()
    if len(batch) == 1:
        results = [stub.Put(commitlog_pb2.PutRequest(message=batch[0]))]
    else:
        results = list(stub.PutBatch(commitlog_pb2.PutBatchRequest(messages=batch)).results)
    latencies.append(time.perf_counter() - t0)
    for r in results:
        statuses[put_stream.STATUS_NAMES[r.status]] += 1
    if show:
        text = "".join(json.dumps(put_file.result_doc(r)) + "\n" for r in results)
        with _print_lock:
            sys.stdout.write(text)
            sys.stdout.flush()
    return len(results)


def _sources(args: argparse.Namespace, start: int, count: int) -> Iterator:
    """A producer's batches: lists of Messages, or MessageColumns with --columns."""
    if args.columns:
        return _generated_columns(args, start, count)
    return _batches(_generated(args, start, count), args.batch)


def _requests(args: argparse.Namespace, start: int, count: int) -> Iterator:
    """A streaming producer's requests."""
    return map(put_stream.request, _sources(args, start, count))


async def _stream_one(args: argparse.Namespace, latencies: list[float],
                      progress: list[int], statuses: collections.Counter) -> int:  # fmt: skip
    """One producer's batches over one ``PutStream``; the messages acknowledged."""
    async with tls.aio_client_channel(args.commitlog, args) as ch:
        return await put_stream.send_all(commitlog_pb2_grpc.CommitLogStub(ch),
                                         _requests(args, 0, args.count), args.inflight,
                                         latencies, progress, statuses)  # fmt: skip


def _send_all(
    args: argparse.Namespace,
    starts: list[int],
    per: list[int],
    latencies: list[float],
    progress: list[int],
    statuses: collections.Counter,
) -> int:
    """Each producer's batches as one call each (``Put`` or ``PutBatch``), a thread and a
    channel per producer; the messages acknowledged. After a failure the others stop at
    their next batch."""
    counts = [0] * len(starts)
    errors: list[BaseException] = []

    def producer(p: int) -> None:
        own = commitlog_pb2_grpc.CommitLogStub(tls.client_channel(args.commitlog, args))
        lat: list[float] = []
        try:
            for b in _sources(args, starts[p], per[p]):
                if errors:
                    break
                counts[p] += _send(own, b, lat, args.json, statuses)
        except BaseException as e:
            errors.append(e)
        latencies.extend(lat)

    threads = [threading.Thread(target=producer, args=(p,)) for p in range(len(starts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    progress[0] = sum(counts)
    if errors:
        raise errors[0]
    return sum(counts)


def _check(args: argparse.Namespace) -> None:
    """Flags that cannot work together, and the body file, before any call."""
    if args.columns and (args.file or args.json or args.delay_level or args.deliver_at):
        raise CliError("--columns sends generated plain messages: not with --file, --json, "
                       "--delay-level or --deliver-at")  # fmt: skip
    if args.file and (args.topic or args.body is not None or args.body_file
                      or args.count != 1):  # fmt: skip
        raise CliError("--file takes its messages from the file: not with --topic, --body, "
                       "--body-file or --count")  # fmt: skip
    if (args.skip or args.resume_offset is not None) and not args.file:
        raise CliError("--skip and --resume-offset resume a --file")
    if not args.file and not args.topic:
        raise CliError("--topic (or --file) is required")
    if args.body_file:
        try:
            with open(args.body_file, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                args.file_body = b"" if size > put_file.BATCH_BYTES else f.read()
        except IsADirectoryError:
            raise CliError(f"--body-file {args.body_file} is a directory") from None
        except OSError as e:
            raise CliError(f"--body-file {args.body_file}: cannot read it ({e.strerror})") \
                from None
    body_size = args.body_size
    if args.body_file:
        body_size = size
    elif args.body is not None:
        body_size = len(args.body.encode())
    try:
        put_file.check_body_size(body_size)
    except put_file.BadLine as e:
        raise CliError(str(e)) from None
    # a batch must fit one request: fewer messages per batch for big bodies
    args.batch = max(1, min(args.batch, put_file.BATCH_BYTES // max(body_size, 1)))
    if args.columns is None:  # the fastest honest default: columns for plain messages
        args.columns = not (args.file or args.json or args.delay_level or args.deliver_at
                             or args.count == 1)  # fmt: skip


def _put_one(args: argparse.Namespace, stub) -> int:
    message = next(_generated(args, 0, 1))
    try:
        r = stub.Put(commitlog_pb2.PutRequest(message=message))
    except grpc.RpcError as e:
        raise client.rpc_error(e, "CommitLog", args.commitlog) from None
    print(json.dumps(put_file.result_doc(r)) if args.json else put_file.result_text(r))
    return 0


def _load(args: argparse.Namespace) -> int:
    """The load generator: ``--count`` messages, then the throughput summary."""
    per = [args.count // args.producers + (1 if p < args.count % args.producers else 0)
           for p in range(args.producers)]  # fmt: skip
    starts = [sum(per[:p]) for p in range(args.producers)]
    latencies: list[float] = []
    progress = [0]
    statuses: collections.Counter = collections.Counter()
    t0 = time.perf_counter()
    elapsed: float | None = None
    streamed = args.columns or not (args.json or args.batch == 1)
    try:
        if streamed and args.producers > 1:  # timed from when every one is connected
            sent, lat, elapsed = producers.run_all(args, list(zip(starts, per, strict=True)),
                                                   _requests, statuses)  # fmt: skip
            latencies += lat
        elif streamed:
            sent = asyncio.run(_stream_one(args, latencies, progress, statuses))
        else:
            sent = _send_all(args, starts, per, latencies, progress, statuses)
    except grpc.RpcError as e:
        stored = getattr(e, "acknowledged", 0) or progress[0]
        cause = client.rpc_error(e, "CommitLog", args.commitlog)
        raise CliError(f"{cause}; {stored} of {args.count} messages were stored before it",
                       PARTIAL if stored else cause.code) from None  # fmt: skip
    if elapsed is None:
        elapsed = time.perf_counter() - t0
    lat = sorted(latencies)

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else 0.0

    body_bytes = sent * (args.body_size if not (args.body or args.body_file) else 0)
    print(
        f"sent {sent} messages in {elapsed:.2f}s: {sent / elapsed:,.0f} msgs/s"
        + (f", {body_bytes / elapsed / 1e6:.1f} MB/s of body" if body_bytes else "")
        + f"; call latency p50 {pct(0.5):.2f} ms, p99 {pct(0.99):.2f} ms"
        + f" ({'columns' if args.columns else 'messages'}, batch {args.batch}"
        + (f", {args.inflight} in flight" if streamed else "")
        + ")"
        + _status_summary(statuses),
        file=sys.stderr if args.json else sys.stdout,
    )
    return 0


def _status_summary(statuses: collections.Counter) -> str:
    """``; status FLUSH_SLAVE_TIMEOUT 10, PUT_OK 90``: the messages stored per put status."""
    if not statuses:
        return ""
    return "; status " + ", ".join(f"{name} {n}" for name, n in sorted(statuses.items()))


def run(args: argparse.Namespace) -> int:
    _check(args)
    client.check_tls(args)
    if args.file:
        stub = commitlog_pb2_grpc.CommitLogStub(client.channel(args.commitlog, args))
        return put_file.run(args, stub)
    if args.count == 1:
        stub = commitlog_pb2_grpc.CommitLogStub(client.channel(args.commitlog, args))
        return _put_one(args, stub)
    return _load(args)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("put", help="send messages to the commitlog writer (and measure)",
                       description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument(
        "--commitlog",
        type=client.address,
        default="127.0.0.1:8100",
        help="writer address (the port base of 'rmqstore serve')",
    )
    tls.add_tls_flags(p)
    p.add_argument("--file", help="JSON lines of messages ('-' = stdin)")
    p.add_argument(
        "--skip",
        type=int_in(0, 2**62),
        default=0,
        metavar="N",
        help="--file: skip its first N lines (resume a run that stopped)",
    )
    p.add_argument(
        "--resume-offset",
        type=int_in(0, client.INT64_MAX),
        metavar="OFFSET",
        help="--file: lines after --skip already stored past this commitlog "
        "offset (printed by a run that stopped) are not sent again",
    )
    p.add_argument("--topic")
    p.add_argument("--queue", type=int_in(0, INT32_MAX), help="queue id (default: round robin)")
    p.add_argument("--queues", type=int_in(1, INT32_MAX), default=4, help="queues to spread over")
    p.add_argument("--tags")
    p.add_argument("--keys", help="space-separated keys; {i} = message number")
    p.add_argument("--body", help="body text; {i} = message number")
    p.add_argument("--body-file")
    p.add_argument("--body-size", type=int_in(0, put_file.BATCH_BYTES), default=128)
    p.add_argument("--delay-level", type=int_in(0, INT32_MAX), default=0)
    p.add_argument(
        "--deliver-at", type=client.time_ms, metavar="TIME",
        help="deliver at this time (epoch ms, ISO-8601 with a zone, or +30s, +2h...) instead "
        "of a delay level",
    )  # fmt: skip
    p.add_argument(
        "--count",
        type=int_in(1, 2**62),
        default=1,
        help="messages to send; above 1 it is a load generator printing its throughput",
    )
    p.add_argument(
        "--producers",
        type=int_in(1, 1024),
        default=1,
        help="producers sending at once: streaming ones run a process each and are timed "
        "from when all are connected; with --json or --batch 1, a thread each",
    )
    p.add_argument("--batch", type=int_in(1, 100_000), default=100, help="messages per call")
    p.add_argument(
        "--inflight",
        type=int_in(1, 1024),
        default=4,
        help="batches a producer sends before waiting for the oldest answer (load generator)",
    )
    p.add_argument(
        "--columns",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send each batch as MessageColumns, the writer's fast path (default: for "
        "generated plain messages, i.e. without --json or --delay-level)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object per stored message")
    p.set_defaults(run=run)
