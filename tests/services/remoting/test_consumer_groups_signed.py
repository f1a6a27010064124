"""Under ``rmqstore serve --access-key`` the proxy takes only signed ``ConsumerGroups`` calls:
the remoting broker signs its own (a 4.x heartbeat creates the subscription group there;
consume stats read its offsets)."""

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rmqstore import access_keys
from rmqstore.formats import remoting as R
from rmqstore.v1 import groups_pb2, groups_pb2_grpc
from tests.remoting_wire import Wire, json_request, read_frame
from tests.services.proxy.conftest import Serve
from tests.services.remoting.conftest import BROKER_SLOT

pytestmark = pytest.mark.integration
C = R.RequestCode
PROXY_SLOT = 4
SECRET = "rgroups-secret"


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    root: Path = tmp_path_factory.mktemp("signed")
    secret = root / "secret"
    secret.write_text(SECRET + "\n")
    serve = Serve(root / "store", "--access-key", "AK", "--secret-key-file", str(secret))
    try:
        yield serve
    finally:
        serve.stop()


def test_the_broker_signs_its_calls_to_the_proxy(signed: Serve) -> None:
    async def test() -> None:
        wire = await Wire.open(signed.address(BROKER_SLOT))
        body = json.dumps({"clientID": "10.0.0.9@s", "consumerDataSet": [
            {"groupName": "CG_SIGNED", "consumeType": "CONSUME_PASSIVELY",
             "messageModel": "CLUSTERING", "subscriptionDataSet": [{"topic": "ST"}]}]})
        wire.writer.write(json_request(C.HEART_BEAT, None, 1, body.encode()))
        while not (await read_frame(wire.reader))[1].is_response:
            pass  # the group's NOTIFY_CONSUMER_IDS_CHANGED
        async with grpc.aio.insecure_channel(signed.address(PROXY_SLOT)) as channel:
            stub = groups_pb2_grpc.ConsumerGroupsStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as unsigned:
                await stub.ListGroups(groups_pb2.ListGroupsRequest())
            assert unsigned.value.code() == grpc.StatusCode.UNAUTHENTICATED
            while True:  # created in the background
                listed = await stub.ListGroups(groups_pb2.ListGroupsRequest(),
                                               metadata=access_keys.metadata("AK", SECRET))
                if "CG_SIGNED" in [g.name for g in listed.groups]:
                    break
                await asyncio.sleep(0.05)
        stats = await wire.call(json_request(C.GET_CONSUME_STATS,
                                             {"consumerGroup": "CG_SIGNED"}, 2))
        assert stats.code == 0, stats.remark
        await wire.close()

    asyncio.run(asyncio.wait_for(test(), 60))
