"""A put socket that stores nothing, for ``bench_proxy`` and ``bench_remoting``: every put
is answered at once, as the writer answers under asynchronous flush, with made-up offsets
(each message the next number). A proxy or a front end that puts through it pays the hop to
a second process and back, and nothing of an append: the ceiling of one that stores through
a writer process.

``python -m benchmarks.noop_put_socket --socket PATH``
"""

import argparse
import asyncio
import signal
import sys

from rmqstore import put_socket
from rmqstore.server import announce
from rmqstore.v1 import commitlog_pb2


class NoopPuts:
    def __init__(self) -> None:
        self.next_offset = 0

    def open_put_stream(self) -> None:
        pass

    def close_put_stream(self) -> None:
        pass

    def answer_put(self, request: commitlog_pb2.PutBatchRequest) -> commitlog_pb2.PutStreamReply:
        c = request.columns
        n = len(c.body_size) if request.HasField("columns") else len(request.messages)
        offsets = range(self.next_offset, self.next_offset + n)
        self.next_offset += n
        return commitlog_pb2.PutStreamReply(
            response={"columns": {"phy_offset": offsets, "queue_offset": offsets}}
        )


async def serve(path: str) -> None:
    server = await put_socket.serve(path, NoopPuts())
    announce("noop-put-socket", path)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await put_socket.close(server)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.noop_put_socket")
    p.add_argument("--socket", required=True, help="the Unix socket to serve puts on")
    asyncio.run(serve(p.parse_args().socket))
    return 0


if __name__ == "__main__":
    sys.exit(main())
