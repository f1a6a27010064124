"""``kill -9`` of every process of ``rmqstore serve`` while a 4.x producer sends through the
remoting broker, then a restart on the same store: every message the producer saw
acknowledged is stored, and stored once (found once by its own key)."""

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import pytest

from rmqstore.formats import commitlog
from rmqstore.formats import remoting as R
from tests import procs
from tests.remoting_wire import Wire, json_request
from tests.services.proxy.conftest import Serve

pytestmark = pytest.mark.integration
ACKED_BEFORE_KILL = 300
DEADLINE_S = 180.0


def _kill_all(serve: Serve) -> None:
    """SIGKILL every service process and serve itself, at once."""
    for pid in [*procs.children(serve.proc.pid), serve.proc.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    serve.proc.wait(30)


def _send_frame(key: str, opaque: int) -> bytes:
    props = f"KEYS\x01{key}\x02UNIQ_KEY\x01FD{opaque:030X}\x02WAIT\x01true\x02TAGS\x01K"
    ext = {"a": "PG_KILL", "b": "KillT", "c": "TBW102", "d": "4", "e": str(opaque % 4),
           "f": "0", "g": "1795817537947", "h": "0", "i": props, "j": "0"}  # fmt: skip
    return json_request(R.RequestCode.SEND_MESSAGE_V2, ext, opaque, key.encode())


async def _produce(address: str, n: int, acked: list[str], enough: asyncio.Event) -> None:
    """Sync sends (one at a time) until the connection breaks; keys of those acknowledged."""
    wire = await Wire.open(address)
    opaque = 0
    try:
        while True:
            opaque += 1
            key = f"kill-{n}-{opaque}"
            answer = await wire.call(_send_frame(key, n << 20 | opaque))
            if answer.code == 0:
                acked.append(key)
            if len(acked) >= ACKED_BEFORE_KILL:
                enough.set()
    except (OSError, asyncio.IncompleteReadError, R.FrameError):
        return  # killed under it


async def _count(wire: Wire, key: str) -> int:
    query = {"topic": "KillT", "key": key, "maxNum": "64", "beginTimestamp": "0",
             "endTimestamp": "9223372036854775807"}  # fmt: skip
    answer = await wire.call(json_request(R.RequestCode.QUERY_MESSAGE, query))
    if answer.code != 0:
        return 0
    n, at = 0, 0
    while at < len(answer.body):
        record = commitlog.decode(answer.body, at)
        n += record.keys == key
        at += record.total_size
    return n


def test_every_acknowledged_message_survives_kill9_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    serve = Serve(store)
    acked: list[str] = []

    async def load() -> None:
        enough = asyncio.Event()
        producers = [asyncio.ensure_future(_produce(serve.address(7), n, acked, enough))
                     for n in range(2)]  # fmt: skip
        await enough.wait()
        _kill_all(serve)  # with sends in flight
        await asyncio.gather(*producers)

    try:
        asyncio.run(asyncio.wait_for(load(), DEADLINE_S))
    finally:
        serve.stop()
    assert len(acked) >= ACKED_BEFORE_KILL
    again = Serve(store)
    try:

        async def check() -> None:
            wire = await Wire.open(again.address(7))
            for key in acked:
                while (found := await _count(wire, key)) == 0:  # the builders catch up
                    await asyncio.sleep(0.05)
                assert found == 1, key
            await wire.close()

        asyncio.run(asyncio.wait_for(check(), DEADLINE_S))
    finally:
        again.stop()
