"""``rmqstore put --file``: JSON lines of messages, stored batch by batch, each
acknowledgement printed (and flushed) as soon as its batch is answered.

A line holds one JSON object: ``topic`` (required), ``queueId``, ``body`` | ``bodyB64``,
``tags``, ``keys``, ``uniqKey``, ``properties`` (an object), ``flag``, ``sysFlag``,
``bornTimestamp`` (epoch ms, or a time string as ``rmqstore.times`` reads it), ``bornHost``,
``delayLevel``, ``deliverAt`` (the delivery time of a delayed message, instead of a level:
epoch ms or a time string), ``reconsumeTimes``, ``preparedTxOfMsg``
(the 0-based number of an earlier message whose commitlog offset becomes this one's
prepared-transaction offset), ``waitStoreMsgOK``. Other fields are ignored; blank lines are
skipped. A regular file is checked whole before anything is sent, so a bad line costs
nothing; standard input is checked as it is read.

Batches go one at a time: when one fails, every line before it is stored and acknowledged
and nothing after it was sent. The error names the line and the reason, the lines stored,
and how to resume: ``--skip N`` skips the first N lines. When the writer failed without an
answer (killed, unreachable), the batch it was given may be stored in part;
``--resume-offset`` (printed with the error) then makes the next run match the lines after
``--skip`` against the records stored past that commitlog offset, print those as stored,
and send only the rest, so that each line is stored once.
"""

import argparse
import base64
import binascii
import contextlib
import json
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, Any, NamedTuple

import grpc

from rmqstore import times
from rmqstore.formats import commitlog
from rmqstore.formats.msgid import offset_msg_id
from rmqstore.server import MAX_MESSAGE_BYTES
from rmqstore.v1 import commitlog_pb2, common_pb2
from services.cli import client
from services.cli.errors import PARTIAL, USAGE, CliError

INTERRUPTED = 130  # Ctrl-C before anything was stored, as a shell reports SIGINT
BATCH_BYTES = MAX_MESSAGE_BYTES // 2  # a batch is cut before its bodies reach this
# statuses after which a batch is known not to be stored (the writer checks a whole batch
# before it writes a byte); after any other the batch may be stored in part
REFUSED = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED,
           grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.OUT_OF_RANGE,
           grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED,
           grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNIMPLEMENTED}  # fmt: skip
_INT_FIELDS = {  # JSON field -> (Message field, low, high)
    "queueId": ("queue_id", 0, client.INT32_MAX),
    "flag": ("flag", -(2**31), client.INT32_MAX),
    "sysFlag": ("sys_flag", 0, client.INT32_MAX),
    "bornTimestamp": ("born_timestamp", 0, client.INT64_MAX),
    "delayLevel": ("delay_level", 0, client.INT32_MAX),
    "deliverAt": ("deliver_at_ms", 0, client.INT64_MAX),
    "reconsumeTimes": ("reconsume_times", 0, client.INT32_MAX),
}
_TEXT_FIELDS = {"topic": "topic", "tags": "tags", "keys": "keys", "uniqKey": "unique_key",
                "bornHost": "born_host"}  # fmt: skip


class Line(NamedTuple):
    number: int  # 1-based line of the input
    position: int  # 0-based number of the message (blank lines do not count)
    message: common_pb2.Message
    prepared_of: int | None  # preparedTxOfMsg


class BadLine(Exception):
    """A line that is not a message; the text says why (``number``: which line, once known)."""

    def __init__(self, reason: str, number: int = 0) -> None:
        super().__init__(f"line {number}: {reason}" if number else reason)
        self.reason, self.number = reason, number


def parse_line(text: str, number: int, index: int) -> Line:
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadLine(f"not JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(d, dict):
        raise BadLine(f"a message is a JSON object, this line is a {type(d).__name__}")
    if not isinstance(d.get("topic"), str) or not d["topic"]:
        raise BadLine('no "topic" (a non-empty string)')
    fields: dict[str, Any] = {}
    for name, attr in _TEXT_FIELDS.items():
        v = d.get(name)
        if v is not None and not isinstance(v, str):
            raise BadLine(f'"{name}" must be a string, got {json.dumps(v)}')
        fields[attr] = v or ""
    for name in ("bornTimestamp", "deliverAt"):
        if isinstance(d.get(name), str):  # a time as people write it (rmqstore.times)
            try:
                d[name] = times.parse_time(d[name])
            except times.TimeFormatError as e:
                raise BadLine(f'"{name}" {str(e).removeprefix("time ").strip()}') from None
    for name, (attr, lo, hi) in _INT_FIELDS.items():
        fields[attr] = _int(d, name, lo, hi)
    if "bodyB64" in d:
        if not isinstance(d["bodyB64"], str):
            raise BadLine('"bodyB64" must be a base64 string')
        try:
            body = base64.b64decode(d["bodyB64"], validate=True)
        except (binascii.Error, ValueError) as e:
            raise BadLine(f'"bodyB64" is not base64 ({e})') from None
    elif not isinstance(d.get("body", ""), str):
        raise BadLine('"body" must be a string (use "bodyB64" for bytes)')
    else:
        body = d.get("body", "").encode()
    check_body_size(len(body))
    props = d.get("properties") or {}
    if not isinstance(props, dict):
        raise BadLine('"properties" must be an object of names to values')
    ref = None
    if "preparedTxOfMsg" in d:
        ref = _int(d, "preparedTxOfMsg", 0, client.INT64_MAX)
        if ref >= index:
            raise BadLine(f"preparedTxOfMsg {ref} does not name an earlier message "
                          f"(this is message {index}, counted from 0)")  # fmt: skip
    message = common_pb2.Message(
        body=body,
        properties=[common_pb2.Property(name=str(k), value=str(v)) for k, v in props.items()],
        no_wait_store=not d.get("waitStoreMsgOK", True),
        without_unique_key=not fields["unique_key"],
        **fields,
    )
    return Line(number, index, message, ref)


def message_from_json(d: dict, earlier: list | None = None) -> common_pb2.Message:
    """The message of one decoded line; ``earlier`` holds the results of the messages before
    it (``preparedTxOfMsg`` takes its offset from them). Raises BadLine."""
    earlier = earlier or []
    line = parse_line(json.dumps(d), 1, len(earlier))
    if line.prepared_of is not None:
        line.message.prepared_transaction_offset = earlier[line.prepared_of].phy_offset
    return line.message


def _int(d: dict, name: str, lo: int, hi: int) -> int:
    v = d.get(name, 0)
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadLine(f'"{name}" must be an integer, got {json.dumps(v)}')
    if not lo <= v <= hi:
        raise BadLine(f'"{name}" {v} is outside {lo}..{hi}')
    return v


def check_body_size(size: int) -> None:
    """A body one request cannot carry is refused here, naming the limit."""
    if size > BATCH_BYTES:
        raise BadLine(f"the body is {size:,} bytes; one request carries at most "
                      f"{BATCH_BYTES:,} bytes of bodies (the writer stores bodies up to its "
                      "--max-message-size, 4 MiB by default)")  # fmt: skip


def read_lines(src: IO[str], skip: int) -> Iterator[Line]:
    """The messages of ``src`` after its first ``skip`` lines; BadLine names its line."""
    index, number = 0, 0
    while True:
        try:
            text = src.readline()
        except UnicodeDecodeError as e:
            raise BadLine(f"not UTF-8 text ({e.reason})", number + 1) from None
        if not text:
            return
        number += 1
        if not text.strip():
            continue
        index += 1
        if number <= skip:
            continue
        try:
            yield parse_line(text, number, index - 1)
        except BadLine as e:
            raise BadLine(e.reason, number) from None


def open_input(path: str) -> IO[str]:
    if path == "-":
        return sys.stdin
    try:
        return open(path, encoding="utf-8")  # noqa: SIM115
    except IsADirectoryError:
        raise CliError(f"--file {path} is a directory, not a file of JSON lines") from None
    except OSError as e:
        raise CliError(f"--file {path}: cannot read it ({e.strerror})") from None


def check_file(path: str, skip: int) -> None:
    """Every line of a regular file after ``skip`` is a message, or a usage error."""
    try:
        with open_input(path) as f:
            for _ in read_lines(f, skip):
                pass
    except BadLine as e:
        raise CliError(f"--file {path}, {e}; nothing was sent") from None


def result_doc(r: commitlog_pb2.PutResult, line: int | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {} if line is None else {"line": line}
    doc.update(msgId=r.msg_id, uniqKey=r.unique_key, phyOffset=r.phy_offset,
               queueOffset=r.queue_offset, size=r.size, storeTimestamp=r.store_timestamp,
               topic=r.topic, queueId=r.queue_id,
               status=commitlog_pb2.PutStatus.Name(r.status))  # fmt: skip
    return doc


def result_text(r: commitlog_pb2.PutResult, line: int | None = None) -> str:
    """What was stored, as RocketMQ's send result shows it."""
    head = "stored" if line is None else f"line {line}: stored"
    return (
        f"{head} {r.topic}/{r.queue_id} queueOffset={r.queue_offset} "
        f"commitlogOffset={r.phy_offset} size={r.size} msgId={r.msg_id} "
        f"uniqKey={r.unique_key or '-'} storeTime={client.format_time(r.store_timestamp)} "
        f"status={commitlog_pb2.PutStatus.Name(r.status)}"
    )


class HeldInterrupts:
    """SIGINT as ``KeyboardInterrupt``, but inside ``held()`` only once it ends. Python runs a
    signal's handler in the main thread whichever thread the kernel gave the signal to (gRPC's
    own threads do not block it), so unlike a blocked signal mask this holds for sure."""

    def __init__(self) -> None:
        self.holding = False
        self.pending = False

    def __call__(self, signum: int, frame: Any) -> None:
        if self.holding:
            self.pending = True
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Handle SIGINT so while inside (from the main thread; elsewhere: as it was)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGINT, self)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
            if self.pending:
                self.pending = False
                raise KeyboardInterrupt


class FilePut:
    """One ``put --file`` run: what is stored so far, for the report when it stops."""

    def __init__(self, args: argparse.Namespace, stub: Any) -> None:
        self.args, self.stub = args, stub
        self.name = "-" if args.file == "-" else args.file
        self.offsets: dict[int, int] = {}  # message index -> commitlog offset
        self.stored = 0
        self.last_line = args.skip  # every line up to here is stored (or was skipped)
        self.end = -1  # commitlog offset after the last record acknowledged
        self.in_flight: list[Line] = []  # the batch sent and not yet answered
        self.interrupts = HeldInterrupts()

    def show(self, r: commitlog_pb2.PutResult, line: Line) -> None:
        self.offsets[line.position] = r.phy_offset
        self.stored += 1
        self.last_line = line.number
        self.end = max(self.end, r.phy_offset + r.size)
        doc = result_doc(r, line.number) if self.args.json else None
        print(json.dumps(doc) if doc is not None else result_text(r, line.number))

    def send(self, batch: list[Line]) -> None:
        """Store ``batch``; on a refusal of several, one at a time to find the bad line."""
        messages = [self._resolved(line) for line in batch]
        self.in_flight = batch
        try:
            if len(messages) == 1:
                results = [self.stub.Put(commitlog_pb2.PutRequest(message=messages[0]))]
            else:
                results = list(self.stub.PutBatch(
                    commitlog_pb2.PutBatchRequest(messages=messages)).results)  # fmt: skip
        except grpc.RpcError as e:
            if e.code() in REFUSED and len(batch) > 1:
                for line in batch:
                    self.send([line])
                return
            raise self.failure(batch, e) from None
        with self.interrupts.held():  # every stored line printed and counted before a Ctrl-C
            self.in_flight = []
            for r, line in zip(results, batch, strict=True):
                self.show(r, line)
            sys.stdout.flush()

    def _resolved(self, line: Line) -> common_pb2.Message:
        if line.prepared_of is None:
            return line.message
        if line.prepared_of not in self.offsets:
            raise self.refused(
                line,
                f"preparedTxOfMsg {line.prepared_of} names a message "
                "skipped by --skip whose offset this run does not know",
            )
        line.message.prepared_transaction_offset = self.offsets[line.prepared_of]
        return line.message

    def refused(self, line: Line | int, reason: str) -> CliError:
        number = line if isinstance(line, int) else line.number
        return CliError(
            f"line {number} of {self.name} was not stored: {reason}; {self._so_far(number)}; "
            f"to resume once it is fixed: {self._resume(number - 1)}",
            PARTIAL if self.stored else USAGE,
        )

    def failure(self, batch: list[Line], e: grpc.RpcError) -> CliError:
        cause = client.rpc_error(e, "CommitLog", self.args.commitlog)
        if e.code() in REFUSED:
            return self.refused(batch[0], str(cause))
        return self.unanswered(batch, str(cause), cause.code)

    def unanswered(self, batch: list[Line], cause: str, code: int) -> CliError:
        """``batch`` was sent and its answer never came: it may be stored in part."""
        first, last = batch[0].number, batch[-1].number
        span = f"line {first}" if first == last else f"lines {first}..{last}"
        return CliError(
            f"{span} of {self.name} got no answer: {cause}; {self._so_far(first)}; "
            f"{span} may be stored in part; to resume without storing any line twice: "
            f"{self._resume(first - 1, self.end)}",
            PARTIAL if self.stored else code,
        )

    def interrupted(self) -> CliError:
        if self.in_flight:
            return self.unanswered(self.in_flight, "interrupted", INTERRUPTED)
        return CliError(f"interrupted after line {self.last_line} of {self.name}; "
                        f"{self._so_far(self.last_line + 1)}; to resume: "
                        f"{self._resume(self.last_line)}",
                        PARTIAL if self.stored else INTERRUPTED)  # fmt: skip

    def _so_far(self, number: int) -> str:
        if self.stored == 0:
            return "nothing of this run was stored before it"
        n = self.stored
        what = "1 message before it is" if n == 1 else f"{n:,} messages before it are"
        return f"{what} stored (through line {self.last_line}, printed above)"  # fmt: skip

    def _resume(self, skip: int, offset: int | None = None) -> str:
        """This run's command line with ``--skip`` (and ``--resume-offset``) set anew."""
        words, argv = ["rmqstore"], list(getattr(self.args, "argv", ["put", "--file", self.name]))
        while argv:
            word = argv.pop(0)
            if word in ("--skip", "--resume-offset"):
                argv = argv[1:]
            elif not word.startswith(("--skip=", "--resume-offset=")):
                words.append(word)
        words += ["--skip", str(skip)]
        if offset is not None and offset >= 0:
            words += ["--resume-offset", str(offset)]
        return shlex.join(words)

    # -- a resumed run: lines the last run may have stored without an answer --------------
    def matched(self, lines: Iterator[Line], offset: int) -> Iterator[Line]:
        """Print as stored the leading ``lines`` found in the records from ``offset`` on;
        the rest of ``lines`` to send."""
        try:
            offs = self.stub.GetOffsets(commitlog_pb2.GetOffsetsRequest())
        except grpc.RpcError as e:
            raise client.rpc_error(e, "CommitLog", self.args.commitlog) from None
        if not offs.min_offset <= offset <= offs.max_offset:
            raise CliError(f"--resume-offset {offset} is outside the writer's commitlog "
                           f"{offs.min_offset}..{offs.max_offset}")  # fmt: skip
        self.end = offset
        pending = next(lines, None)
        at = offset
        while pending is not None and at < offs.max_offset:
            try:
                raw = self.stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(offsets=[at]))
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.INVALID_ARGUMENT:  # the end of a segment
                    at = (at // offs.segment_size + 1) * offs.segment_size
                    continue
                raise client.rpc_error(e, "CommitLog", self.args.commitlog) from None
            rec = commitlog.decode(raw.records[0], check_crc=False)
            if _same(rec, pending.message):
                self.show(_result_of(rec, at), pending)
                pending = next(lines, None)
            at += rec.total_size
        sys.stdout.flush()
        if pending is not None:
            yield pending
        yield from lines


def _same(rec: commitlog.Record, m: common_pb2.Message) -> bool:
    topic = rec.property_map.get("REAL_TOPIC", rec.topic) if m.delay_level else rec.topic
    return (
        topic == m.topic
        and bytes(rec.body) == m.body
        and rec.keys == m.keys
        and rec.tags == m.tags
        and (not m.unique_key or rec.uniq_key == m.unique_key)
    )


def _result_of(rec: commitlog.Record, at: int) -> commitlog_pb2.PutResult:
    return commitlog_pb2.PutResult(
        msg_id=offset_msg_id(rec.store_host.ip, rec.store_host.port, at),
        unique_key=rec.uniq_key, phy_offset=at, queue_offset=rec.queue_offset,
        size=rec.total_size, store_timestamp=rec.store_timestamp, topic=rec.topic,
        queue_id=rec.queue_id)  # fmt: skip


def run(args: argparse.Namespace, stub: Any) -> int:
    if args.file != "-":
        check_file(args.file, args.skip)
    put = FilePut(args, stub)
    if args.resume_offset is None:  # where a resume would look if the first batch goes unanswered
        try:
            put.end = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset
        except grpc.RpcError as e:
            raise client.rpc_error(e, "CommitLog", args.commitlog) from None
    t0 = time.perf_counter()
    batch: list[Line] = []
    size = 0
    src = open_input(args.file)
    with src, put.interrupts.installed():
        lines = read_lines(src, args.skip)
        try:
            if args.resume_offset is not None:
                lines = put.matched(lines, args.resume_offset)
            for line in lines:
                ref = line.prepared_of
                if batch and (ref is not None and ref not in put.offsets
                              or size + len(line.message.body) > BATCH_BYTES):  # fmt: skip
                    put.send(batch)
                    batch, size = [], 0
                batch.append(line)
                size += len(line.message.body)
                if len(batch) >= args.batch:
                    put.send(batch)
                    batch, size = [], 0
            if batch:
                put.send(batch)
        except BadLine as e:  # standard input: checked as it comes
            if batch:
                put.send(batch)
            raise put.refused(e.number, e.reason) from None
        except KeyboardInterrupt:
            raise put.interrupted() from None
    seconds = time.perf_counter() - t0
    print(f"stored {put.stored} messages from {put.name} in {seconds:.2f}s",
          file=sys.stderr)  # fmt: skip
    return 0
