"""``kill -9`` of every process of ``rmqstore serve`` while a 4.x consumer pulls and commits
through the remoting broker, then a restart on the same store: the group resumes from its
last durable commit (never ahead of what it consumed) and every message is consumed at least
once."""

import asyncio
from pathlib import Path

import pytest

from rmqstore.formats import consumer_offsets
from rmqstore.formats import remoting as R
from tests.remoting_wire import Wire, json_request
from tests.services.proxy.conftest import Serve
from tests.services.remoting.test_kill9 import _kill_all
from tests.services.remoting.test_pull import _found, _pull, _records, _send

pytestmark = pytest.mark.integration
C = R.RequestCode
COUNT = 120
DEADLINE_S = 180.0
GROUP, TOPIC = "CG_KILL", "KillCT"


def _offset_frame() -> bytes:
    ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0"}
    return json_request(C.QUERY_CONSUMER_OFFSET, ext)


def _commit_frame(offset: int) -> bytes:
    ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "commitOffset": str(offset)}
    return json_request(C.UPDATE_CONSUMER_OFFSET, ext)


def _durable(store: Path) -> int:
    """The group's offset in consumerOffset.json (-1: none yet)."""
    try:
        text = (store / "config" / "consumerOffset.json").read_text()
    except FileNotFoundError:
        return -1
    return consumer_offsets.parse(text).offsets.get((TOPIC, GROUP), {}).get(0, -1)


async def _batch(wire: Wire, offset: int) -> tuple[list[str], int]:
    answer = await _found(wire, _pull(GROUP, TOPIC, 0, offset, sys_flag=4))
    assert answer.ext is not None
    return [r.body.decode() for r in _records(answer.body)], int(answer.ext["nextBeginOffset"])


def test_a_consumer_resumes_from_its_durable_commit_after_kill9(tmp_path: Path) -> None:
    store = tmp_path / "store"
    serve = Serve(store)
    consumed: list[str] = []
    state: dict[str, int] = {}

    async def before() -> None:
        wire = await Wire.open(serve.address(7))
        for i in range(COUNT):
            answer = await wire.call(_send(TOPIC, 0, "K", 1000 + i, f"kc-{i}".encode()))
            assert answer.code == 0, answer.remark
        got, nxt = await _batch(wire, 0)  # a batch consumed and committed ...
        consumed.extend(got)
        assert (await wire.call(_commit_frame(nxt))).code == 0
        while _durable(store) != nxt:  # ... and flushed by the proxy (every second)
            await asyncio.sleep(0.05)
        state["durable"] = nxt
        got, nxt2 = await _batch(wire, nxt)  # one more consumed, its commit in flight
        consumed.extend(got)
        wire.writer.write(_commit_frame(nxt2))
        state["consumed_to"] = nxt2
        _kill_all(serve)

    try:
        asyncio.run(asyncio.wait_for(before(), DEADLINE_S))
    finally:
        serve.stop()
    again = Serve(store)
    try:

        async def after() -> None:
            wire = await Wire.open(again.address(7))
            answer = await wire.call(_offset_frame())
            assert answer.code == 0 and answer.ext is not None, answer.remark
            offset = int(answer.ext["offset"])
            # the last flushed commit, or the one in flight if it made it: never beyond
            assert state["durable"] <= offset <= state["consumed_to"]
            while offset < COUNT:
                got, offset = await _batch(wire, offset)
                consumed.extend(got)
            await wire.close()

        asyncio.run(asyncio.wait_for(after(), DEADLINE_S))
    finally:
        again.stop()
    assert set(consumed) == {f"kc-{i}" for i in range(COUNT)}, state
