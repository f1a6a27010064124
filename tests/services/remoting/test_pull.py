"""Pulls and offsets of RocketMQ 4.x consumers at the remoting broker under ``rmqstore serve``,
frame by frame (``spec/rocketmq-remoting.md`` §3.3): PULL_MESSAGE's statuses, tag filters,
commit piggyback and long polling; the offset commands, answered from the proxy's table."""

import asyncio
import json
import os
import signal
import struct
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import pytest

from rmqstore.formats import commitlog
from rmqstore.formats import remoting as R
from rmqstore.queue_files import QueueFiles
from rmqstore.v1 import groups_pb2, groups_pb2_grpc
from services.remoting import pull
from tests import procs
from tests.remoting_wire import Wire, json_request, read_frame
from tests.services.proxy.conftest import Serve
from tests.services.remoting.conftest import Served

pytestmark = pytest.mark.integration
C = R.RequestCode
RC = R.ResponseCode
DEADLINE_S = 60.0


def _send(topic: str, queue_id: int, tags: str, opaque: int, body: bytes) -> bytes:
    ext = {"a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
           "g": "1795817537947", "h": "0", "i": f"TAGS\x01{tags}\x02KEYS\x01k", "j": "0",
           "k": "false", "m": "false"}  # fmt: skip
    return json_request(C.SEND_MESSAGE_V2, ext, opaque, body)


def _pull(group: str, topic: str, queue_id: int, offset: int, opaque: int = 1,
          sys_flag: int = 4, subscription: str = "*", suspend_ms: int = 0,
          commit: int = 0) -> bytes:  # fmt: skip
    ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id),
           "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": str(sys_flag),
           "commitOffset": str(commit), "suspendTimeoutMillis": str(suspend_ms),
           "subscription": subscription, "subVersion": "0"}  # fmt: skip
    return json_request(C.PULL_MESSAGE, ext, opaque)


def _records(body: bytes) -> list[commitlog.Record]:
    out, at = [], 0
    while at < len(body):
        (size,) = struct.unpack_from(">i", body, at)
        out.append(commitlog.decode(body[at : at + size]))
        at += size
    return out


def _offsets(answer: R.Command) -> tuple[int, int, int, int]:
    assert answer.ext is not None, answer.remark
    e = answer.ext
    return (int(e["suggestWhichBrokerId"]), int(e["nextBeginOffset"]), int(e["minOffset"]),
            int(e["maxOffset"]))  # fmt: skip


def run(served: Served, test: Callable[[Wire], Awaitable[None]]) -> None:
    async def main() -> None:
        broker = await Wire.open(served.broker)
        try:
            await asyncio.wait_for(test(broker), DEADLINE_S)
        finally:
            await broker.close()

    asyncio.run(main())


async def _sent(broker: Wire, topic: str, queue_id: int, tags: list[str]) -> None:
    for i, t in enumerate(tags):
        answer = await broker.call(_send(topic, queue_id, t, 100 + i, f"{t}-{i}".encode()))
        assert answer.code == 0, answer.remark


async def _found(broker: Wire, frame: bytes, end: int = 0) -> R.Command:
    """Pull until FOUND with the queue's end at ``end`` or beyond (the consume queue is built
    a moment after the send's answer)."""
    while True:
        answer = await broker.call(frame)
        if answer.code == RC.SUCCESS and _offsets(answer)[3] >= end:
            return answer
        assert answer.code in (RC.SUCCESS, RC.PULL_NOT_FOUND, RC.PULL_OFFSET_MOVED), answer.remark
        await asyncio.sleep(0.05)


def test_pull_finds_the_stored_records_filtered_by_tag(served: Served) -> None:
    async def test(broker: Wire) -> None:
        await _sent(broker, "PullT", 1, ["TagA", "TagB", "TagA"])
        answer = await _found(broker, _pull("CG1", "PullT", 1, 0, subscription="TagA || TagC"), 3)
        records = _records(answer.body)
        assert [r.body for r in records] == [b"TagA-0", b"TagA-2"]
        assert all(r.topic == "PullT" and r.queue_id == 1 for r in records)
        assert _offsets(answer) == (0, 3, 0, 3) and answer.remark == "FOUND"
        everything = await broker.call(_pull("CG1", "PullT", 1, 0))
        assert [r.queue_offset for r in _records(everything.body)] == [0, 1, 2]

    run(served, test)


def test_pull_statuses_and_refusals(served: Served) -> None:
    async def test(broker: Wire) -> None:
        await _sent(broker, "StatT", 0, ["a", "b"])
        await _found(broker, _pull("CG2", "StatT", 0, 0), 2)
        at_end = await broker.call(_pull("CG2", "StatT", 0, 2))  # no suspend flag: at once
        assert at_end.code == RC.PULL_NOT_FOUND and _offsets(at_end) == (0, 2, 0, 2)
        beyond = await broker.call(_pull("CG2", "StatT", 0, 9))
        assert beyond.code == RC.PULL_OFFSET_MOVED and _offsets(beyond)[1] == 0  # min, as 4.9.8
        empty = await broker.call(_pull("CG2", "StatT", 3, 0))  # a queue never written, at 0
        assert empty.code == RC.PULL_NOT_FOUND and _offsets(empty) == (0, 0, 0, 0)
        moved = await broker.call(_pull("CG2", "StatT", 3, 5))
        assert moved.code == RC.PULL_OFFSET_MOVED and _offsets(moved)[1] == 0
        unmatched = await broker.call(_pull("CG2", "StatT", 0, 0, subscription="nope"))
        assert unmatched.code == RC.PULL_RETRY_IMMEDIATELY and _offsets(unmatched)[1] == 2
        unknown = await broker.call(_pull("CG2", "NoSuchT", 0, 0))
        assert unknown.code == RC.TOPIC_NOT_EXIST
        bad_queue = await broker.call(_pull("CG2", "StatT", 0 + 99, 0))
        assert bad_queue.code == RC.SYSTEM_ERROR and "queueId[99] is illegal" in bad_queue.remark
        no_sub = await broker.call(_pull("CG-NOSUB", "StatT", 0, 0, sys_flag=2))
        assert no_sub.code == RC.SUBSCRIPTION_NOT_EXIST

    run(served, test)


def test_held_pull_wakes_on_arrival_and_the_connection_goes_on(served: Served) -> None:
    async def test(broker: Wire) -> None:
        await _sent(broker, "HoldT", 2, ["x"])
        await _found(broker, _pull("CG3", "HoldT", 2, 0))
        # held: long polling allowed, 30 s; then a send on the same connection is answered
        # first, and its message answers the held pull
        broker.writer.write(_pull("CG3", "HoldT", 2, 1, opaque=7, sys_flag=6, suspend_ms=30000))
        broker.writer.write(_send("HoldT", 2, "y", 8, b"late"))
        first = (await read_frame(broker.reader))[1]
        assert first.opaque == 8 and first.code == 0
        held = (await read_frame(broker.reader))[1]
        assert held.opaque == 7 and held.code == RC.SUCCESS, held.remark
        assert [r.body for r in _records(held.body)] == [b"late"]
        # a held pull with nothing arriving answers PULL_NOT_FOUND at its timeout
        idle = await broker.call(_pull("CG3", "HoldT", 2, 2, sys_flag=6, suspend_ms=300))
        assert idle.code == RC.PULL_NOT_FOUND and _offsets(idle)[1] == 2

    run(served, test)


def test_offsets_live_in_the_proxys_table(served: Served) -> None:
    def q(topic: str, queue: int, group: str = "CG4") -> bytes:
        ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue)}
        return json_request(C.QUERY_CONSUMER_OFFSET, ext)

    async def test(broker: Wire) -> None:
        await _sent(broker, "OffT", 0, ["a", "b", "c"])
        fresh = await broker.call(q("OffT", 0))
        assert fresh.code == RC.QUERY_NOT_FOUND
        ext = {"consumerGroup": "CG4", "topic": "OffT", "queueId": "0", "commitOffset": "2"}
        updated = await broker.call(json_request(C.UPDATE_CONSUMER_OFFSET, ext))
        assert updated.code == 0 and updated.ext == {}
        answer = await broker.call(q("OffT", 0))
        assert answer.code == 0 and answer.ext == {"offset": "2"}
        # the commit piggybacked on a pull (sysFlag 0x1)
        await _found(broker, _pull("CG4", "OffT", 0, 2, sys_flag=5, commit=3))
        assert (await broker.call(q("OffT", 0))).ext == {"offset": "3"}
        # one owner: the proxy's ConsumerGroups answers the same
        async with grpc.aio.insecure_channel(served.serve.proxy) as channel:
            stub = groups_pb2_grpc.ConsumerGroupsStub(channel)
            got = await stub.QueryOffset(
                groups_pb2.QueryOffsetRequest(group="CG4", topic="OffT", queue_id=0)
            )
            assert (got.found, got.offset) == (True, 3)
        earliest = await broker.call(
            json_request(C.GET_EARLIEST_MSG_STORETIME, {"topic": "OffT", "queueId": "0"})
        )
        assert earliest.code == 0 and earliest.ext and int(earliest.ext["timestamp"]) > 0
        none = await broker.call(
            json_request(C.GET_EARLIEST_MSG_STORETIME, {"topic": "OffT", "queueId": "3"})
        )
        assert none.code == RC.SYSTEM_ERROR

    run(served, test)


def test_consumer_list_from_heartbeats(served: Served) -> None:
    async def test(broker: Wire) -> None:
        ask = json_request(C.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG5"})
        assert (await broker.call(ask)).code == RC.SYSTEM_ERROR
        beat = {"clientID": "127.0.0.1@c5", "consumerDataSet": [{
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "consumeType": "CONSUME_PASSIVELY",
            "groupName": "CG5", "messageModel": "CLUSTERING", "subscriptionDataSet": [
                {"subString": "TagA", "topic": "BeatT", "subVersion": 1, "tagsSet": ["TagA"]}],
        }], "producerDataSet": []}  # fmt: skip
        answer = await broker.answer(json_request(C.HEART_BEAT, body=json.dumps(beat).encode()))
        assert answer.code == 0
        listed = await broker.call(ask)
        assert json.loads(listed.body) == {"consumerIdList": ["127.0.0.1@c5"]}
        # the heartbeat's subscription filters a pull without one of its own (sysFlag 2)
        await _sent(broker, "BeatT", 1, ["TagA", "TagB", "TagA"])
        answer = await _found(broker, _pull("CG5", "BeatT", 1, 0, sys_flag=0, subscription=""),
                              end=3)  # fmt: skip
        assert all(r.body.startswith(b"TagA") for r in _records(answer.body))

    run(served, test)


def test_pull_metrics(served: Served) -> None:
    async def test(broker: Wire) -> None:
        await _sent(broker, "MetT", 0, ["a", "b"])
        await _found(broker, _pull("CG_MET", "MetT", 0, 0), 2)  # both units written
        # one behind the end (lag 1), committing 1: passed on once the offset is asked for
        await broker.call(_pull("CG_MET", "MetT", 0, 1, sys_flag=5, commit=1))
        ask = {"consumerGroup": "CG_MET", "topic": "MetT", "queueId": "0"}
        answer = await broker.call(json_request(C.QUERY_CONSUMER_OFFSET, ask))
        assert answer.ext == {"offset": "1"}

    run(served, test)
    with urllib.request.urlopen(f"http://127.0.0.1:{served.serve.base + 17}/metrics",
                                timeout=30) as r:  # fmt: skip
        text = r.read().decode()
    assert 'rmqstore_remoting_pulls_total{code="SUCCESS"}' in text
    assert "rmqstore_remoting_pulls_suspended 0.0" in text
    assert 'rmqstore_remoting_consumer_lag_messages{group="CG_MET",topic="MetT"} 1.0' in text
    pulled = [line for line in text.splitlines()
              if line.startswith("rmqstore_remoting_pulled_messages_total")]  # fmt: skip
    assert pulled and float(pulled[0].split()[1]) >= 3
    applied = [line for line in text.splitlines()
               if line.startswith('rmqstore_remoting_offset_commits_total{outcome="applied"}')]
    assert applied and float(applied[0].split()[1]) >= 1, text
    assert 'rmqstore_remoting_offset_commits_total{outcome="lost"} 0.0' in text


def test_a_held_pull_ends_with_its_connection(served: Served) -> None:
    def suspended() -> float:
        url = f"http://127.0.0.1:{served.serve.base + 17}/metrics"
        with urllib.request.urlopen(url, timeout=30) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("rmqstore_remoting_pulls_suspended "):
                    return float(line.split()[1])
        return -1.0

    async def until(value: float) -> None:
        while await asyncio.to_thread(suspended) != value:
            await asyncio.sleep(0.05)  # polling the gauge, bounded by the test's deadline

    async def test(broker: Wire) -> None:
        await _sent(broker, "GoneT", 0, ["a"])
        await _found(broker, _pull("CG_GONE", "GoneT", 0, 0))
        other = await Wire.open(served.broker)
        other.writer.write(_pull("CG_GONE", "GoneT", 0, 1, sys_flag=6, suspend_ms=50000))
        await until(1.0)
        await other.close()
        await until(0.0)  # well before its 50 s

    run(served, test)


def _pull_streams(serve: Serve) -> float:
    """The writer's dispatch streams open to the remoting broker's long polling."""
    with urllib.request.urlopen(f"http://127.0.0.1:{serve.base + 10}/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith('rmqstore_writer_subscribers{builder="remoting-pulls"}'):
                return float(line.split()[1])
    return 0.0


def test_offsets_reach_a_proxy_that_requires_signatures(tmp_path) -> None:
    """Also: the broker opens its dispatch stream only once a pull is held. (Its own port
    takes unsigned requests here: ``test_signed`` has the broker's ACL.)"""
    secret = tmp_path / "secret"
    secret.write_text("SK\n")
    serve = Serve(tmp_path / "store", "--access-key", "AK", "--secret-key-file", str(secret),
                  "--remoting-unsigned")
    try:
        async def test(broker: Wire) -> None:
            assert await asyncio.to_thread(_pull_streams, serve) == 0  # only sends so far
            await _sent(broker, "SignedT", 1, ["a"])
            await _found(broker, _pull("CG_SIGNED", "SignedT", 1, 0))
            broker.writer.write(_pull("CG_SIGNED", "SignedT", 1, 1, 9, 6, suspend_ms=50000))
            while await asyncio.to_thread(_pull_streams, serve) != 1:
                await asyncio.sleep(0.05)  # polling the gauge, bounded by the deadline
            broker.writer.write(_send("SignedT", 1, "b", 10, b"wakes it"))
            answers = {c.opaque: c for c in [(await read_frame(broker.reader))[1]
                                             for _ in range(2)]}  # fmt: skip
            assert answers[9].code == RC.SUCCESS and answers[10].code == RC.SUCCESS
            ext = {"consumerGroup": "CG_SIGNED", "topic": "SignedT", "queueId": "0",
                   "commitOffset": "5"}  # fmt: skip
            committed = await broker.call(json_request(C.UPDATE_CONSUMER_OFFSET, ext))
            assert committed.code == 0, committed.remark  # signed: the proxy took it
            del ext["commitOffset"]
            answer = await broker.call(json_request(C.QUERY_CONSUMER_OFFSET, ext))
            assert answer.code == 0 and answer.ext == {"offset": "5"}
            async with grpc.aio.insecure_channel(serve.proxy) as channel:  # unsigned: refused
                stub = groups_pb2_grpc.ConsumerGroupsStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.QueryOffset(groups_pb2.QueryOffsetRequest(
                        group="CG_SIGNED", topic="SignedT", queue_id=0))  # fmt: skip
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED

        run(Served(serve), test)
    finally:
        serve.stop()


def test_pull_header_read_at_once_or_field_by_field():
    ext = {"consumerGroup": "G", "topic": "T", "queueId": "3", "queueOffset": "64",
           "maxMsgNums": "32", "sysFlag": "6", "commitOffset": "-1", "subVersion": "0",
           "suspendTimeoutMillis": "15000", "subscription": "a || b"}  # fmt: skip
    req = R.Command(code=C.PULL_MESSAGE, ext=ext)
    h = pull.parse_header(req)
    assert h == pull._checked_header(req)
    assert (h.queue_id, h.offset, h.sys_flag, h.commit_offset, h.suspend_s) == (3, 64, 6, -1, 15.0)
    assert (h.subscription, h.expression_type) == ("a || b", "TAG")
    bare = {k: ext[k] for k in ("consumerGroup", "topic", "queueId", "queueOffset")}
    assert pull.parse_header(R.Command(code=C.PULL_MESSAGE, ext=bare)) == pull.PullHeader(
        "G", "T", 3, 64, 32, 0, 0, 0.0, None, "TAG")  # fmt: skip
    for missing, text in (("queueOffset", "<queueOffset> is null"),
                          ("topic", "<consumerGroup> or <topic> is null")):  # fmt: skip
        with pytest.raises(ValueError, match=text):
            pull.parse_header(R.Command(code=C.PULL_MESSAGE, ext={
                k: v for k, v in ext.items() if k != missing}))  # fmt: skip
    with pytest.raises(ValueError, match="<sysFlag> is not a number: x"):
        pull.parse_header(R.Command(code=C.PULL_MESSAGE, ext={**ext, "sysFlag": "x"}))
    with pytest.raises(ValueError, match="<consumerGroup> or <topic> is null"):
        pull.parse_header(R.Command(code=C.PULL_MESSAGE))


def _builder_pid(served: Served) -> int:
    """The consume-queue builder's process under ``served``'s ``rmqstore serve``."""
    for child in procs.children(served.serve.proc.pid):
        argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        if b"services.indexer" in argv and b"consume-queue" in argv:
            return child
    raise AssertionError("no consume-queue builder under serve")


def test_held_pull_answered_from_the_writers_stream_before_the_queue_is_built(served: Served):
    """With the consume-queue builder stopped, a held pull woken by a send takes the record
    from the units the writer's dispatch stream carried; a pull at the stored end, beyond
    what the queue's file holds, is "not found" (never "offset moved")."""
    builder = _builder_pid(served)
    files = QueueFiles(served.serve.store)

    async def held(broker: Wire, offset: int, opaque: int, body: bytes) -> R.Command:
        # the pull first: held (one connection's requests are taken in order), then woken
        broker.writer.write(_pull("CG9", "TailT", 1, offset, opaque=opaque, sys_flag=6,
                                  suspend_ms=30000))  # fmt: skip
        broker.writer.write(_send("TailT", 1, "t", opaque + 1, body))
        answers = {}
        for _ in range(2):
            _, frame = await read_frame(broker.reader)
            answers[frame.opaque] = frame
        assert answers[opaque + 1].code == RC.SUCCESS
        return answers[opaque]

    async def test(broker: Wire) -> None:
        await _sent(broker, "TailT", 1, ["a"])
        await _found(broker, _pull("CG9", "TailT", 1, 0), 1)
        first = await held(broker, 1, 20, b"b")  # opens the stream (it stays open 60 s)
        assert first.code == RC.SUCCESS and [r.body for r in _records(first.body)] == [b"b"]
        os.kill(builder, signal.SIGSTOP)
        try:
            procs.wait_stopped(builder)
            answer = await held(broker, 2, 30, b"c")
            assert answer.code == RC.SUCCESS, answer.remark
            assert [r.body for r in _records(answer.body)] == [b"c"]
            assert _offsets(answer)[1:] == (3, 0, 3)
            assert not files.written("TailT", 1, 2)  # not from the file: the builder is stopped
            at_end = await broker.call(_pull("CG9", "TailT", 1, 3))  # no suspend flag
            assert at_end.code == RC.PULL_NOT_FOUND and _offsets(at_end)[1] == 3
            again = await broker.call(_pull("CG9", "TailT", 1, 2))  # the file still ends at 2
            assert again.code == RC.SUCCESS and [r.body for r in _records(again.body)] == [b"c"]
        finally:
            os.kill(builder, signal.SIGCONT)
        built = await _found(broker, _pull("CG9", "TailT", 1, 2), 3)  # and from the file
        assert [r.body for r in _records(built.body)] == [b"c"]

    run(served, test)
