"""``rmqstore admin set-perm``'s refusals and failures, against a name server process: a bad
or missing flag, no name server answering, a broker no name server knows, and a registered
broker that cannot be told (nothing changed for ``--read-only``; the name servers told first
for ``--read-write``). The drain itself: ``tests/integration/test_drain.py``."""

import asyncio
import json
import sys
from collections.abc import Iterator

import pytest

from rmqstore.formats import remoting as R
from tests import procs
from tests.remoting_wire import Wire, json_request

C = R.RequestCode
NOBODY = "127.0.0.1:1"  # nothing listens there


@pytest.fixture(scope="module")
def namesrv() -> Iterator[procs.ServiceProcess]:
    p = procs.start("services.namesrv", "--listen", "127.0.0.1:0")
    yield p
    p.stop()


async def _cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", "admin", "set-perm", *args, cwd=procs.ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _run_cli(*args: str) -> tuple[int, str, str]:
    return asyncio.run(_cli(*args))


async def _perm(namesrv: str, topic: str) -> int:
    wire = await Wire.open(namesrv)
    try:
        answer = await wire.call(json_request(C.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    finally:
        await wire.close()
    return R.parse_json_body(answer.body)["queueDatas"][0]["perm"]


def _with_ghost_broker(namesrv: str, topic: str, *args: str,
                       wiped: bool = False) -> tuple[int, str, str, int]:  # fmt: skip
    """Register broker ``ghost`` (at an address nothing listens on) with one topic (``wiped``:
    then its write permission wiped), run the command while its registering connection stays
    open (closing it drops the broker), and give the topic's route perm after it."""

    async def main() -> tuple[int, str, str, int]:
        ext = {"brokerName": "ghost", "brokerAddr": NOBODY, "clusterName": "GhostC",
               "haServerAddr": NOBODY, "brokerId": "0"}  # fmt: skip
        body = json.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": {topic: {
            "perm": 6, "readQueueNums": 1, "writeQueueNums": 1, "topicName": topic}}}}).encode()
        wire = await Wire.open(namesrv)
        try:
            answer = await wire.call(json_request(C.REGISTER_BROKER, ext, body=body))
            assert answer.code == 0, answer.remark
            if wiped:
                wipe = json_request(C.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "ghost"}, 2)
                assert (await wire.call(wipe)).code == 0
                assert await _perm(namesrv, topic) == 4
            code, out, err = await _cli(*args)
            return code, out, err, await _perm(namesrv, topic)
        finally:
            await wire.close()

    return asyncio.run(main())


def test_usage_errors_exit_2() -> None:
    both = _run_cli("--broker", "b", "--read-only", "--read-write", "--namesrv", NOBODY)
    assert both[0] == 2 and "not allowed with argument" in both[2]
    neither = _run_cli("--broker", "b", "--namesrv", NOBODY)
    assert neither[0] == 2 and "one of the arguments --read-only --read-write" in neither[2]
    bad = _run_cli("--broker", "b", "--read-only", "--namesrv", "nohost")
    assert bad[0] == 2 and "'nohost' is not HOST:PORT" in bad[2]


def test_no_name_server_answering_exits_3() -> None:
    code, out, err = _run_cli("--broker", "b", "--read-only", "--namesrv", NOBODY)
    assert code == 3 and out == ""
    assert err.startswith(f"error: no name server answered ({NOBODY}: ")


def test_a_broker_no_name_server_knows_exits_1(namesrv: procs.ServiceProcess) -> None:
    code, out, err, _perm = _with_ghost_broker(
        namesrv.address, "GhostT", "--broker", "nope", "--read-only", "--namesrv",
        f"{namesrv.address};{NOBODY}",  # one of two answering is enough to know
    )  # fmt: skip
    assert code == 1 and out == ""
    assert err == ("error: broker 'nope' is not registered with any name server "
                   "(brokers: ghost)\n")  # fmt: skip


def test_a_broker_that_cannot_be_told_changes_nothing(namesrv: procs.ServiceProcess) -> None:
    code, out, err, perm = _with_ghost_broker(
        namesrv.address, "GhostRO", "--broker", "ghost", "--read-only", "--namesrv",
        namesrv.address, "--json",
    )  # fmt: skip
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["target"], r["address"], r["result"]) for r in rows] == [
        ("broker", NOBODY, "failed"), ("namesrv", namesrv.address, "not asked")]
    assert code == 3 and perm == 6
    assert err.startswith("error: broker ghost not made read-only everywhere: broker "
                          f"{NOBODY}, namesrv {namesrv.address} not told")  # fmt: skip


def test_read_write_tells_the_name_servers_first(namesrv: procs.ServiceProcess) -> None:
    code, out, _err, perm = _with_ghost_broker(
        namesrv.address, "GhostRW", "--broker", "ghost", "--read-write", "--namesrv",
        namesrv.address, wiped=True,
    )  # fmt: skip
    lines = out.splitlines()
    assert lines[0] == (f"namesrv {namesrv.address}: write permission added to 1 topics of "
                        "ghost")  # fmt: skip
    assert lines[1].startswith(f"broker {NOBODY}: failed: ")
    assert code == 3 and perm == 6
