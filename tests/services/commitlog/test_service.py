"""The writer as a real process over gRPC: puts, reads, bad input, locking, crashes."""

import contextlib
import os
import queue
import signal
import socket
import stat
import threading
import time

import grpc
import pytest

from rmqstore import put_socket
from rmqstore.formats import commitlog
from rmqstore.server import MAX_MESSAGE_BYTES, UNDECODABLE, channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from services.commitlog.servicer import MAX_PUT_STREAMS
from tests import procs

pytestmark = pytest.mark.integration
SEGMENT = 1 << 20


def _start(store, *extra):
    return procs.start(
        "services.commitlog",
        "--store",
        str(store),
        "--listen",
        "127.0.0.1:0",
        "--commitlog-segment-size",
        str(SEGMENT),
        *extra,
    )


@pytest.fixture
def writer(tmp_path):
    p = _start(tmp_path / "store")
    yield p
    p.stop()


def _stub(p):
    return commitlog_pb2_grpc.CommitLogStub(channel(p.address))


def _msg(i=0, **kw):
    base = dict(
        topic="Orders",
        queue_id=i % 4,
        body=f"body-{i}".encode(),
        tags="TagA",
        keys=f"order-{i} customer-{i % 7}",
    )
    base.update(kw)
    return common_pb2.Message(**base)


def test_put_read_and_offsets(writer):
    stub = _stub(writer)
    r = stub.Put(commitlog_pb2.PutRequest(message=_msg(0)))
    batch = stub.PutBatch(commitlog_pb2.PutBatchRequest(messages=[_msg(i) for i in range(1, 50)]))
    results = [r, *batch.results]
    assert [x.phy_offset for x in results] == sorted(x.phy_offset for x in results)
    per_queue = {}
    for x in results:
        per_queue.setdefault(x.queue_id, []).append(x.queue_offset)
    assert all(v == list(range(len(v))) for v in per_queue.values())
    recs = stub.ReadRecords(
        commitlog_pb2.ReadRecordsRequest(offsets=[x.phy_offset for x in results])
    ).records
    for i, (raw, x) in enumerate(zip(recs, results, strict=True)):
        rec = commitlog.decode(raw)
        assert rec.body == f"body-{i}".encode() and rec.keys == f"order-{i} customer-{i % 7}"
        assert rec.uniq_key == x.unique_key and len(x.unique_key) == 32
        assert rec.physical_offset == x.phy_offset and rec.store_timestamp == x.store_timestamp
    off = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest())
    assert off.min_offset == 0 and off.max_offset == results[-1].phy_offset + results[-1].size


BAD = [
    ("empty topic", dict(topic=""), "topic is empty"),
    ("path topic", dict(topic="../x"), "outside"),
    ("slash topic", dict(topic="a/b"), "outside"),
    ("control char", dict(topic="a\nb"), "outside"),
    ("trailing newline", dict(topic="Orders\n"), "outside"),  # `$` matched before the \n
    ("long topic", dict(topic="T" * 128), "128 characters"),
    ("reserved topic", dict(topic="SCHEDULE_TOPIC_XXXX"), "reserved"),
    ("negative queue", dict(queue_id=-1), "queue id -1"),
    ("queue too big", dict(queue_id=8), "queue id 8"),
    ("separator in keys", dict(keys="a\x01b"), "separator"),
    ("separator in tags", dict(tags="a\x02"), "separator"),
    (
        "separator in property",
        dict(properties=[common_pb2.Property(name="p", value="\x01")]),
        "separator",
    ),
    (
        "reserved property",
        dict(properties=[common_pb2.Property(name="KEYS", value="x")]),
        "own field",
    ),
    ("empty property value", dict(properties=[common_pb2.Property(name="p", value="")]), "empty"),
    (
        "huge properties",
        dict(properties=[common_pb2.Property(name="p", value="v" * 40000)]),
        "32767",
    ),
    ("body too large", dict(body=b"x" * (4 * 1024 * 1024 + 1)), "limit is 4194304"),
    ("writer-owned sys flag", dict(sys_flag=0x10), "sys flag"),
    ("negative delay", dict(delay_level=-1), "delay level"),
    ("bad born host", dict(born_host="nohost"), "ip:port"),
]


@pytest.mark.parametrize(("case", "fields", "text"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_refused_and_nothing_written(writer, case, fields, text):
    stub = _stub(writer)
    before = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset
    with pytest.raises(grpc.RpcError) as err:
        # the bad message comes second: the good first one must not be written either
        stub.PutBatch(commitlog_pb2.PutBatchRequest(messages=[_msg(1), _msg(2, **fields)]))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, case
    assert text in err.value.details()
    assert stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset == before
    assert stub.Put(commitlog_pb2.PutRequest(message=_msg(3))).phy_offset == before


def test_columnar_results_answer_the_same_facts(writer):
    stub = _stub(writer)
    rows = stub.PutBatch(commitlog_pb2.PutBatchRequest(messages=[_msg(i) for i in range(5)]))
    msgs = [_msg(i, delay_level=2 if i == 8 else 0) for i in range(5, 10)]
    col = stub.PutBatch(
        commitlog_pb2.PutBatchRequest(messages=msgs, columnar_results=True)
    ).columns
    assert not rows.columns.phy_offset and len(rows.results) == 5
    assert col.phy_offset[0] == rows.results[-1].phy_offset + rows.results[-1].size
    assert list(col.queue_offset) == [1, 1, 1, 0, 2]  # the delayed one went to its own queue
    assert col.topic[3] == "SCHEDULE_TOPIC_XXXX" and col.queue_id[3] == 1
    recs = stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(offsets=col.phy_offset)).records
    for i, raw in enumerate(recs):
        rec = commitlog.decode(raw)
        assert (rec.physical_offset, rec.queue_offset, rec.total_size) == (
            col.phy_offset[i], col.queue_offset[i], col.size[i]
        )
        assert rec.store_timestamp == col.store_timestamp and rec.uniq_key == col.unique_key[i]
        assert col.msg_id[i].endswith(f"{rec.physical_offset:016X}")
        assert (rec.topic, rec.queue_id) == (col.topic[i], col.queue_id[i])


def _cols(first, n, **kw):
    bodies = [f"body-{i}".encode() for i in range(first, first + n)]
    base = dict(
        topic="Orders",
        body_size=[len(b) for b in bodies],
        bodies=b"".join(bodies),
        queue_id=[i % 4 for i in range(first, first + n)],
        tags=["TagA"],
        keys=[f"order-{i} customer-{i % 7}" for i in range(first, first + n)],
    )
    base.update(kw)
    return commitlog_pb2.MessageColumns(**base)


def test_columns_store_what_messages_store(writer):
    """A batch sent as columns is stored as the same messages sent one by one would be."""
    stub = _stub(writer)
    as_messages = stub.PutBatch(commitlog_pb2.PutBatchRequest(messages=[_msg(i) for i in range(6)]))
    as_columns = stub.PutBatch(
        commitlog_pb2.PutBatchRequest(columns=_cols(0, 6), columnar_results=True)
    ).columns
    assert list(as_columns.queue_offset) == [2, 2, 1, 1, 3, 3]  # after the same six
    read = stub.ReadRecords
    for m_result, i in zip(as_messages.results, range(6), strict=True):
        one = commitlog.decode(
            read(commitlog_pb2.ReadRecordsRequest(offsets=[m_result.phy_offset])).records[0]
        )
        col = commitlog.decode(
            read(commitlog_pb2.ReadRecordsRequest(offsets=[as_columns.phy_offset[i]])).records[0]
        )
        assert col.total_size == as_columns.size[i] and col.uniq_key == as_columns.unique_key[i]
        for field in ("topic", "queue_id", "body", "tags", "keys", "sys_flag", "flag"):
            assert getattr(col, field) == getattr(one, field), field
        assert col.properties.replace(col.uniq_key, "") == one.properties.replace(one.uniq_key, "")


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        (dict(queue_id=[0, 9]), "queue id 9"),
        (dict(keys=["a", "b", "c"]), "columns.keys has 3 entries for 2 messages"),
        (dict(bodies=b"short"), "body_size adds up to"),
        (dict(topic="a/b"), "topic"),
    ],
)
def test_bad_columns_are_refused_and_nothing_written(writer, fields, text):
    stub = _stub(writer)
    before = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset
    with pytest.raises(grpc.RpcError) as err:
        stub.PutBatch(commitlog_pb2.PutBatchRequest(columns=_cols(0, 2, **fields)))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert text in err.value.details()
    both = commitlog_pb2.PutBatchRequest(messages=[_msg(1)], columns=_cols(0, 2))
    with pytest.raises(grpc.RpcError) as err:
        stub.PutBatch(both)
    assert "messages or columns, not both" in err.value.details()
    assert stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset == before


class _SocketPuts:
    """``PutStream`` over the writer's put socket, as a stub would call it."""

    def __init__(self, stub, path):
        self.stub, self.path = stub, path

    def __getattr__(self, name):
        return getattr(self.stub, name)

    def PutStream(self, requests):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(self.path)
            sent = 0
            for r in requests:
                s.sendall(put_socket.frame(r.SerializeToString()))
                sent += 1
            f = s.makefile("rb")
            return [commitlog_pb2.PutStreamReply.FromString(_frame(f)) for _ in range(sent)]


def _frame(f):
    (size,) = put_socket.HEADER.unpack(f.read(put_socket.HEADER.size))
    return f.read(size)


@pytest.mark.parametrize(("flush", "over"), [("async", "grpc"), ("sync", "grpc"),
                                             ("async", "socket"), ("sync", "socket")])
def test_put_stream_answers_each_batch_and_survives_refusals(tmp_path, flush, over):
    """All batches are sent at once (under sync flush they are appended ahead of their
    acknowledgements); answers come in order and a refusal writes nothing; the same over the
    put socket."""
    path = str(tmp_path / "w.sock")
    writer = _start(tmp_path / "store", "--flush", flush, "--put-socket", path)
    try:
        stub = _stub(writer)
        _put_stream_case(stub if over == "grpc" else _SocketPuts(stub, path))
    finally:
        writer.stop()
    assert not os.path.exists(path)  # removed at the stop


def test_put_socket_refuses_bytes_that_do_not_parse(tmp_path):
    path = str(tmp_path / "w.sock")
    writer = _start(tmp_path / "store", "--put-socket", path)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        before = _stub(writer).GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(path)
            s.sendall(put_socket.frame(b"\xff\xff\xff"))
            f = s.makefile("rb")
            reply = commitlog_pb2.PutStreamReply.FromString(_frame(f))
            assert reply.status_code == grpc.StatusCode.INTERNAL.value[0]
            assert reply.error == UNDECODABLE
            assert f.read() == b""  # then closed
        assert _stub(writer).GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset == before
    finally:
        writer.stop()


def _socket(path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return s


def test_put_socket_answers_what_came_before_a_bad_frame_then_closes(tmp_path):
    path = str(tmp_path / "w.sock")
    writer = _start(tmp_path / "store", "--put-socket", path)
    try:
        stub = _stub(writer)
        before = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset
        good = commitlog_pb2.PutBatchRequest(messages=[_msg(1)], columnar_results=True)
        with _socket(path) as s:  # a good request, then a frame over the limit, in one write
            s.sendall(put_socket.frame(good.SerializeToString())
                      + put_socket.HEADER.pack(MAX_MESSAGE_BYTES + 1) + b"x" * 100)  # fmt: skip
            f = s.makefile("rb")
            first = commitlog_pb2.PutStreamReply.FromString(_frame(f))
            assert not first.status_code and len(first.response.columns.phy_offset) == 1
            refusal = commitlog_pb2.PutStreamReply.FromString(_frame(f))
            assert refusal.status_code == grpc.StatusCode.INTERNAL.value[0]
            assert "over the" in refusal.error
            assert f.read() == b""  # then closed
        after = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset
        assert after > before  # the good one, and nothing of the bad frame
        assert _read_one(stub, before).body == _msg(1).body
    finally:
        writer.stop()


def test_put_socket_refuses_a_stream_over_the_limit_and_serves_again_once_one_ends(tmp_path):
    path = str(tmp_path / "w.sock")
    writer = _start(tmp_path / "store", "--put-socket", path)
    request = put_socket.frame(
        commitlog_pb2.PutBatchRequest(messages=[_msg(2)]).SerializeToString()
    )
    conns = [_socket(path) for _ in range(MAX_PUT_STREAMS)]
    try:
        for s in conns:  # each answered: every one is open and counted
            s.sendall(request)
            assert not commitlog_pb2.PutStreamReply.FromString(_frame(s.makefile("rb"))).status_code
        with _socket(path) as extra:
            f = extra.makefile("rb")
            refusal = commitlog_pb2.PutStreamReply.FromString(_frame(f))
            assert refusal.status_code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
            assert f"{MAX_PUT_STREAMS} put streams are open already" in refusal.error
            assert f.read() == b""
        conns.pop().close()
        deadline = time.monotonic() + 10
        while True:  # the writer sees the close a moment later
            with _socket(path) as again:
                again.sendall(request)
                reply = commitlog_pb2.PutStreamReply.FromString(_frame(again.makefile("rb")))
            if not reply.status_code or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert not reply.status_code, reply.error
    finally:
        for s in conns:
            s.close()
        writer.stop()


def test_put_socket_under_sync_flush_answers_many_requests_sent_at_once_in_order(tmp_path):
    """More requests than are appended ahead of their group commit (reading pauses, then
    goes on): every one answered, in order, at growing offsets."""
    path = str(tmp_path / "w.sock")
    writer = _start(tmp_path / "store", "--flush", "sync", "--put-socket", path)
    n = put_socket.AHEAD * 3
    try:
        frames = [
            put_socket.frame(commitlog_pb2.PutBatchRequest(
                messages=[_msg(i)], columnar_results=True).SerializeToString())
            for i in range(n)
        ]  # fmt: skip
        with _socket(path) as s:
            for part in range(3):  # the later parts arrive while reading may be paused
                s.sendall(b"".join(frames[part * n // 3 : (part + 1) * n // 3]))
                time.sleep(0.05)
            s.settimeout(30)
            f = s.makefile("rb")
            replies = [commitlog_pb2.PutStreamReply.FromString(_frame(f)) for _ in range(n)]
        assert not any(r.status_code for r in replies)
        offsets = [r.response.columns.phy_offset[0] for r in replies]
        assert offsets == sorted(offsets) and len(set(offsets)) == n
        # message i went to queue i % 4: its queue offset says it was appended i-th
        assert [r.response.columns.queue_offset[0] for r in replies] == [i // 4 for i in range(n)]
    finally:
        writer.stop()


def test_put_socket_clients_gone_with_answers_waiting_under_sync_flush(tmp_path):
    """Clients that send many puts and close at once: the writer drops their answers (the
    puts stay appended), logs nothing but its usual lines, and goes on serving."""
    path = str(tmp_path / "w.sock")
    writer = _start(tmp_path / "store", "--flush", "sync", "--put-socket", path)
    request = put_socket.frame(
        commitlog_pb2.PutBatchRequest(messages=[_msg(1)]).SerializeToString())
    try:
        for _ in range(5):
            with _socket(path) as s:
                s.sendall(request * 40)
        with _socket(path) as s:
            s.sendall(request)
            reply = commitlog_pb2.PutStreamReply.FromString(_frame(s.makefile("rb")))
        assert not reply.status_code and len(reply.response.results) == 1
    finally:
        writer.stop()
    assert not [line for line in writer.lines if "Traceback" in line or "Error" in line]


def test_a_stopping_writer_answers_every_put_it_appended_under_sync_flush(tmp_path):
    """SIGTERM while a client streams puts that wait for their group commit: every put the
    writer appended is answered before the connection closes, so what the client was told
    is stored is exactly what the store holds after a restart."""
    path = str(tmp_path / "w.sock")
    writer = _start(tmp_path / "store", "--flush", "sync", "--put-socket", path)
    request = put_socket.frame(commitlog_pb2.PutBatchRequest(
        messages=[_msg(1)], columnar_results=True).SerializeToString())  # fmt: skip
    replies: list = []
    try:
        with _socket(path) as s:

            def send() -> None:  # until the writer closes the connection
                with contextlib.suppress(OSError):
                    while True:
                        s.sendall(request * 8)

            sender = threading.Thread(target=send, daemon=True)
            sender.start()
            s.settimeout(30)
            f = s.makefile("rb")
            while header := f.read(put_socket.HEADER.size):
                (size,) = put_socket.HEADER.unpack(header)
                replies.append(commitlog_pb2.PutStreamReply.FromString(f.read(size)))
                if len(replies) == 200:  # streaming: stop the writer now
                    writer.proc.send_signal(signal.SIGTERM)
            s.shutdown(socket.SHUT_RDWR)  # the end of file: close, as the proxy does
            sender.join(30)
    finally:
        assert writer.stop() == 0
    assert len(replies) >= 200 and not any(r.status_code for r in replies)
    phys = [r.response.columns.phy_offset[0] for r in replies]
    assert phys == [phys[1] * i for i in range(len(phys))]  # from 0, one record size apart
    again = _start(tmp_path / "store")
    try:
        stub = commitlog_pb2_grpc.CommitLogStub(channel(again.address))
        stored = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset // phys[1]
    finally:
        again.stop()
    assert stored == len(replies), f"{stored} stored, {len(replies)} answered"


def _read_one(stub, offset):
    record = stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(offsets=[offset])).records[0]
    return commitlog.decode(record)


def _put_stream_case(stub):
    before = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset
    batches = [
        commitlog_pb2.PutBatchRequest(messages=[_msg(i) for i in range(3)]),
        commitlog_pb2.PutBatchRequest(messages=[_msg(3), _msg(4, queue_id=99)]),  # refused
        commitlog_pb2.PutBatchRequest(messages=[_msg(5)], columnar_results=True),
        commitlog_pb2.PutBatchRequest(columns=_cols(6, 2, queue_id=[1, 100])),  # refused
        commitlog_pb2.PutBatchRequest(columns=_cols(6, 2), columnar_results=True),
        commitlog_pb2.PutBatchRequest(
            messages=[_msg(8)], columnar_results=True, offsets_only=True),
    ]
    replies = list(stub.PutStream(iter(batches)))
    refused = grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert [r.status_code for r in replies] == [0, refused, 0, refused, 0, 0]
    full, bare = replies[4].response.columns, replies[5].response.columns
    assert list(bare.phy_offset) == [full.phy_offset[-1] + full.size[-1]]
    assert list(bare.queue_offset) == [1] and bare.store_timestamp >= full.store_timestamp
    assert not (bare.msg_id or bare.unique_key or bare.size or bare.topic or bare.queue_id)
    assert "queue id 100" in replies[3].error
    fifth = replies[4].response.columns
    assert (
        fifth.phy_offset[0]
        == replies[2].response.columns.phy_offset[0] + replies[2].response.columns.size[0]
    )
    assert list(fifth.queue_offset) == [1, 0]  # queue 2 once before (message 2), queue 3 never
    assert "queue id 99" in replies[1].error and not replies[1].response.results
    first = replies[0].response.results
    assert first[0].phy_offset == before and [r.queue_offset for r in first] == [0, 0, 0]
    third = replies[2].response.columns
    assert third.phy_offset[0] == first[-1].phy_offset + first[-1].size  # nothing of batch 2
    assert list(third.queue_offset) == [1]  # queue 1 again: msg 4 never took an offset
    rec = commitlog.decode(
        stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(offsets=third.phy_offset)).records[0]
    )
    assert rec.body == b"body-5"


def test_reads_and_subscriptions_check_offsets(writer):
    stub = _stub(writer)
    rs = stub.PutBatch(commitlog_pb2.PutBatchRequest(messages=[_msg(i) for i in range(5)])).results
    for bad, code in (
        (rs[1].phy_offset + 3, grpc.StatusCode.INVALID_ARGUMENT),
        (-1, grpc.StatusCode.OUT_OF_RANGE),
        (10**9, grpc.StatusCode.OUT_OF_RANGE),
    ):
        with pytest.raises(grpc.RpcError) as err:
            stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(offsets=[bad]))
        assert err.value.code() == code
        with pytest.raises(grpc.RpcError) as err:
            next(
                iter(
                    stub.Subscribe(commitlog_pb2.SubscribeRequest(subscriber="t", from_offset=bad))
                )
            )
        assert err.value.code() == grpc.StatusCode.OUT_OF_RANGE


def test_read_stream_answers_each_request_and_survives_refusals(writer):
    stub = _stub(writer)
    rs = stub.PutBatch(commitlog_pb2.PutBatchRequest(messages=[_msg(i) for i in range(5)])).results
    requests = [
        [rs[0].phy_offset, rs[4].phy_offset],
        [rs[1].phy_offset + 3],  # not a record start
        [10**9],  # past the end
        [rs[2].phy_offset],
    ]
    replies = list(
        stub.ReadRecordsStream(iter(commitlog_pb2.ReadRecordsRequest(offsets=o) for o in requests))
    )
    assert [r.status_code for r in replies] == [
        0,
        grpc.StatusCode.INVALID_ARGUMENT.value[0],
        grpc.StatusCode.OUT_OF_RANGE.value[0],
        0,
    ]
    assert "does not start a record" in replies[1].error and not replies[1].records
    assert [commitlog.decode(r).physical_offset for r in replies[0].records] == [
        rs[0].phy_offset,
        rs[4].phy_offset,
    ]
    assert commitlog.decode(replies[3].records[0]).body == b"body-2"


def test_read_streams_are_bounded(writer):
    from services.commitlog.servicer import MAX_READ_STREAMS

    stub = _stub(writer)
    (r,) = stub.PutBatch(commitlog_pb2.PutBatchRequest(messages=[_msg(0)])).results
    held = []  # open streams, each waiting for its next request
    try:
        for _ in range(MAX_READ_STREAMS):
            gate = threading.Event()

            def gen(gate=gate):
                yield commitlog_pb2.ReadRecordsRequest(offsets=[r.phy_offset])
                gate.wait(30)

            call = stub.ReadRecordsStream(gen())
            assert next(call).records  # the stream is open and served
            held.append((call, gate))
        extra = stub.ReadRecordsStream(iter([commitlog_pb2.ReadRecordsRequest(offsets=[0])]))
        with pytest.raises(grpc.RpcError) as err:
            next(extra)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "use ReadRecords" in err.value.details()
        assert stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(offsets=[r.phy_offset])).records
    finally:
        for call, gate in held:
            gate.set()
            call.cancel()


def test_subscribe_streams_every_record_in_order(writer):
    stub = _stub(writer)
    sent = []
    for k in range(5):
        sent += stub.PutBatch(
            commitlog_pb2.PutBatchRequest(messages=[_msg(k * 20 + i) for i in range(20)])
        ).results
    stream = stub.Subscribe(
        commitlog_pb2.SubscribeRequest(subscriber="t", from_offset=0, max_batch_records=30)
    )
    got = []
    for batch in stream:
        got += list(
            zip(batch.phy_offset, batch.queue_offset, batch.keys, batch.unique_key, strict=True)
        )
        if batch.next_offset >= sent[-1].phy_offset + sent[-1].size:
            stream.cancel()
            break
    assert got == [
        (r.phy_offset, r.queue_offset, f"order-{i} customer-{i % 7}", r.unique_key)
        for i, r in enumerate(sent)
    ]
    # from the middle: a record boundary that is no longer in a put's first position
    mid = sent[33].phy_offset
    batch = next(
        iter(stub.Subscribe(commitlog_pb2.SubscribeRequest(subscriber="u", from_offset=mid)))
    )
    assert batch.phy_offset[0] == mid
    stub.Ack(commitlog_pb2.AckRequest(subscriber="u", durable_offset=mid))


def test_second_writer_on_the_same_store_is_refused(writer, tmp_path):
    p = procs.ServiceProcess
    with pytest.raises(RuntimeError, match="locked by another writer"):
        _start(tmp_path / "store")
    assert p is not None


@pytest.mark.parametrize("flush", ["sync", "async"])
def test_kill_9_during_puts_keeps_every_acknowledged_record(tmp_path, flush):
    store = tmp_path / "store"
    w = _start(store, "--flush", flush)
    acked: list = []
    columns_acked: list = []
    stop = threading.Event()

    def produce(n):  # producer 1 sends its batches as MessageColumns
        stub = _stub(w)
        i = 0
        while not stop.is_set():
            first = n * 10**6 + i
            if n == 1:
                request = commitlog_pb2.PutBatchRequest(columns=_cols(first, 20))
            else:
                request = commitlog_pb2.PutBatchRequest(
                    messages=[_msg(first + j) for j in range(20)]
                )
            try:
                rs = stub.PutBatch(request, timeout=10)
            except grpc.RpcError:
                return
            acked.extend(rs.results)
            if n == 1:
                columns_acked.extend(rs.results)
            i += 20

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    while len(acked) < 3000:
        threads[0].join(0.01)
    w.kill()
    stop.set()
    for t in threads:
        t.join()
    w2 = _start(store, "--flush", flush)
    try:
        stub = _stub(w2)
        recs = stub.ReadRecords(
            commitlog_pb2.ReadRecordsRequest(offsets=[r.phy_offset for r in acked])
        ).records
        for raw, r in zip(recs, acked, strict=True):
            rec = commitlog.decode(raw)
            assert (rec.uniq_key, rec.queue_offset) == (r.unique_key, r.queue_offset)
        assert columns_acked  # the columns producer's records were among those checked
        # queue offsets continue without gaps after the restart
        nxt = stub.Put(commitlog_pb2.PutRequest(message=_msg(0)))
        same_queue = [r.queue_offset for r in acked if r.queue_id == nxt.queue_id]
        assert nxt.queue_offset >= max(same_queue) + 1
    finally:
        w2.stop()


def test_health_and_reflection(writer):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    ch = channel(writer.address)
    health = health_pb2_grpc.HealthStub(ch)
    for name in ("", "rmqstore.v1.CommitLog"):
        status = health.Check(health_pb2.HealthCheckRequest(service=name)).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(ch)
    resp = next(
        iter(
            refl.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")])
            )
        )
    )
    names = {s.name for s in resp.list_services_response.service}
    assert {"rmqstore.v1.CommitLog", "grpc.health.v1.Health"} <= names


def test_metrics_endpoint(tmp_path):
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    w = _start(tmp_path / "store", "--metrics-port", str(port))
    try:
        stub = _stub(w)
        stub.PutBatch(commitlog_pb2.PutBatchRequest(messages=[_msg(i) for i in range(10)]))
        deadline = time.monotonic() + 10
        text = ""
        while time.monotonic() < deadline:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
            if (
                'rmqstore_writer_puts_total{status="ok",topic="Orders"} 10.0' in text
                and "rmqstore_writer_max_offset_bytes 0.0" not in text
            ):
                break
            time.sleep(0.1)
        assert 'rmqstore_writer_puts_total{status="ok",topic="Orders"} 10.0' in text
        assert "rmqstore_writer_max_offset_bytes 0.0" not in text
        requests: queue.SimpleQueue = queue.SimpleQueue()
        replies = stub.PutStream(iter(requests.get, None))
        requests.put(commitlog_pb2.PutBatchRequest(messages=[_msg(0, queue_id=99)]))
        assert next(replies).status_code  # refused, the stream stays open
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        assert 'rmqstore_writer_streams{kind="put"} 1.0' in text
        assert 'rmqstore_writer_puts_total{status="invalid_argument",topic=""} 1.0' in text
        requests.put(None)
        replies.cancel()
    finally:
        w.stop()
