"""The remoting broker's registration, with a name server on loopback: it gives the name
server its own timeout (two registration intervals), and unregisters when it closes."""

import asyncio

from rmqstore.remoting_net import RemotingServer
from services.namesrv.handlers import NameServer
from services.namesrv.routes import RouteTable
from services.remoting.registration import INTERVAL_S, Registration

ADDR = "127.0.0.1:10911"


async def _topics() -> dict[str, dict[str, object]]:
    return {"RegT": {"perm": 6, "readQueueNums": 2, "writeQueueNums": 2, "topicSysFlag": 0}}


def test_a_registration_gives_two_intervals_as_its_timeout_and_close_unregisters() -> None:
    async def main() -> None:
        table = RouteTable()
        names = NameServer(table)
        server = RemotingServer(names, on_close=names.connection_closed)
        address = await server.start("127.0.0.1", 0)
        reg = Registration([address], "broker-r", ADDR, "C", "127.0.0.1:10912", _topics)
        try:
            await reg.register_all()
            assert reg.registered == 1
            assert table.live[ADDR].timeout_s == 2 * INTERVAL_S
            assert table.route("RegT") is not None
            await reg.close()
            assert ADDR not in table.live and table.route("RegT") is None
        finally:
            await server.close()

    asyncio.run(main())
