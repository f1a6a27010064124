"""Property-based fuzzing (hypothesis) of the gRPC put and query paths on one store node.

Put: any message, and any batch sent as MessageColumns, is either stored exactly as sent (read
back and decoded with its CRC) or refused with INVALID_ARGUMENT with nothing written; no
other status, no crash. Query: any
request answers OK or a precise refusal (INVALID_ARGUMENT, NOT_FOUND, OUT_OF_RANGE, or
RESOURCE_EXHAUSTED for the query budget), never UNKNOWN or INTERNAL. After fuzzing, the
writer is SIGKILLed and restarted: recovery must find no corruption and every acknowledged
record must decode. ``make test`` runs 400 batches of messages, 200 columnar batches and 300
queries; the soak 10,000 + 5,000 + 5,000.
"""

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqstore.formats import commitlog
from rmqstore.layout import SCHEDULE_TOPIC
from rmqstore.v1 import commitlog_pb2, common_pb2, query_pb2
from tests.reliability.cluster import Cluster

pytestmark = pytest.mark.integration
C = grpc.StatusCode
TOPICS = ("Fuzz", "Fuzz_2", "a|b%c-d")
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
SEPARATED = st.text(st.sampled_from("ab \x01\x02"), max_size=6)
TEXT = st.one_of(st.text(max_size=40), SEPARATED, st.text("xyz ", min_size=1, max_size=20))


def _settings(n: int):
    return settings(max_examples=n, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.data_too_large])


SAFE = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
              max_size=30)
SAFE_NAME = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)


@st.composite
def good_messages(draw) -> common_pb2.Message:
    """Messages a producer would send: mostly valid, with every optional field exercised."""
    props = draw(st.lists(st.builds(common_pb2.Property, name=SAFE_NAME,
                                    value=SAFE.filter(bool)), max_size=4))
    return common_pb2.Message(
        topic=draw(st.sampled_from(TOPICS)), queue_id=draw(st.integers(0, 7)),
        body=draw(st.one_of(st.binary(max_size=64), st.binary(min_size=1000, max_size=5000))),
        tags=draw(SAFE), keys=draw(SAFE),
        unique_key=draw(st.one_of(st.just(""), SAFE_NAME)),
        properties=props, flag=draw(INT32),
        sys_flag=draw(st.sampled_from((0, 1, 2, 8))),
        born_timestamp=draw(st.one_of(st.just(0), st.integers(0, 2**62))),
        born_host=draw(st.sampled_from(("", "10.1.2.3:80", "[::1]:9876", "1.2.3.4:65535"))),
        delay_level=draw(st.one_of(st.just(0), st.integers(0, 20))),
        reconsume_times=draw(INT32), prepared_transaction_offset=draw(INT64),
        no_wait_store=draw(st.booleans()), without_unique_key=draw(st.booleans()),
    )


@st.composite
def hostile_messages(draw) -> common_pb2.Message:
    props = draw(st.lists(st.builds(common_pb2.Property, name=TEXT, value=TEXT), max_size=4))
    return common_pb2.Message(
        topic=draw(st.one_of(st.sampled_from(TOPICS), st.text(max_size=140))),
        queue_id=draw(st.one_of(st.integers(0, 7), INT32)),
        body=draw(st.one_of(st.binary(max_size=64), st.binary(min_size=1000, max_size=5000))),
        tags=draw(TEXT), keys=draw(TEXT),
        unique_key=draw(st.one_of(st.just(""), TEXT)),
        properties=props,
        flag=draw(INT32),
        sys_flag=draw(st.one_of(st.sampled_from((0, 1, 2, 4, 8, 12)), INT32)),
        born_timestamp=draw(st.one_of(st.just(0), INT64)),
        born_host=draw(st.one_of(st.just(""), st.sampled_from(
            ("10.1.2.3:80", "[::1]:9876", "[fe80::1]:1", "1.2.3.4:65535")), TEXT)),
        delay_level=draw(st.one_of(st.just(0), st.integers(-3, 20))),
        deliver_at_ms=draw(st.one_of(st.just(0), INT64)),
        reconsume_times=draw(INT32),
        prepared_transaction_offset=draw(INT64),
        no_wait_store=draw(st.booleans()),
        without_unique_key=draw(st.booleans()),
    )


@st.composite
def hostile_columns(draw) -> commitlog_pb2.MessageColumns:
    """MessageColumns, mostly consistent, with hostile values and sometimes a broken column."""
    n = draw(st.integers(0, 4))
    sizes = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))

    def column(values, counts=(0, 1, n)):
        return values[: draw(st.sampled_from(counts))]

    c = commitlog_pb2.MessageColumns(
        topic=draw(st.one_of(st.sampled_from(TOPICS), st.sampled_from(TOPICS), TEXT)),
        body_size=sizes,
        bodies=draw(st.binary(min_size=sum(sizes), max_size=sum(sizes))),
        queue_id=column(draw(st.lists(st.one_of(st.integers(0, 7), INT32), min_size=n,
                                      max_size=n)), (1, n)),
        tags=column(draw(st.lists(TEXT, min_size=n, max_size=n))),
        keys=column(draw(st.lists(TEXT, min_size=n, max_size=n))),
        unique_key=column(draw(st.lists(TEXT, min_size=n, max_size=n)), (0, n)),
        born_timestamp=draw(st.one_of(st.just(0), INT64)),
        born_host=draw(st.one_of(st.just(""), st.just("10.0.0.1:9"), TEXT)),
    )
    broken = draw(st.sampled_from([None, None, None, "sizes", "bodies", "queues", "keys"]))
    if broken == "sizes":
        c.body_size.append(draw(INT32))
    elif broken == "bodies":
        c.bodies += b"!"
    elif broken == "queues":
        c.queue_id.extend(draw(st.lists(INT32, min_size=1, max_size=3)))
    elif broken == "keys":
        c.keys.extend(draw(st.lists(TEXT, min_size=n + 1, max_size=n + 3)))
    return c


def _per_message(values, n: int) -> list:
    """A column of n messages as given: one per message, one for all, or none."""
    return list(values) if len(values) == n else [values[0] if values else ""] * n


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    # no delivery: its background appends would move the end a refused put must leave as it was
    cluster = Cluster(tmp_path_factory.mktemp("fuzz") / "store", flush="async",
                      writer_extra=("--no-delivery",)).start_all()
    yield cluster
    cluster.stop_all()


def fuzz_puts(cluster: Cluster, examples: int
              ) -> list[tuple[common_pb2.Message, commitlog_pb2.PutResult]]:
    acked: list[tuple[common_pb2.Message, commitlog_pb2.PutResult]] = []
    refused: dict[str, int] = {}
    w = cluster.writer

    @_settings(examples)
    @given(st.lists(st.one_of(good_messages(), good_messages(), hostile_messages()),
                    min_size=1, max_size=2))
    def put(batch: list[common_pb2.Message]) -> None:
        before = cluster.offsets().max_offset
        try:
            rs = w.PutBatch(commitlog_pb2.PutBatchRequest(messages=batch), timeout=10).results
        except grpc.RpcError as e:
            assert e.code() == C.INVALID_ARGUMENT, (e.code(), e.details(), batch)
            word = (e.details() or "").split(" ")[0]
            refused[word] = refused.get(word, 0) + 1
            assert cluster.offsets().max_offset == before
            return
        acked.extend(zip(batch, rs, strict=True))
        raws = w.ReadRecords(commitlog_pb2.ReadRecordsRequest(
            offsets=[r.phy_offset for r in rs]), timeout=10).records
        for m, r, raw in zip(batch, rs, raws, strict=True):
            rec = commitlog.decode(raw)
            assert (rec.body, rec.keys, rec.tags, rec.flag) == (m.body, m.keys, m.tags, m.flag)
            assert rec.topic == r.topic == (SCHEDULE_TOPIC if rec.topic == SCHEDULE_TOPIC
                                            else m.topic)
            assert rec.uniq_key == r.unique_key
            sent_props = {p.name: p.value for p in m.properties}  # a map: the last one wins
            assert {k: rec.property_map.get(k) for k in sent_props} == sent_props

    @_settings(max(examples // 2, 1))
    @given(hostile_columns())
    def put_columns(c: commitlog_pb2.MessageColumns) -> None:
        before = cluster.offsets().max_offset
        try:
            rs = w.PutBatch(commitlog_pb2.PutBatchRequest(columns=c), timeout=10).results
        except grpc.RpcError as e:
            assert e.code() == C.INVALID_ARGUMENT, (e.code(), e.details(), c)
            refused["columns"] = refused.get("columns", 0) + 1
            assert cluster.offsets().max_offset == before
            return
        n, at = len(c.body_size), 0
        tags, keys = _per_message(c.tags, n), _per_message(c.keys, n)
        raws = w.ReadRecords(commitlog_pb2.ReadRecordsRequest(
            offsets=[r.phy_offset for r in rs]), timeout=10).records
        assert len(rs) == n
        for i, (r, raw) in enumerate(zip(rs, raws, strict=True)):
            rec = commitlog.decode(raw)
            body = c.bodies[at : at + c.body_size[i]]
            at += c.body_size[i]
            assert (rec.topic, rec.body, rec.tags, rec.keys) == (c.topic, body, tags[i], keys[i])
            given = c.unique_key[i] if c.unique_key else ""  # empty: the writer makes one
            assert rec.uniq_key == r.unique_key and r.unique_key == (given or r.unique_key)
            acked.append((common_pb2.Message(topic=c.topic, body=body, tags=tags[i],
                                             keys=keys[i]), r))
        refused["(columns stored)"] = refused.get("(columns stored)", 0) + 1

    put()
    put_columns()
    print(f"put fuzzing: {examples} generated batches and {max(examples // 2, 1)} columnar "
          f"ones, {len(acked)} messages stored, refusals by first word (and columnar "
          f"batches stored) {dict(sorted(refused.items()))}")
    assert acked, "no generated message was ever valid"

    # crash and recover: no corruption, every acknowledged record decodes with its CRC
    end = cluster.offsets().max_offset
    cluster.kill("writer")
    cluster.start("writer")
    log = cluster.log("writer")
    assert cluster.offsets().max_offset == end, log
    assert "cut" not in log and "corrupt" not in log.lower(), log
    raws = cluster.writer.ReadRecords(commitlog_pb2.ReadRecordsRequest(
        offsets=[r.phy_offset for _m, r in acked]), timeout=30).records
    assert [commitlog.decode(raw).uniq_key for raw in raws] == [r.unique_key for _m, r in acked]
    print(f"after SIGKILL and restart: recovered to {end}, {len(acked)} records decode")
    return acked


def fuzz_queries(cluster: Cluster, examples: int,
                 acked: list[tuple[common_pb2.Message, commitlog_pb2.PutResult]]) -> None:
    q = cluster.query
    seen: dict[str, int] = {}
    topic = st.one_of(st.sampled_from(TOPICS), st.text(max_size=140))
    stored_keys = sorted({k for m, _r in acked for k in m.keys.split(" ") if k}) or ["none"]
    stored_ids = sorted({r.msg_id for _m, r in acked} | {r.unique_key for _m, r in acked})
    key = st.one_of(TEXT, st.sampled_from(stored_keys))
    requests = st.one_of(
        st.builds(lambda *a: ("QueryByKey", query_pb2.QueryByKeyRequest(
            topic=a[0], key=a[1], begin_timestamp=a[2], end_timestamp=a[3], max_results=a[4],
            cursor=a[5])), topic, key, st.one_of(st.just(0), INT64), st.one_of(st.just(0), INT64),
            st.one_of(st.just(0), INT32),
            st.one_of(st.just(""), st.text(max_size=60))),
        st.builds(lambda t, i: ("QueryById", query_pb2.QueryByIdRequest(id=i, topic=t)),
                  st.one_of(st.just(""), topic),
                  st.one_of(st.text(max_size=60), st.sampled_from(stored_ids),
                            st.text("0123456789ABCDEF", min_size=32,
                                                          max_size=32),
                            st.text("0123456789abcdef", min_size=56, max_size=56))),
        st.builds(lambda *a: ("Pull", query_pb2.PullRequest(
            topic=a[0], queue_id=a[1], offset=a[2], max_messages=a[3], tag_expression=a[4])),
            topic, st.one_of(st.integers(0, 7), INT32), INT64, INT32, TEXT),
        st.builds(lambda *a: ("OffsetByTime", query_pb2.OffsetByTimeRequest(
            topic=a[0], queue_id=a[1], timestamp=a[2], boundary=a[3])),
            topic, st.one_of(st.integers(0, 7), INT32), INT64, st.sampled_from((0, 1))),
        st.builds(lambda t, i: ("QueueOffsets", query_pb2.QueueOffsetsRequest(
            topic=t, queue_id=i)), topic, st.one_of(st.integers(0, 7), INT32)),
    )

    @_settings(examples)
    @given(requests)
    def ask(req) -> None:
        method, request = req
        try:
            getattr(q, method)(request, timeout=10)
            code = C.OK
        except grpc.RpcError as e:
            code = e.code()
            assert code in (C.INVALID_ARGUMENT, C.NOT_FOUND, C.OUT_OF_RANGE,
                            C.RESOURCE_EXHAUSTED), (method, request, code, e.details())
        seen[f"{method} {code.name}"] = seen.get(f"{method} {code.name}", 0) + 1

    ask()
    print(f"query fuzzing: {examples} generated requests: {dict(sorted(seen.items()))}")
    resp = q.QueueOffsets(query_pb2.QueueOffsetsRequest(topic="Fuzz", queue_id=0), timeout=5)
    assert resp.max_offset >= 0


def test_fuzz_put_then_query(node):
    acked = fuzz_puts(node, 400)
    node.wait_caught_up()
    fuzz_queries(node, 300, acked)


@pytest.mark.soak
def test_fuzz_put_then_query_soak(node):
    acked = fuzz_puts(node, 10_000)
    node.wait_caught_up(timeout=300)
    fuzz_queries(node, 5_000, acked)
