"""Hostile input on every gRPC method of every service: a precise status, nothing written,
and the service keeps serving (a good call right after each bad one).

One store node (writer, both builders, query service) serves the whole module; it holds a
few good messages so reads have something to find. Requests that cannot even be decoded
(garbage bytes) are sent to every method with a raw channel.
"""

import grpc
import pytest

from rmqstore.v1 import commitlog_pb2, common_pb2, indexer_pb2, query_pb2
from tests.reliability.cluster import Cluster, fresh_channel

pytestmark = pytest.mark.integration
C = grpc.StatusCode
TOPIC = "Hostile"
P = common_pb2.Property


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    cluster = Cluster(root / "store").start_all()
    msgs = [common_pb2.Message(topic=TOPIC, queue_id=i % 2, body=b"good %d" % i, tags="TagA",
                               keys=f"good-{i} shared") for i in range(6)]
    good = cluster.writer.PutBatch(commitlog_pb2.PutBatchRequest(messages=msgs),
                                   timeout=10).results
    cluster.wait_caught_up()
    yield cluster, list(good)
    cluster.stop_all()


def files(root) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def msg(**kw) -> common_pb2.Message:
    base = dict(topic=TOPIC, queue_id=0, body=b"x", tags="TagA", keys="k")
    base.update(kw)
    return common_pb2.Message(**base)


BAD_MESSAGES = [
    ("body over the limit", dict(body=b"x" * (4 * 1024 * 1024 + 1)), "limit is 4194304"),
    ("properties over 32767", dict(properties=[P(name="p", value="v" * 33000)]), "32767"),
    ("many properties", dict(properties=[P(name=f"p{i}", value="v" * 40) for i in range(900)]),
     "32767"),
    ("topic ../x", dict(topic="../x"), "outside"),
    ("topic a/b", dict(topic="a/b"), "outside"),
    ("topic .", dict(topic="."), "outside"),
    ("empty topic", dict(topic=""), "topic is empty"),
    ("topic of 128 characters", dict(topic="T" * 128), "128 characters"),
    ("topic of 10,000 characters", dict(topic="T" * 10_000), "10000 characters"),
    ("topic with NUL", dict(topic="a\x00b"), "outside"),
    ("topic with newline", dict(topic="a\nb"), "outside"),
    ("topic with escape", dict(topic="a\x1b[2Jb"), "outside"),
    ("non-ASCII topic", dict(topic="t\u00f6pic"), "outside"),
    ("negative queue id", dict(queue_id=-1), "queue id -1"),
    ("huge queue id", dict(queue_id=2**31 - 1), "queue id 2147483647"),
    ("separator \\x01 in keys", dict(keys="a\x01b"), "separator"),
    ("separator \\x02 in keys", dict(keys="a\x02b"), "separator"),
    ("separator in tags", dict(tags="t\x02"), "separator"),
    ("separator in unique key", dict(unique_key="u\x01"), "separator"),
    ("separator in property name", dict(properties=[P(name="a\x02b", value="v")]), "separator"),
    ("separator in property value", dict(properties=[P(name="a", value="\x01")]), "separator"),
    ("property named KEYS", dict(properties=[P(name="KEYS", value="x")]), "own field"),
    ("property named UNIQ_KEY", dict(properties=[P(name="UNIQ_KEY", value="x")]), "own field"),
    ("empty property name", dict(properties=[P(name="", value="v")]), "empty"),
    ("writer-owned sys flag bits", dict(sys_flag=0x30), "sys flag"),
    ("negative sys flag", dict(sys_flag=-1), "sys flag"),
    ("negative delay level", dict(delay_level=-5), "delay level"),
    ("born host without port", dict(born_host="10.0.0.1"), "ip:port"),
    ("born host port too large", dict(born_host="10.0.0.1:70000"), "70000"),
    ("born host garbage", dict(born_host="../../etc/passwd"), ""),
    ("reserved topic", dict(topic="SCHEDULE_TOPIC_XXXX"), "reserved"),
]


# Wrong answers found by this suite and reported; each must flip to right once fixed (then
# remove it here, like a strict xfail).
KNOWN_BUGS: dict[str, str] = {}


def _code(call) -> tuple[grpc.StatusCode, str]:
    try:
        call()
    except grpc.RpcError as e:
        return e.code(), e.details() or ""
    return C.OK, ""


def _check(outcomes: list[str], case: str, call, code: grpc.StatusCode, text: str,
           alive) -> None:
    got, details = _code(call)
    ok = got == code and text in details
    alive_ok = _code(alive)[0] == C.OK
    mark = "ok " if ok and alive_ok else "BAD"
    if case in KNOWN_BUGS and alive_ok:
        mark = "FIXED (remove from KNOWN_BUGS)" if ok else "KNOWN BUG"
    line = f"{mark} {case}: {got.name} {details[:90]!r}"
    if not alive_ok:
        line += " (service stopped serving)"
    if not ok:
        line += f" (want {code.name} {text!r})"
    print(line)
    outcomes.append(line)


@pytest.mark.parametrize("method", ["Put", "PutBatch"])
def test_writer_puts_refuse_bad_messages(node, method):
    cluster, good = node
    w = cluster.writer
    root = cluster.store.parent
    before, end = files(root), cluster.offsets().max_offset
    outcomes: list[str] = []

    def alive():
        return w.ReadRecords(commitlog_pb2.ReadRecordsRequest(offsets=[good[0].phy_offset]),
                             timeout=5)

    for case, fields, text in BAD_MESSAGES:
        if method == "Put":
            def call(f=fields):
                return w.Put(commitlog_pb2.PutRequest(message=msg(**f)), timeout=10)
        else:  # the bad message comes last: the good ones before it are not written either
            def call(f=fields):
                return w.PutBatch(commitlog_pb2.PutBatchRequest(
                    messages=[msg(keys="ok1"), msg(keys="ok2"), msg(**f)]), timeout=10)
        _check(outcomes, case, call, C.INVALID_ARGUMENT, text, alive)
    assert cluster.offsets().max_offset == end
    assert files(root) - before == set()
    bad = [o for o in outcomes if o.startswith(("BAD", "FIXED"))]
    print(f"{method}: {len(BAD_MESSAGES)} hostile messages, {len(bad)} wrong answers, "
          f"commitlog end unchanged at {end}, no new files")
    assert not bad, "\n".join(bad)


def test_writer_reads_subscriptions_and_acks(node):
    cluster, good = node
    w = cluster.writer
    end = cluster.offsets().max_offset
    mid = good[1].phy_offset + 5
    outcomes: list[str] = []

    def alive():
        return w.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=5)

    def read(offsets):
        return lambda: w.ReadRecords(commitlog_pb2.ReadRecordsRequest(offsets=offsets),
                                     timeout=10)

    def first_batch(**kw):
        def call():
            stream = w.Subscribe(commitlog_pb2.SubscribeRequest(**kw), timeout=5)
            try:
                return next(iter(stream))
            finally:
                stream.cancel()
        return call

    def ack(**kw):
        return lambda: w.Ack(commitlog_pb2.AckRequest(**kw), timeout=5)

    cases = [
        ("read negative offset", read([-1]), C.OUT_OF_RANGE, "-1"),
        ("read huge offset", read([2**63 - 1]), C.OUT_OF_RANGE, str(2**63 - 1)),
        ("read at the end", read([end]), C.OUT_OF_RANGE, str(end)),
        ("read mid-record", read([mid]), C.INVALID_ARGUMENT, "does not start a record"),
        ("read good then bad", read([good[0].phy_offset, mid]), C.INVALID_ARGUMENT,
         "does not start a record"),
        ("read 500,000 copies of one record (over the 64 MiB answer limit)",
         read([good[5].phy_offset] * 500_000), C.RESOURCE_EXHAUSTED, ""),
        ("subscribe without a name", first_batch(subscriber="", from_offset=0),
         C.INVALID_ARGUMENT, "subscriber"),
        ("subscribe from -1", first_batch(subscriber="h", from_offset=-1), C.OUT_OF_RANGE, "-1"),
        ("subscribe from a huge offset", first_batch(subscriber="h", from_offset=2**62),
         C.OUT_OF_RANGE, str(2**62)),
        ("subscribe mid-record", first_batch(subscriber="h", from_offset=mid),
         C.OUT_OF_RANGE, str(mid)),
        ("subscribe with a negative batch size",
         first_batch(subscriber="h", from_offset=0, max_batch_records=-1),
         C.INVALID_ARGUMENT, "-1"),
        ("subscribe with a name of control characters",
         first_batch(subscriber="a\x00\n\x1b", from_offset=0), C.INVALID_ARGUMENT, "subscriber"),
        ("subscribe with a 100,000-character name",
         first_batch(subscriber="n" * 100_000, from_offset=0), C.INVALID_ARGUMENT, "subscriber"),
        ("ack a negative offset", ack(subscriber="h", durable_offset=-1), C.OUT_OF_RANGE, "-1"),
        ("ack past the end", ack(subscriber="h", durable_offset=end + 1), C.OUT_OF_RANGE,
         str(end + 1)),
        ("ack without a name", ack(subscriber="", durable_offset=0), C.INVALID_ARGUMENT,
         "subscriber"),
        ("ack with a 100,000-character name", ack(subscriber="n" * 100_000, durable_offset=0),
         C.INVALID_ARGUMENT, "subscriber"),
    ]
    for case, call, code, text in cases:
        _check(outcomes, case, call, code, text, alive)
    assert cluster.offsets().max_offset == end
    bad = [o for o in outcomes if o.startswith(("BAD", "FIXED"))]
    print(f"writer reads/subscribe/ack: {len(cases)} hostile requests, {len(bad)} wrong answers")
    assert not bad, "\n".join(bad)


def test_query_methods(node):
    cluster, good = node
    q = cluster.query
    g = good[0]
    outcomes: list[str] = []

    def alive():
        r = q.QueryById(query_pb2.QueryByIdRequest(id=g.msg_id), timeout=5)
        assert len(r.messages) == 1 and r.messages[0].body == b"good 0"
        return r

    def by_key(**kw):
        kw.setdefault("topic", TOPIC)
        kw.setdefault("key", "shared")
        return lambda: q.QueryByKey(query_pb2.QueryByKeyRequest(**kw), timeout=10)

    def by_id(**kw):
        return lambda: q.QueryById(query_pb2.QueryByIdRequest(**kw), timeout=10)

    def pull(**kw):
        kw.setdefault("topic", TOPIC)
        return lambda: q.Pull(query_pb2.PullRequest(**kw), timeout=10)

    def by_time(**kw):
        kw.setdefault("topic", TOPIC)
        return lambda: q.OffsetByTime(query_pb2.OffsetByTimeRequest(**kw), timeout=10)

    def offsets(**kw):
        kw.setdefault("topic", TOPIC)
        return lambda: q.QueueOffsets(query_pb2.QueueOffsetsRequest(**kw), timeout=10)

    topics = [("../x", "outside"), ("a/b", "outside"), ("", "empty"),
              ("T" * 128, "128 characters"), ("a\x00b", "outside"), ("a\nb", "outside")]
    cases = []
    for t, text in topics:
        for name, fn in (("QueryByKey", by_key), ("Pull", pull), ("OffsetByTime", by_time),
                         ("QueueOffsets", offsets)):
            cases.append((f"{name} topic {t[:12]!r}", fn(topic=t), C.INVALID_ARGUMENT, text))
        if t:
            cases.append((f"QueryById topic {t[:12]!r}", by_id(id=g.msg_id, topic=t),
                          C.INVALID_ARGUMENT, text))
    cases += [
        ("QueryByKey unknown topic", by_key(topic="NoSuchTopic"), C.NOT_FOUND, "NoSuchTopic"),
        ("QueryByKey begin > end", by_key(begin_timestamp=10, end_timestamp=5),
         C.INVALID_ARGUMENT, "after end"),
        ("QueryByKey negative begin", by_key(begin_timestamp=-1), C.INVALID_ARGUMENT, "-1"),
        ("QueryByKey negative limit", by_key(max_results=-1), C.INVALID_ARGUMENT, "-1"),
        ("QueryByKey garbage cursor", by_key(cursor="!!not a cursor!!"), C.INVALID_ARGUMENT,
         "cursor"),
        ("QueryByKey base64 cursor of the wrong length", by_key(cursor="QUJDRA"),
         C.INVALID_ARGUMENT, "cursor"),
        ("QueryByKey 1 MB cursor", by_key(cursor="A" * 1_000_000), C.INVALID_ARGUMENT,
         "cursor"),
        ("QueryByKey huge limit", by_key(max_results=2**31 - 1), C.OK, ""),
        ("QueryByKey separator in key", by_key(key="a\x01b"), C.OK, ""),
        ("QueryByKey 1 MB key", by_key(key="k" * 1_000_000), C.INVALID_ARGUMENT, "32767"),
        ("QueryById empty", by_id(id=""), C.INVALID_ARGUMENT, "hexadecimal"),
        ("QueryById not hex", by_id(id="Z" * 32), C.INVALID_ARGUMENT, "hexadecimal"),
        ("QueryById 31 hex digits", by_id(id="A" * 31), C.INVALID_ARGUMENT, "hexadecimal"),
        ("QueryById 33 hex digits", by_id(id="A" * 33), C.INVALID_ARGUMENT, "hexadecimal"),
        ("QueryById path", by_id(id="../../../../etc/passwd"), C.INVALID_ARGUMENT,
         "hexadecimal"),
        ("QueryById 1 MB id", by_id(id="A" * 1_000_000), C.INVALID_ARGUMENT, "hexadecimal"),
        ("QueryById offset id past the end", by_id(id=g.msg_id[:16] + "7" + "F" * 15), C.OK,
         ""),
        ("Pull negative queue", pull(queue_id=-1), C.INVALID_ARGUMENT, "-1"),
        ("Pull negative offset", pull(offset=-1), C.INVALID_ARGUMENT, "-1"),
        ("Pull negative max", pull(max_messages=-1), C.INVALID_ARGUMENT, "-1"),
        ("Pull huge queue", pull(queue_id=2**31 - 1), C.OK, ""),
        ("Pull huge offset", pull(offset=2**63 - 1), C.OK, ""),
        ("Pull huge max", pull(max_messages=2**31 - 1), C.OK, ""),
        ("Pull odd tag expression", pull(tag_expression="||\x00|| ||"), C.OK, ""),
        ("OffsetByTime negative queue", by_time(queue_id=-1), C.INVALID_ARGUMENT, "-1"),
        ("OffsetByTime unknown boundary", by_time(boundary=7), C.INVALID_ARGUMENT, "7"),
        ("OffsetByTime huge time", by_time(timestamp=2**63 - 1), C.OK, ""),
        ("OffsetByTime negative time", by_time(timestamp=-(2**63)), C.OK, ""),
        ("QueueOffsets negative queue", offsets(queue_id=-1), C.INVALID_ARGUMENT, "-1"),
        ("QueueOffsets huge queue", offsets(queue_id=2**31 - 1), C.NOT_FOUND, "2147483647"),
    ]
    for case, call, code, text in cases:
        _check(outcomes, case, call, code, text, alive)
    bad = [o for o in outcomes if o.startswith(("BAD", "FIXED"))]
    print(f"query: {len(cases)} hostile requests, {len(bad)} wrong answers")
    assert not bad, "\n".join(bad)


METHODS = [
    ("writer", "/rmqstore.v1.CommitLog/Put"), ("writer", "/rmqstore.v1.CommitLog/PutBatch"),
    ("writer", "/rmqstore.v1.CommitLog/ReadRecords"),
    ("writer", "/rmqstore.v1.CommitLog/GetOffsets"), ("writer", "/rmqstore.v1.CommitLog/Ack"),
    ("consume-queue", "/rmqstore.v1.Builder/GetProgress"),
    ("index", "/rmqstore.v1.Builder/GetProgress"),
    ("query", "/rmqstore.v1.Query/QueryByKey"), ("query", "/rmqstore.v1.Query/QueryById"),
    ("query", "/rmqstore.v1.Query/Pull"), ("query", "/rmqstore.v1.Query/OffsetByTime"),
    ("query", "/rmqstore.v1.Query/QueueOffsets"),
]


def test_undecodable_requests_on_every_method(node):
    """Bytes that are not a protobuf message: refused by gRPC itself, nothing else happens."""
    cluster, _good = node
    end = cluster.offsets().max_offset
    garbage = b"\xff\xff\xff\xff\x0f" + bytes(range(256))
    wrong = []
    streams = [("writer", f"/rmqstore.v1.CommitLog/{m}Stream") for m in ("Put", "ReadRecords")]
    for service, path in [*METHODS, ("writer", "/rmqstore.v1.CommitLog/Subscribe"), *streams]:
        with fresh_channel(cluster.procs[service].address) as ch:
            if path.endswith("Subscribe"):
                stream = ch.unary_stream(path)  # bytes in, bytes out

                def invoke(c=stream):
                    return list(c(garbage, timeout=5))
            elif path.endswith("Stream"):
                both = ch.stream_stream(path)

                def invoke(c=both):
                    return list(c(iter([garbage]), timeout=5))
            else:
                unary = ch.unary_unary(path)

                def invoke(c=unary):
                    return c(garbage, timeout=5)
            code, details = _code(invoke)
        ok = code == C.INTERNAL
        print(f"{'ok ' if ok else 'BAD'} garbage to {path}: {code.name} {details!r}")
        if not ok:
            wrong.append(path)
    assert cluster.offsets().max_offset == end
    assert cluster.progress("consume-queue").durable_offset == end
    assert cluster.progress("index").durable_offset == end
    assert cluster.query.QueueOffsets(query_pb2.QueueOffsetsRequest(topic=TOPIC, queue_id=0),
                                      timeout=5).max_offset == 3
    # unknown fields are ignored, as protobuf wants: GetProgress still answers
    with fresh_channel(cluster.procs["index"].address) as ch:
        raw = ch.unary_unary("/rmqstore.v1.Builder/GetProgress")(b"\x08\x01\x12\x03abc",
                                                                   timeout=5)
    assert indexer_pb2.Progress.FromString(raw).durable_offset == end
    assert not wrong, wrong
