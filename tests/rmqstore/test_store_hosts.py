"""The store hosts a store's records carried: oldest first, each once in a row; a damaged
file is started again rather than stopping a writer."""

from rmqstore import store_hosts
from rmqstore.layout import StoreLayout


def test_hosts_are_kept_oldest_first_and_a_repeat_is_not_added(tmp_path):
    layout = StoreLayout.of(tmp_path)
    assert store_hosts.recorded(layout) == []
    assert store_hosts.remember(layout, "10.0.0.1:10911", 0)
    assert not store_hosts.remember(layout, "10.0.0.1:10911", 500)
    assert store_hosts.remember(layout, "10.0.0.2:10911", 900)
    assert store_hosts.remember(layout, "10.0.0.1:10911", 1200)  # moved back: a new entry
    assert store_hosts.recorded(layout) == ["10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.1:10911"]


def test_a_damaged_file_reads_as_empty_and_is_started_again(tmp_path):
    layout = StoreLayout.of(tmp_path)
    store_hosts.path(layout).parent.mkdir(parents=True)
    store_hosts.path(layout).write_text('{"host": ')
    assert store_hosts.recorded(layout) == []
    assert store_hosts.remember(layout, "10.0.0.3:10911", 7)
    assert store_hosts.recorded(layout) == ["10.0.0.3:10911"]

