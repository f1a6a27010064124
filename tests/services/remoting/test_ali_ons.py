"""ali-ons 3.12, a RocketMQ 4.x client in pure JavaScript the project did not write, produces
through the name server and the remoting broker of ``rmqstore serve``: every message it saw
acknowledged is found by ``rmqstore query-key`` and by its id (``rmqstore query-id``)."""

import asyncio
import json
import os
import subprocess
import sys

import pytest

from rmqstore.formats import remoting as R
from tests import procs
from tests.remoting_wire import Wire, json_request
from tests.services.remoting.conftest import ALI_ONS_DIR as CLIENT_DIR
from tests.services.remoting.conftest import Served

pytestmark = pytest.mark.integration
PRODUCER = CLIENT_DIR / "ali_ons_producer.js"
COUNT = 10


async def _create_topic(served: Served, topic: str) -> None:
    """UPDATE_AND_CREATE_TOPIC as mqadmin updateTopic sends it, then wait for the route at the
    name server (ali-ons sends only to topics that have one)."""
    broker, namesrv = await Wire.open(served.broker), await Wire.open(served.namesrv)
    try:
        ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "4",
               "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG",
               "topicSysFlag": "0", "order": "false"}  # fmt: skip
        created = await broker.call(json_request(R.RequestCode.UPDATE_AND_CREATE_TOPIC, ext))
        assert created.code == 0, created.remark
        route = json_request(R.RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        while (await namesrv.call(route)).code != 0:
            await asyncio.sleep(0.05)
    finally:
        await broker.close()
        await namesrv.close()


def _cli(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "services.cli.main", *args, "--json"],
                         cwd=procs.ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_ali_ons_producer_sends_with_keys_and_tags(served: Served, ali_ons: None,
                                                   tmp_path) -> None:  # fmt: skip
    asyncio.run(asyncio.wait_for(_create_topic(served, "AliT"), 60))
    env = {**os.environ, "HOME": str(tmp_path)}  # ali-ons writes its logs under $HOME
    run = subprocess.run(
        ["node", str(PRODUCER), served.namesrv, "AliT", str(COUNT)],
        cwd=CLIENT_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    sent = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert [s["key"] for s in sent] == [f"ak-{i}" for i in range(COUNT)]
    assert {s["status"] for s in sent} == {"SEND_OK"}
    assert len({s["msgId"] for s in sent}) == COUNT
    for s in sent:
        while (found := _cli("query-key", "--query", served.query, "--topic", "AliT",
                             "--key", s["key"]))["count"] == 0:  # fmt: skip
            pass  # the index builder catches up; each call takes a process start
        assert found["count"] == 1
        message = found["messages"][0]
        assert message["msgId"] == s["msgId"]
        assert (message["tags"], message["keys"]) == ("TagA", s["key"])
        assert message["body"] == f"ali-ons message {s['key'][3:]}"
        assert str(message["queueId"]) == str(s["queueId"])
        assert message["queueOffset"] == s["queueOffset"]
        by_id = _cli("query-id", "--query", served.query, s["msgId"])
        assert by_id["count"] == 1 and by_id["messages"][0]["keys"] == s["key"]
