"""Offsets committed by RocketMQ 4.x consumers (through the remoting broker) in the proxy's
one table: asked without creating anything, committed and flushed to consumerOffset.json,
refused while the group pops the queue, applied again once nothing is in flight."""

import asyncio

from rmqstore.formats import consumer_offsets
from tests.services.proxy.test_consume import EVERYTHING, TOPIC, _consumption


def test_commits_share_the_table_and_never_cut_into_a_pop(tmp_path):
    async def run():
        c, _store = _consumption(tmp_path, 3)
        assert c.committed("g4", "T", 0) is None and ("g4", "T") not in c.state
        assert c.commit("g4", "T", 0, 2)
        assert c.committed("g4", "T", 0) == 2
        c.flush()
        table = consumer_offsets.parse((tmp_path / "config" / "consumerOffset.json").read_text())
        assert table.offsets[("T", "g4")] == {0: 2}
        assert "g4" in c.group_table.groups  # the group is known, as RocketMQ auto-creates it
        # a RocketMQ 5 consumer of the same group pops from the committed offset
        got = await c.receive("g4", TOPIC, EVERYTHING, 1, 60_000, 0)
        assert [m.system_properties.queue_offset for m in got] == [2]
        assert not c.commit("g4", "T", 0, 0)  # in flight: the pop owns the offset
        assert c.committed("g4", "T", 0) == 2
        c.ack("g4", "T", got[0].system_properties.receipt_handle)
        assert c.committed("g4", "T", 0) == 3
        assert c.commit("g4", "T", 0, 1)  # nothing in flight: a commit moves it (back, too)
        assert c.committed("g4", "T", 0) == 1
        await c.close()

    asyncio.run(run())
