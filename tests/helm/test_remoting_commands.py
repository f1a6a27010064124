"""The name server's and the remoting broker's command lines, taken from the rendered chart,
started as real processes beside the writer and the query service: the broker registers with
the name server under the chart's broker and cluster names at the address it was given, and a
4.x send is stored with that address as its store host (offset message ids reach it)."""

import asyncio
import json
from pathlib import Path

import pytest

from rmqstore.formats import commitlog
from rmqstore.formats import remoting as R
from rmqstore.formats.msgid import decode_offset_msg_id
from tests import procs
from tests.helm.conftest import RELEASE, broker_sts, named, render
from tests.helm.test_chart_commands import SMALL, _local
from tests.remoting_wire import Wire, json_request

pytestmark = pytest.mark.integration

C = R.RequestCode
FULLNAME = f"{RELEASE}-rmqstore"
DEADLINE_S = 60.0
V2 = {"a": "PG", "b": "ChartT", "c": "TBW102", "d": "4", "e": "1", "f": "0",
      "g": "1795817537947", "h": "0", "i": "KEYS\x01k1\x02WAIT\x01true\x02TAGS\x01TagA",
      "j": "0", "k": "false", "m": "false", "n": "rmqstore"}  # fmt: skip


def _swap(args: list[str], **flags: str) -> list[str]:
    out = list(args)
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        assert flag in out, flag
        out[out.index(flag) + 1] = value
    return out


async def _check(namesrv: str, broker: str) -> None:
    names, to_broker = await Wire.open(namesrv), await Wire.open(broker)
    try:
        while True:  # the broker registers once it has started
            route = await names.call(json_request(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}))
            if route.code == 0:
                break
            await asyncio.sleep(0.05)
        assert json.loads(route.body)["brokerDatas"] == [
            {"brokerAddrs": {"0": broker}, "brokerName": FULLNAME, "cluster": "DefaultCluster"}
        ]
        answer = await to_broker.call(json_request(C.SEND_MESSAGE_V2, V2, 7, b"from-4x"))
        assert answer.code == 0, answer.remark
        assert answer.ext is not None
        ip, port, offset = decode_offset_msg_id(answer.ext["msgId"])
        assert (ip, port) == (bytes([127, 0, 0, 1]), int(broker.rpartition(":")[2]))
        view = await to_broker.call(json_request(C.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}))
        record = commitlog.decode(view.body)
        assert record.body == b"from-4x" and str(record.store_host) == broker
    finally:
        await names.close()
        await to_broker.close()


def test_chart_starts_a_name_server_and_a_registered_remoting_broker(tmp_path: Path) -> None:
    objects = render(SMALL)
    containers = {c["name"]: c for c in broker_sts(objects)["spec"]["template"]["spec"]
                  ["containers"]}  # fmt: skip
    (namesrv_c,) = named(objects, "StatefulSet", f"{FULLNAME}-namesrv")["spec"]["template"]["spec"][
        "containers"
    ]
    store = tmp_path / "store"
    store.mkdir()
    sock = str(tmp_path / "put.sock")
    broker_port = procs.free_port()
    broker = f"127.0.0.1:{broker_port}"
    started: list[procs.ServiceProcess] = []
    try:
        args = _local(containers["commitlog"]["args"], store, None, procs.free_port())
        # the chart's store host is the broker's: $(POD_IP):10911, here the local broker
        assert containers["commitlog"]["args"][args.index("--store-host") + 1] == (
            "$(POD_IP):10911")  # fmt: skip
        writer = procs.start(*_swap(args, store_host=broker, put_socket=sock)[1:])
        started.append(writer)
        args = _local(containers["query"]["args"], store, writer.address, procs.free_port())
        query = procs.start(*args[1:])
        started.append(query)
        args = _local(namesrv_c["args"], store, None, procs.free_port())
        names = procs.start(*args[1:])
        started.append(names)
        args = _local(containers["remoting"]["args"], store, writer.address, procs.free_port())
        args = _swap(
            args,
            listen=broker,
            query=query.address,
            namesrv=names.address,
            broker_ip="127.0.0.1",
            commitlog_socket=sock,
        )
        started.append(procs.start(*args[1:]))
        asyncio.run(asyncio.wait_for(_check(names.address, broker), DEADLINE_S))
    finally:
        for p in reversed(started):
            p.stop()
    assert all(p.proc.returncode == 0 for p in started), [p.lines[-5:] for p in started]
