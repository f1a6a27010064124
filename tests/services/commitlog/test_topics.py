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


def test_update_changes_an_existing_topic_and_creates_a_new_one(tmp_path):
    store = TopicStore(tmp_path, 8)
    store.create("Orders", 4, message_type="fifo")
    changed = store.update("Orders", 2, 6, 4)
    assert (changed.read_queue_nums, changed.write_queue_nums, changed.perm) == (2, 6, 4)
    assert changed.message_type == "FIFO"  # what UPDATE_AND_CREATE_TOPIC does not name stays
    assert store.update("New", 3, 3, 6).read_queue_nums == 3
    reopened = TopicStore(tmp_path, 8)
    assert reopened.get("Orders") == changed and reopened.get("New").write_queue_nums == 3
    counter = reopened.table.counter
    assert reopened.update("Orders", 2, 6, 4) == changed and reopened.table.counter == counter
    for read, write, perm in ((0, 4, 6), (4, 9, 6), (4, 4, 8)):
        with pytest.raises(InvalidArgumentError):
            reopened.update("Orders", read, write, perm)
    assert TopicStore(tmp_path, 8).get("Orders") == changed  # bad input changed nothing


def test_a_deleted_topic_is_not_adopted_again_until_created(tmp_path):
    in_use = {("Busy", 0): 3}
    store = TopicStore(tmp_path, 8, in_use=lambda: in_use)
    assert store.get("Busy").read_queue_nums == 1  # adopted from its messages
    assert store.delete("Busy") and not store.delete("Busy")
    for reopened in (store, TopicStore(tmp_path, 8, in_use=lambda: in_use)):
        with pytest.raises(NotFoundError):
            reopened.get("Busy")
        assert [t.name for t in reopened.list()] == []
    again = TopicStore(tmp_path, 8, in_use=lambda: in_use)
    assert again.create("Busy", 2)[1]
    assert TopicStore(tmp_path, 8, in_use=lambda: in_use).get("Busy").read_queue_nums == 2
    assert TopicStore(tmp_path, 8).deleted == set()


def test_update_sets_the_message_type_when_given_and_keeps_it_otherwise(tmp_path):
    store = TopicStore(tmp_path, 8)
    assert store.update("New", 2, 2, 6, "fifo").message_type == "FIFO"
    assert store.update("New", 3, 3, 6).message_type == "FIFO"  # not named: it stays
    assert store.update("New", 3, 3, 6, "DELAY").message_type == "DELAY"
    mixed = store.update("New", 3, 3, 6, "MIXED")
    assert mixed.message_type == "MIXED" and mixed.attributes == {}  # the default: no attribute
    with pytest.raises(InvalidArgumentError, match="message type 'SOMETIMES' is not one of"):
        store.update("New", 1, 1, 6, "SOMETIMES")
    assert TopicStore(tmp_path, 8).get("New") == mixed  # refused: nothing changed
