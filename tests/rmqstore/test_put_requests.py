"""The writer requests of a batch: merged only when asked, and built in place to the same
bytes as the ``Message``s and ``MessageColumns`` they stand for."""

import pytest

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


def _one(i: int, topic="T", host="127.0.0.1:5000", tags="t", keys="") -> Plain:
    return Plain(topic, i % 4, f"body{i}".encode(), tags, keys, f"ID{i}", host)


def _group(records):
    return (records, object(), 0)  # the future is not looked at


def test_plain_groups_of_one_topic_and_host_become_one_columns_request():
    groups = [_group([_one(0), _one(1)]), _group([_one(2, keys="k")])]
    [(request, held)] = requests_of(groups)
    assert held == groups and not request.messages and request.columnar_results
    c = request.columns
    assert (c.topic, c.born_host) == ("T", "127.0.0.1:5000")
    assert list(c.body_size) == [5, 5, 5] and c.bodies == b"body0body1body2"
    assert list(c.queue_id) == [0, 1, 2] and list(c.unique_key) == ["ID0", "ID1", "ID2"]
    assert list(c.tags) == ["t"] and list(c.keys) == ["", "", "k"]
    assert not c.born_timestamps and not c.born_host_property  # the writer's time, none


@pytest.mark.parametrize("born", [(0, ""), (5, "w1")])
def test_a_lone_message_makes_the_request_a_batch_of_it_would(born):
    r = _one(3, keys="k")._replace(born_timestamp=born[0], born_host_property=born[1])
    [(lone, _held)] = requests_of([_group([r])])
    [(batched, _held)] = requests_of([_group([r, r._replace(unique_key="ID9", keys="k9")])])
    del batched.columns.body_size[1:], batched.columns.queue_id[1:]
    del batched.columns.unique_key[1:], batched.columns.keys[1:]
    del batched.columns.born_timestamps[1:]
    batched.columns.bodies = r.body
    assert lone == batched


def test_born_times_and_host_names_travel_in_the_columns():
    named = [_one(i)._replace(born_timestamp=100 + i, born_host_property="w1") for i in range(3)]
    other = _one(3)._replace(born_timestamp=7, born_host_property="w2")
    requests = requests_of([_group(named[:2]), _group([named[2]]), _group([other])])
    assert [(list(r.columns.born_timestamps), r.columns.born_host_property)
            for r, _held in requests] == [([100, 101, 102], "w1"), ([7], "w2")]  # fmt: skip


def test_other_hosts_topics_and_mixed_groups_go_apart():
    half = common_pb2.Message(topic="T", body=b"x", unique_key="H")
    groups = [
        _group([_one(0)]),
        _group([_one(1, host="127.0.0.2:1")]),
        _group([_one(2, topic="U")]),
        _group([_one(3), half]),  # must be stored together: one request of Messages
    ]
    requests = requests_of(groups)
    assert [held for _r, held in requests] == [[g] for g in groups]
    columns = [r.columns for r, _held in requests[:3]]
    assert [(c.topic, c.born_host, list(c.unique_key)) for c in columns] == [
        ("T", "127.0.0.1:5000", ["ID0"]),
        ("T", "127.0.0.2:1", ["ID1"]),
        ("U", "127.0.0.1:5000", ["ID2"]),
    ]
    mixed = requests[3][0]
    assert not mixed.HasField("columns")
    assert list(mixed.messages) == [_one(3).as_message(), half]
    assert mixed.messages[0].born_host == "127.0.0.1:5000" and mixed.messages[0].tags == "t"
