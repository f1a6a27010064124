"""Many synchronous 4.x producers at once under ``rmqstore serve``: the broker gathers their
sends into shared writer batches (group commit), and each send is still answered with its own
message id and queue offset, in its connection's order, and stored once."""

import asyncio

import pytest

from rmqstore.formats import commitlog
from rmqstore.formats import remoting as R
from rmqstore.formats.msgid import decode_offset_msg_id
from tests.remoting_wire import Wire, json_request
from tests.services.remoting.conftest import Served
from tests.services.remoting.test_broker import _props, _until, _v2, run

pytestmark = pytest.mark.integration
C = R.RequestCode
TOPIC = "GroupCommitT"
SENDERS, EACH = 12, 10  # connections, sends on each (one at a time)


def _send(c: int, i: int) -> bytes:
    uniq = f"FD00000000000000000000{c:04X}{i:06X}"
    ext = _v2(TOPIC, c % 4, _props(f"gc-{c}-{i}", uniq))
    return json_request(C.SEND_MESSAGE_V2, ext, i + 1, f"body {c}-{i}".encode())


async def _sender(wire: Wire, c: int) -> list[tuple[str, int, int, bytes]]:
    """(msgId, queueId, queueOffset, body) of each send, in order."""
    out = []
    for i in range(EACH):
        answer = await wire.call(_send(c, i))
        assert (answer.code, answer.opaque) == (0, i + 1), answer.remark
        assert answer.ext is not None
        out.append((answer.ext["msgId"], int(answer.ext["queueId"]),
                    int(answer.ext["queueOffset"]), f"body {c}-{i}".encode()))  # fmt: skip
    return out


def test_concurrent_synchronous_senders_get_their_own_offsets_and_are_stored_once(
    served: Served,
) -> None:
    async def test(broker: Wire, namesrv: Wire) -> None:
        first = await broker.call(_send(99, 0))  # creates the topic (4 queues): offset 0 of 3
        assert first.code == 0, first.remark
        wires = [await Wire.open(served.broker) for _ in range(SENDERS)]
        try:
            sent = await asyncio.gather(*(_sender(w, c) for c, w in enumerate(wires)))
        finally:
            for w in wires:
                await w.close()
        answers = [a for each in sent for a in each]
        assert len({msg_id for msg_id, *_ in answers}) == SENDERS * EACH
        for c, each in enumerate(sent):  # a connection's sends in its order, on its queue
            assert {q for _id, q, _o, _b in each} == {c % 4}
            offsets = [o for _id, _q, o, _b in each]
            assert offsets == sorted(offsets)
        for q in range(4):  # each queue's offsets: distinct, back to back, none skipped
            offsets = sorted(o for _id, qq, o, _b in answers if qq == q)
            start = 1 if q == 3 else 0  # queue 3 holds the first send
            assert offsets == list(range(start, start + len(offsets)))
        for msg_id, q, offset, body in answers:  # each id finds its own message
            _ip, _port, phy = decode_offset_msg_id(msg_id)
            view = await broker.call(json_request(C.VIEW_MESSAGE_BY_ID, {"offset": str(phy)}))
            record = commitlog.decode(view.body)
            assert (record.body, record.queue_id, record.queue_offset) == (body, q, offset)

        async def queue_ends() -> list[int] | None:  # stored once: no queue holds more
            ends = []
            for q in range(4):
                ask = json_request(C.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": str(q)})
                ends.append(int((await broker.call(ask)).ext["offset"]))
            want = [len([a for a in answers if a[1] == q]) + (q == 3) for q in range(4)]
            return ends if ends == want else None

        assert await _until(queue_ends)

    run(served, test)
