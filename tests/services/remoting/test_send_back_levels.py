"""A message given back (CONSUMER_SEND_MSG_BACK) goes through the writer's delay table
(``--delay-levels``), the one table: a level beyond the default 18 is kept when the writer's
table has it, and a level beyond the writer's table is stored as its last level."""

from collections.abc import Iterator

import pytest

from rmqstore.formats import remoting as R
from rmqstore.formats.msgid import decode_offset_msg_id
from tests.remoting_wire import Wire, json_request
from tests.services.remoting.conftest import Served, serve_module
from tests.services.remoting.test_consumer_groups import _find, _run, _send, _until

pytestmark = pytest.mark.integration
C = R.RequestCode
LEVELS = " ".join(f"{n}m" for n in range(1, 21))  # 20 levels, all far off


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from serve_module(tmp_path_factory, "--delay-levels", LEVELS)


def test_send_back_levels_follow_the_writers_table(served: Served) -> None:
    async def test() -> None:
        wire = await Wire.open(served.broker)
        try:
            for i, (asked, stored) in enumerate(((20, 20), (25, 20))):
                key = f"lv-{i}"
                sent = await wire.call(_send("LevT", key, 10 + i))
                assert sent.code == 0, sent.remark
                phy = decode_offset_msg_id(sent.ext["msgId"])[2]
                back = {"offset": str(phy), "group": "CG_LV", "delayLevel": str(asked),
                        "originTopic": "LevT", "maxReconsumeTimes": "16"}  # fmt: skip
                answer = await wire.call(json_request(C.CONSUMER_SEND_MSG_BACK, back, 20 + i))
                assert answer.code == 0, answer.remark
                copy = (await _until(lambda k=key: _find(wire, "SCHEDULE_TOPIC_XXXX", k)))[0]
                assert copy.property_map["DELAY"] == str(stored)
                assert copy.queue_id == stored - 1
        finally:
            await wire.close()

    _run(test)
