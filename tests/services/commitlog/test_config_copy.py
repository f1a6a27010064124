"""A slave's copy of its master's config/ (``config_copy``): topics replaced, delay offsets
and consumer offsets never going back, groups kept for the proxy."""

import pytest

from rmqstore import broker_perm
from rmqstore.broker_perm import READ_ONLY, READ_WRITE, PermissionFile
from rmqstore.formats import consumer_offsets, delay_offset, subscription_groups, topics_json
from rmqstore.formats.topics_json import TopicConfig, TopicTable
from rmqstore.layout import StoreLayout
from services.commitlog.config_copy import ConfigCopy, read_config
from services.commitlog.topics import TopicStore


def _offsets(table: dict) -> bytes:
    return consumer_offsets.render(consumer_offsets.OffsetTable(table)).encode()


def test_a_copy_takes_topics_and_keeps_the_higher_offsets(tmp_path):
    layout = StoreLayout.of(tmp_path / "slave")
    topics = TopicStore(layout.root, 8)
    copy = ConfigCopy(layout, topics, "127.0.0.1:1")
    (layout.root / "config").mkdir(parents=True)
    layout.delay_offset.write_text(delay_offset.encode({1: 9, 2: 3}))
    table = TopicTable({"Orders": TopicConfig("Orders", 4, 4, 6)}, 1, 1)
    groups = subscription_groups.render(subscription_groups.GroupTable(
        {"g": subscription_groups.GroupConfig("g")})).encode()  # fmt: skip
    copy.apply({
        "topics.json": topics_json.render(table).encode(),
        "delayOffset.json": delay_offset.encode({1: 4, 2: 8, 3: 1}).encode(),
        "consumerOffset.json": _offsets({("Orders", "g"): {0: 5, 1: 2}}),
        "subscriptionGroup.json": groups,
    })  # fmt: skip
    assert [t.name for t in topics.list()] == ["Orders"]
    assert TopicStore(layout.root, 8).get("Orders").read_queue_nums == 4
    assert delay_offset.decode(layout.delay_offset.read_text()) == {1: 9, 2: 8, 3: 1}
    replica = layout.replica_config_dir
    # an older copy later (a master restarted from an older file) moves nothing back
    copy.apply({"consumerOffset.json": _offsets({("Orders", "g"): {0: 3, 1: 6}})})
    got = consumer_offsets.parse((replica / "consumerOffset.json").read_text())
    assert got.offsets == {("Orders", "g"): {0: 5, 1: 6}}
    assert (replica / "subscriptionGroup.json").read_bytes() == groups
    assert set(read_config(layout)) == {"topics.json", "delayOffset.json"}


def test_a_copy_takes_the_masters_broker_permission(tmp_path):
    """A drained master's slave is drained too, so its promotion does not undo the drain."""
    master, slave = StoreLayout.of(tmp_path / "master"), StoreLayout.of(tmp_path / "slave")
    drained = PermissionFile(master.root)
    drained.set(READ_ONLY)
    mine = PermissionFile(slave.root)
    copy = ConfigCopy(slave, TopicStore(slave.root, 8), "127.0.0.1:1", permission=mine)
    copy.apply(read_config(master))
    assert mine.perm == READ_ONLY
    assert PermissionFile(slave.root).perm == READ_ONLY  # kept, as a restart finds it
    drained.set(READ_WRITE)
    copy.apply(read_config(master))
    assert PermissionFile(slave.root).perm == READ_WRITE
    with pytest.raises(ValueError, match="brokerPermission is not 6 or 4: 7"):
        copy.apply({broker_perm.FILE: b'{"brokerPermission": 7}'})
    assert mine.perm == READ_WRITE  # a bad copy changes nothing
    mine.set(READ_ONLY)  # drained itself once (a former master rejoined as a slave) ...
    fresh = StoreLayout.of(tmp_path / "fresh")  # ... of a master never drained (no file)
    (fresh.root / "config").mkdir(parents=True)
    fresh.delay_offset.write_text(delay_offset.encode({1: 1}))
    copy.apply(read_config(fresh))
    assert PermissionFile(slave.root).perm == READ_WRITE
