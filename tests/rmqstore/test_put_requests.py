"""The writer requests of a batch: merged only when asked, and built in place to the same
bytes as the ``Message``s and ``MessageColumns`` they stand for."""

from rmqstore.put_requests import Plain, requests_of
from rmqstore.v1 import commitlog_pb2, common_pb2

HOSTS = [f"127.0.0.1:{5000 + i}" for i in range(4)]  # one synchronous sender each


def _plain(i: int, host: str, topic: str = "GroupT") -> Plain:
    return Plain(topic, i % 4, f"body{i}".encode(), "t", f"k{i}", f"ID{i:04d}", host)


def test_small_batches_of_several_senders_merge_into_one_request_only_when_asked() -> None:
    groups = [([_plain(i, h)], object(), 0) for i, h in enumerate(HOSTS)]
    assert len(requests_of(groups)) == 4  # one columns request per born host
    [(merged, held)] = requests_of(groups, merge_below=16)
    assert held == groups and not merged.HasField("columns")
    assert [(m.born_host, m.unique_key) for m in merged.messages] == [
        (h, f"ID{i:04d}") for i, h in enumerate(HOSTS)
    ]
    assert len(requests_of(groups, merge_below=4)) == 4  # not fewer than merge_below messages


def test_a_merged_request_holds_each_record_as_its_message() -> None:
    delayed = common_pb2.Message(topic="GroupT", body=b"d", delay_level=3, born_host=HOSTS[0])
    named = _plain(1, HOSTS[1])._replace(born_host_property="my-host", born_timestamp=17)
    records = [_plain(0, HOSTS[0]), delayed, named, _plain(3, HOSTS[3])]
    [(merged, _held)] = requests_of([([r], object(), 0) for r in records], merge_below=16)
    expected = commitlog_pb2.PutBatchRequest(
        messages=[r.as_message() if isinstance(r, Plain) else r for r in records],
        columnar_results=True, offsets_only=True,
    )  # fmt: skip
    assert merged.SerializeToString() == expected.SerializeToString()


def test_columns_hold_one_senders_messages_as_a_message_columns_would() -> None:
    records = [_plain(i, HOSTS[0])._replace(born_timestamp=100 + i) for i in range(5)]
    [(request, _held)] = requests_of([(records[:2], object(), 0), (records[2:], object(), 0)])
    expected = commitlog_pb2.MessageColumns(
        topic="GroupT", body_size=[len(r.body) for r in records],
        bodies=b"".join(r.body for r in records), queue_id=[r.queue_id for r in records],
        unique_key=[r.unique_key for r in records], born_host=HOSTS[0], tags=["t"],
        keys=[r.keys for r in records], born_timestamps=[r.born_timestamp for r in records],
    )  # fmt: skip
    assert request.columns == expected and request.columnar_results and request.offsets_only
