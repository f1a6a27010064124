"""A remoting broker that stores nothing, for ``bench_remoting`` and ``bench_remoting_consume``:
the same connection code as the remoting front end (``rmqstore.remoting_net``), the send's
and the pull's headers read and their answers made the same way, SUCCESS to every send, and
to every PULL_MESSAGE a full batch of prebuilt 1 KiB records (``maxMsgNums``, at most 32). The
ceiling of this design on this machine.

``--keep``: sends are kept in memory, each queue's records as the commit log would hold them,
and pulls are answered from them with long polling (a pull that finds nothing waits for the
queue's next send or its ``suspendTimeoutMillis``): the send → pull latency ceiling.

``--put-socket PATH``: each send is put, as the front end puts it (its ``Appender``, same
settings: concurrent sends batched alike), through that put socket (``noop_put_socket``), and
answered with the offsets of its reply: the ceiling of a front end that stores through a
writer process, the hop's cost and no more.

``--append-in-process STORE``: each send is put by the same ``Appender``, each batch appended
by a writer engine in this process into STORE (``benchmarks.inprocess_appender``): the
ceiling of a front end that stores with this append path and no hop at all.

``python -m benchmarks.noop_remoting --listen HOST:PORT [--keep | --put-socket PATH |
--append-in-process STORE]``
"""

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Awaitable
from functools import partial

import grpc

from benchmarks.inprocess_appender import InProcessAppender
from rmqstore.appender import Appender, Stored
from rmqstore.formats import commitlog
from rmqstore.formats import remoting as R
from rmqstore.formats.hosts import parse_host
from rmqstore.formats.msgid import offset_msg_id
from rmqstore.remoting_net import LATER, Connection, Later, RemotingServer, not_supported
from rmqstore.server import announce
from services.remoting import pull, send
from services.remoting.__main__ import MERGE_BELOW, parse_args

SENDS = (R.RequestCode.SEND_MESSAGE, R.RequestCode.SEND_MESSAGE_V2)
BATCH = 32
PROPERTIES = ("KEYS\x01bench-0\x02UNIQ_KEY\x01FD000000000000000000000000000000\x02TAGS\x01TagA"
              "\x02CLUSTER\x01DefaultCluster")  # fmt: skip


def _prebuilt() -> list[bytes]:
    record = commitlog.encode(commitlog.Record("BenchPull", 0, b"x" * 1024, PROPERTIES))
    return [record * n for n in range(BATCH + 1)]


def front_end_appender(put_socket: str, store: str = "") -> Appender:
    """An ``Appender`` on ``put_socket`` as the front end makes it by default (its reads, which
    never come, would go to an address nothing listens on); with ``store``, one with the
    same settings that appends into that store in this process."""
    args = parse_args(["--store", "-", "--commitlog-socket", put_socket or "-"])
    slots, linger_s = args.batches_in_flight, args.batch_linger_ms / 1000
    gather_s = args.batch_gather_ms / 1000
    if store:
        return InProcessAppender(store, slots=slots, linger_s=linger_s, gather_s=gather_s,
                                 merge_below=MERGE_BELOW)  # fmt: skip
    return Appender(grpc.aio.insecure_channel("127.0.0.1:1"), slots=slots, put_socket=put_socket,
                    linger_s=linger_s, gather_s=gather_s, merge_below=MERGE_BELOW)  # fmt: skip


class Noop:
    def __init__(self, host: str, keep: bool = False, appender: Appender | None = None) -> None:
        self.store = parse_host(host)
        self.offset = 0
        self.keep = keep
        self.appender = appender  # sends are put through it, answered once stored
        self.batches = _prebuilt()  # n records
        self.queues: dict[tuple[str, int], list[bytes]] = {}
        self.arrivals: dict[tuple[str, int], asyncio.Event] = {}

    def __call__(self, conn: Connection,
                 req: R.Command) -> R.Command | Awaitable[R.Command] | Later:  # fmt: skip
        if req.code == R.RequestCode.PULL_MESSAGE:
            return self.pull_kept(req) if self.keep else self.pull(req)
        if req.code not in SENDS:
            return not_supported(req)
        h = send.parse_header(req)
        record = send.to_record(h.topic, h.queue_id, req.body, h.properties, h.flag, h.sys_flag,
                                h.born_timestamp, conn.remote, h.reconsume_times)  # fmt: skip
        if self.appender is not None:
            done = partial(self.stored, conn, req, h.queue_id)
            self.appender.submit([record], done, sender=conn.remote)
            return LATER
        self.offset += 1
        msg_id = offset_msg_id(self.store.ip, self.store.port, self.offset)
        queue_offset = self.offset
        if self.keep:
            kept = self.queues.setdefault((h.topic, h.queue_id), [])
            queue_offset = len(kept)
            kept.append(commitlog.encode(commitlog.Record(
                h.topic, h.queue_id, req.body, h.properties, h.flag, queue_offset=queue_offset,
                sys_flag=h.sys_flag, born_timestamp=h.born_timestamp,
                store_timestamp=int(time.time() * 1000))))  # fmt: skip
            ev = self.arrivals.pop((h.topic, h.queue_id), None)
            if ev is not None:
                ev.set()
        return send.answer(req, send.PUT_OK, msg_id, h.queue_id, queue_offset)

    def stored(self, conn: Connection, req: R.Command, queue_id: int,
               stored: list[Stored] | None, error: BaseException | None) -> None:  # fmt: skip
        """A send's answer once the put socket replied: the offsets it gave, as the front end."""
        if stored is None:
            assert error is not None
            conn.respond(req, error)
            return
        msg_id = offset_msg_id(self.store.ip, self.store.port, stored[0].phy_offset)
        conn.respond(req, send.answer(req, stored[0].status, msg_id, queue_id,
                                      stored[0].queue_offset))  # fmt: skip

    def pull(self, req: R.Command) -> R.Command:
        """A full batch from any offset (the queue never ends)."""
        h = pull.parse_header(req)
        n = max(1, min(h.max_msgs, BATCH))
        return _found(req, self.batches[n], h.offset + n, h.offset + n)

    async def pull_kept(self, req: R.Command) -> R.Command:
        h = pull.parse_header(req)
        key = (h.topic, h.queue_id)
        deadline = time.monotonic() + h.suspend_s
        while True:
            kept = self.queues.get(key, [])
            if h.offset < len(kept):
                records = kept[h.offset : h.offset + max(1, min(h.max_msgs, BATCH))]
                end = h.offset + len(records)
                return _found(req, b"".join(records), end, len(kept))
            left = deadline - time.monotonic()
            if not h.sys_flag & pull.FLAG_SUSPEND or left <= 0:
                ext = {"suggestWhichBrokerId": "0", "nextBeginOffset": str(h.offset),
                       "minOffset": "0", "maxOffset": str(len(kept))}  # fmt: skip
                return R.response_to(req, R.ResponseCode.PULL_NOT_FOUND, ext=ext,
                                     remark="OFFSET_OVERFLOW_ONE")  # fmt: skip
            ev = self.arrivals.setdefault(key, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ev.wait(), left)


def _found(req: R.Command, body: bytes, nxt: int, end: int) -> R.Command:
    """A FOUND answer as the broker makes it (``services.remoting.pull``)."""
    ext = {"suggestWhichBrokerId": "0", "nextBeginOffset": str(nxt), "minOffset": "0",
           "maxOffset": str(end)}  # fmt: skip
    return R.response_to(req, R.ResponseCode.SUCCESS, ext=ext, body=body, remark="FOUND")


async def serve(listen: str, keep: bool, put_socket: str = "", store: str = "") -> None:
    host, _, port = listen.rpartition(":")
    appender = front_end_appender(put_socket, store) if put_socket or store else None
    server = RemotingServer(Noop("127.0.0.1:10911", keep, appender))
    address = await server.start(host, int(port))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    announce("noop-remoting", address)
    await stop.wait()
    await server.close()
    if appender is not None:
        await appender.close()


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.noop_remoting")
    p.add_argument("--listen", default="127.0.0.1:0")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--keep", action="store_true",
                     help="keep sends in memory, answer pulls from them (long polling)")
    how.add_argument("--put-socket", default="",
                     help="put each send through this put socket, answer it once stored")
    how.add_argument("--append-in-process", default="", metavar="STORE",
                     help="append each send into this store in this process (no hop)")
    args = p.parse_args()
    asyncio.run(serve(args.listen, args.keep, args.put_socket, args.append_in_process))
    return 0


if __name__ == "__main__":
    sys.exit(main())
