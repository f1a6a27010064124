"""The remoting benchmark's ceilings: ``benchmarks.noop_remoting --put-socket`` answers a
send only once the put socket stored it, with the offsets the socket gave; with
``--append-in-process`` the sends are in its store, at the offsets it answered."""

import asyncio
import time

import pytest

from rmqstore.formats import commitlog
from rmqstore.formats import remoting as R
from rmqstore.formats.msgid import decode_offset_msg_id
from rmqstore.remoting_net import RemotingClient
from tests import aio, procs

pytestmark = pytest.mark.integration


def _send(conn: int) -> R.Command:
    ext = {"a": "PG", "b": "HopT", "c": "TBW102", "d": "4", "e": str(conn), "f": "0",
           "g": str(int(time.time() * 1000)), "h": "0", "i": "KEYS\x01k\x02TAGS\x01TagA",
           "j": "0"}  # fmt: skip
    return R.Command(code=R.RequestCode.SEND_MESSAGE_V2, ext=ext, body=b"x" * 100)


async def _offsets(address: str, n: int, queue_id: int) -> list[tuple[int, int]]:
    """``n`` concurrent sends: each answer's (message id's offset, queue offset)."""
    client = RemotingClient(address)
    try:
        answers = await asyncio.gather(*(client.invoke(_send(queue_id)) for _ in range(n)))
    finally:
        await client.close()
    out = []
    for a in answers:
        assert a.code == R.ResponseCode.SUCCESS, a.remark
        assert a.ext["queueId"] == str(queue_id)
        out.append((decode_offset_msg_id(a.ext["msgId"])[2], int(a.ext["queueOffset"])))
    return out


def test_sends_are_answered_with_the_put_sockets_offsets(tmp_path):
    sock = str(tmp_path / "nothing.sock")
    nothing = procs.start("benchmarks.noop_put_socket", "--socket", sock)
    noops = [procs.start("benchmarks.noop_remoting", "--put-socket", sock) for _ in range(2)]
    try:
        first = aio.run(_offsets(noops[0].address, 5, 1))
        second = aio.run(_offsets(noops[1].address, 3, 2))
    finally:
        for p in (*noops, nothing):
            p.stop()
    # one socket numbers the messages of both: the second no-op's follow the first's
    assert sorted(first) == [(i, i) for i in range(5)]
    assert sorted(second) == [(i, i) for i in range(5, 8)]


def test_sends_appended_in_process_are_in_the_store_at_the_offsets_answered(tmp_path):
    store = tmp_path / "store"
    noop = procs.start("benchmarks.noop_remoting", "--append-in-process", str(store))
    try:
        answered = aio.run(_offsets(noop.address, 6, 3))
    finally:
        noop.stop()
    data = (store / "commitlog" / f"{0:020d}").read_bytes()  # the first segment
    records = []
    for phy, _queue_offset in sorted(answered):
        r = commitlog.decode(data, phy)  # every check, the body's CRC too
        records.append((r.physical_offset, r.queue_offset, r.topic, r.queue_id, r.body))
    assert records == [(phy, qo, "HopT", 3, b"x" * 100) for phy, qo in sorted(answered)]
    assert [qo for _phy, qo in sorted(answered)] == list(range(6))
