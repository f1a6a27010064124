"""4.x transactions through the remoting broker (``spec`` §3.2, §4): a prepared send stores a
half message; END_TRANSACTION commits or rolls back; an open one is checked with
CHECK_TRANSACTION_STATE on the connection of a live producer of its group, whose answer
resolves it."""

import asyncio
import json
from collections.abc import Iterator

import pytest

from rmqstore.formats import commitlog
from rmqstore.formats import remoting as R
from rmqstore.formats.msgid import decode_offset_msg_id
from tests.remoting_wire import Wire, json_request, read_frame
from tests.services.proxy.conftest import Serve
from tests.services.remoting.conftest import Served

pytestmark = pytest.mark.integration
C = R.RequestCode
GROUP = "PG_TX"
DEADLINE_S = 90.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    store = tmp_path_factory.mktemp("tx") / "store"
    serve = Serve(store, "--transaction-timeout", "0.3", "--transaction-check-interval", "0.5")
    try:
        yield Served(serve)
    finally:
        serve.stop()


def _prepared(key: str, uniq: str, group: str = GROUP) -> dict[str, str]:
    props = (f"KEYS\x01{key}\x02UNIQ_KEY\x01{uniq}\x02TRAN_MSG\x01true\x02PGROUP\x01{group}"
             "\x02WAIT\x01true\x02TAGS\x01TagTx")  # fmt: skip
    return {"a": group, "b": "TxT", "c": "TBW102", "d": "4", "e": "0", "f": "4",
            "g": "1795817537947", "h": "0", "i": props, "j": "0", "k": "false",
            "m": "false"}  # fmt: skip


def _end(sent: R.Command, resolution: int, group: str = GROUP, check: bool = False,
         flag: int = R.FLAG_ONEWAY) -> bytes:  # fmt: skip
    assert sent.ext is not None
    _ip, _port, phy = decode_offset_msg_id(sent.ext["msgId"])
    ext = {"producerGroup": group, "tranStateTableOffset": sent.ext["queueOffset"],
           "commitLogOffset": str(phy), "commitOrRollback": str(resolution),
           "fromTransactionCheck": "true" if check else "false",
           "msgId": sent.ext["msgId"]}  # fmt: skip
    return json_request(C.END_TRANSACTION, ext, 99, flag=flag)


async def _find(broker: Wire, key: str) -> R.Command:
    query = {"topic": "TxT", "key": key, "maxNum": "64", "beginTimestamp": "0",
             "endTimestamp": "9223372036854775807"}  # fmt: skip
    return await broker.call(json_request(C.QUERY_MESSAGE, query))


def test_commit_rollback_and_the_brokers_check(served: Served) -> None:
    async def test() -> None:
        producer = await Wire.open(served.broker)
        other = await Wire.open(served.broker)
        heartbeat = json.dumps({"clientID": "192.0.2.9@tx", "consumerDataSet": [],
                                "producerDataSet": [{"groupName": GROUP}]}).encode()  # fmt: skip
        assert (await producer.call(json_request(C.HEART_BEAT, None, 1, heartbeat))).code == 0
        sends = {}
        for i, key in enumerate(("tx-commit", "tx-rollback", "tx-check")):
            frame = json_request(C.SEND_MESSAGE_V2, _prepared(key, f"FD00AA{i:02d}"), 10 + i,
                                 key.encode())  # fmt: skip
            sends[key] = await other.call(frame)
            assert sends[key].code == 0, sends[key].remark
        # a half is no message of its topic yet
        assert (await _find(other, "tx-commit")).code == R.ResponseCode.QUERY_NOT_FOUND
        # END_TRANSACTION naming another group resolves nothing
        wrong = await other.call(_end(sends["tx-commit"], 8, group="PG_OTHER", flag=0))
        assert wrong.code == R.ResponseCode.SYSTEM_ERROR
        other.writer.write(_end(sends["tx-commit"], 8))  # oneway, as Java sends it
        other.writer.write(_end(sends["tx-rollback"], 12))
        other.writer.write(_end(sends["tx-check"], 0))  # unknown: left open
        # the broker asks the live producer of the group about the open one
        while True:
            _raw, check = await read_frame(producer.reader)
            if check.code == C.CHECK_TRANSACTION_STATE:
                break
        assert check.is_oneway and check.ext is not None
        _ip, _port, phy = decode_offset_msg_id(sends["tx-check"].ext["msgId"])  # type: ignore[index]
        assert check.ext["commitLogOffset"] == str(phy)
        assert check.ext["tranStateTableOffset"] == sends["tx-check"].ext["queueOffset"]  # type: ignore[index]
        assert check.ext["msgId"] == check.ext["transactionId"] == "FD00AA02"
        record = commitlog.decode(check.body)
        assert (record.topic, record.queue_id, record.body) == ("TxT", 0, b"tx-check")
        assert record.property_map["PGROUP"] == GROUP
        assert record.property_map["TRAN_MSG"] == "true"
        producer.writer.write(_end(sends["tx-check"], 8, check=True))

        while (found := await _find(other, "tx-check")).code != 0:
            await asyncio.sleep(0.05)
        committed = commitlog.decode(found.body)
        assert (
            committed.sys_flag & commitlog.TRANSACTION_TYPE_MASK
            == commitlog.TRANSACTION_COMMIT_TYPE
        )
        assert committed.prepared_transaction_offset == phy
        assert "TRAN_MSG" not in committed.property_map
        assert (await _find(other, "tx-commit")).code == 0
        assert (await _find(other, "tx-rollback")).code == R.ResponseCode.QUERY_NOT_FOUND
        top = await other.call(json_request(C.GET_MAX_OFFSET, {"topic": "TxT", "queueId": 0}))
        assert top.ext == {"offset": "2"}
        await producer.close()
        await other.close()

    asyncio.run(asyncio.wait_for(test(), DEADLINE_S))


def test_prepared_batch_is_refused(served: Served) -> None:
    async def test() -> None:
        broker = await Wire.open(served.broker)
        ext = {**_prepared("b", "FD00BB"), "m": "true"}
        answer = await broker.call(json_request(C.SEND_BATCH_MESSAGE, ext, 1, b""))
        assert answer.code == R.ResponseCode.NO_PERMISSION
        await broker.close()

    asyncio.run(asyncio.wait_for(test(), DEADLINE_S))
