"""A remoting broker that stores nothing, for ``bench_remoting``: the same connection code as
the remoting front end (``rmqstore.remoting_net``), the send's header read and its answer
made the same way, and SUCCESS to every send. The ceiling of this design on this machine.

``python -m benchmarks.noop_remoting --listen HOST:PORT``
"""

import argparse
import asyncio
import signal
import sys

from rmqstore.formats import remoting as R
from rmqstore.formats.hosts import parse_host
from rmqstore.formats.msgid import offset_msg_id
from rmqstore.remoting_net import Connection, RemotingServer, not_supported
from rmqstore.server import announce
from services.remoting import send

SENDS = (R.RequestCode.SEND_MESSAGE, R.RequestCode.SEND_MESSAGE_V2)


class Noop:
    def __init__(self, host: str) -> None:
        self.store = parse_host(host)
        self.offset = 0

    def __call__(self, conn: Connection, req: R.Command) -> R.Command:
        if req.code not in SENDS:
            return not_supported(req)
        h = send.parse_header(req)
        send.to_record(h.topic, h.queue_id, req.body, h.properties, h.flag, h.sys_flag,
                       h.born_timestamp, conn.remote, h.reconsume_times)  # fmt: skip
        self.offset += 1
        msg_id = offset_msg_id(self.store.ip, self.store.port, self.offset)
        return send.answer(req, send.PUT_OK, msg_id, h.queue_id, self.offset)


async def serve(listen: str) -> None:
    host, _, port = listen.rpartition(":")
    server = RemotingServer(Noop("127.0.0.1:10911"))
    address = await server.start(host, int(port))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    announce("noop-remoting", address)
    await stop.wait()
    await server.close()


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.noop_remoting")
    p.add_argument("--listen", default="127.0.0.1:0")
    asyncio.run(serve(p.parse_args().listen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
