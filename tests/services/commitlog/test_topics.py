"""The writer's topic store: create is idempotent and durable, bad input changes nothing."""

import pytest

from rmqstore.errors import InvalidArgumentError, NotFoundError
from services.commitlog.topics import TopicStore


def test_created_topics_survive_a_reopen(tmp_path):
    store = TopicStore(tmp_path, max_queues=8)
    t, created = store.create("Orders", 4, message_type="fifo")
    assert created and t.read_queue_nums == 4 and t.message_type == "FIFO"
    again, created = store.create("Orders", 2)
    assert not created and again == t
    assert [x.name for x in TopicStore(tmp_path, 8).list()] == ["Orders"]
    assert TopicStore(tmp_path, 8).table.counter == 1


@pytest.mark.parametrize(
    ("name", "queues", "perm", "kind"),
    [("a/b", 0, 0, ""), ("", 0, 0, ""), ("T", 9, 0, ""), ("T", 0, 8, ""), ("T", 0, 0, "LITE")],
)
def test_bad_requests_write_nothing(tmp_path, name, queues, perm, kind):
    store = TopicStore(tmp_path, max_queues=8)
    with pytest.raises(InvalidArgumentError):
        store.create(name, queues, perm, kind)
    assert not (tmp_path / "config" / "topics.json").exists()


def test_unknown_topic_is_not_found(tmp_path):
    with pytest.raises(NotFoundError):
        TopicStore(tmp_path, 8).get("Nope")


def test_topics_in_use_are_adopted_with_the_queues_they_use(tmp_path):
    in_use = {("Put", 0): 5, ("Put", 1): 2, ("Empty", 3): 0, ("Listed", 0): 1}
    store = TopicStore(tmp_path, max_queues=8, in_use=lambda: in_use)
    store.create("Listed", 4)
    assert [(t.name, t.read_queue_nums, t.write_queue_nums, t.perm) for t in store.list()] == [
        ("Listed", 4, 4, 6), ("Put", 2, 2, 6)]  # fmt: skip
    with pytest.raises(NotFoundError):
        store.get("Empty")  # a queue offset table entry without messages is no topic
    reopened = TopicStore(tmp_path, 8)
    assert reopened.get("Put").read_queue_nums == 2 and reopened.table.counter == 2


def test_get_adopts_only_the_topic_asked_for(tmp_path):
    store = TopicStore(tmp_path, 8, in_use=lambda: {("A", 0): 1, ("B", 9): 1})
    assert store.get("B").write_queue_nums == 10  # what is on disk, beyond --queues-per-topic
    assert sorted(store.table.topics) == ["B"]


def test_a_read_only_store_adopts_without_writing(tmp_path):
    store = TopicStore(tmp_path, 8, read_only=True, in_use=lambda: {("A", 0): 1})
    assert store.get("A").read_queue_nums == 1
    assert not (tmp_path / "config" / "topics.json").exists()
