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
