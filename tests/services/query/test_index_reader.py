"""The index catalog looks at the directory when a new file may have come (the newest file
with entries is full, or there is none) and at least every CHECK_NS, lists it again only
when it changed, and then sees every file added, replaced or removed."""

import os
import time
from types import SimpleNamespace

import numpy as np
import pytest

from rmqstore import listing
from rmqstore.dispatch import DispatchRecord
from rmqstore.formats import index_file as ixf
from rmqstore.formats.index_file import build_key
from rmqstore.formats.javahash import index_hash
from rmqstore.layout import StoreLayout
from services.indexer.batch import Columns
from services.indexer.index_builder import IndexBuilder
from services.query import index_reader
from services.query.budget import Budget, BudgetLimits
from services.query.index_reader import PAUSE, POS_INF, IndexCatalog, KeyWalk

SLOTS, ENTRIES = 16, 8


@pytest.fixture
def check_every_query(monkeypatch):
    """The catalog looks at the directory on every query, as if a new file may always come."""
    monkeypatch.setattr(index_reader, "CHECK_NS", 0)


def _index_file(path, first_ms: int, phy: int, count: int = 1) -> None:
    """An index file of ``count`` entries (``ENTRIES - 1`` fill it), the first at ``phy``."""
    buf = bytearray(ixf.file_size(SLOTS, ENTRIES))
    ixf.IndexFile(buf, SLOTS, ENTRIES).put_many(
        np.full(count, 7, np.int64),
        phy + np.arange(count, dtype=np.int64),
        first_ms + np.arange(count, dtype=np.int64))
    path.write_bytes(buf)


def _phys(catalog: IndexCatalog) -> dict[str, int]:
    out = {}
    for name in catalog.names():
        index = catalog.open(name)
        assert index is not None
        out[name] = index.entry(1)[1]
    return out


def _changes_seen(tmp_path, catalog: IndexCatalog, pause: float) -> None:
    a, b = "20231114221320000", "20231114221330000"
    _index_file(tmp_path / a, 1_700_000_000_000, 100)
    time.sleep(pause)
    assert _phys(catalog) == {a: 100}
    _index_file(tmp_path / b, 1_700_000_010_000, 200)  # added
    time.sleep(pause)
    assert _phys(catalog) == {b: 200, a: 100}
    _index_file(tmp_path / "new", 1_700_000_000_000, 300)
    os.replace(tmp_path / "new", tmp_path / a)  # replaced under its name, as a rebuild does
    time.sleep(pause)
    assert _phys(catalog) == {b: 200, a: 300}
    os.unlink(tmp_path / b)  # removed
    time.sleep(pause)
    assert _phys(catalog) == {a: 300}


def test_changes_right_after_each_other_are_seen(tmp_path, check_every_query):
    catalog = IndexCatalog(tmp_path, SLOTS, ENTRIES)
    _changes_seen(tmp_path, catalog, 0)
    catalog.close()


def test_a_settled_directory_is_not_listed_again_until_it_changes(tmp_path, check_every_query,
                                                                  monkeypatch):
    monkeypatch.setattr(listing, "SETTLE_NS", 50_000_000)
    catalog = IndexCatalog(tmp_path, SLOTS, ENTRIES)
    _changes_seen(tmp_path, catalog, 0.06)
    first = catalog.names()
    time.sleep(0.06)
    settled = catalog.names()
    assert catalog.names() is settled  # the same listing, not a new one
    assert settled == first
    catalog.close()


def test_a_missing_directory_has_no_files(tmp_path, check_every_query):
    catalog = IndexCatalog(tmp_path / "index", SLOTS, ENTRIES)
    assert catalog.names() == []
    (tmp_path / "index").mkdir()
    _index_file(tmp_path / "index" / "20231114221320000", 1_700_000_000_000, 5)
    assert _phys(catalog) == {"20231114221320000": 5}
    catalog.close()


def test_a_change_that_leaves_the_directory_time_as_it_was_is_seen(tmp_path, check_every_query):
    # a coarse clock: a change in the same tick as the listing does not move the mtime
    catalog = IndexCatalog(tmp_path, SLOTS, ENTRIES)
    a, b = "20231114221320000", "20231114221330000"
    _index_file(tmp_path / a, 1_700_000_000_000, 100)
    assert _phys(catalog) == {a: 100}
    st = os.stat(tmp_path)
    _index_file(tmp_path / b, 1_700_000_010_000, 200)
    os.utime(tmp_path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _phys(catalog) == {b: 200, a: 100}
    catalog.close()


def test_a_directory_swapped_for_an_older_one_is_listed_again(tmp_path, check_every_query,
                                                              monkeypatch):
    monkeypatch.setattr(listing, "SETTLE_NS", 50_000_000)
    index, staged = tmp_path / "index", tmp_path / "staged"
    index.mkdir()
    staged.mkdir()
    _index_file(staged / "20231114221330000", 1_700_000_010_000, 200)  # made first: older
    time.sleep(0.06)
    _index_file(index / "20231114221320000", 1_700_000_000_000, 100)
    time.sleep(0.06)
    catalog = IndexCatalog(index, SLOTS, ENTRIES)
    assert _phys(catalog) == {"20231114221320000": 100}
    time.sleep(0.06)
    os.rename(index, tmp_path / "old")
    os.rename(staged, index)  # as a rebuild swaps its output in
    assert _phys(catalog) == {"20231114221330000": 200}
    catalog.close()


def test_a_file_added_once_the_newest_is_full_is_seen_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(index_reader, "CHECK_NS", 3600 * 10**9)
    a, b = "20231114221320000", "20231114221330000"
    _index_file(tmp_path / a, 1_700_000_000_000, 100, ENTRIES - 1)
    catalog = IndexCatalog(tmp_path, SLOTS, ENTRIES)
    assert _phys(catalog) == {a: 100}
    _index_file(tmp_path / b, 1_700_000_010_000, 200)  # the writer rolled to a new file
    assert _phys(catalog) == {b: 200, a: 100}
    catalog.close()


def test_a_first_file_is_seen_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(index_reader, "CHECK_NS", 3600 * 10**9)
    catalog = IndexCatalog(tmp_path / "index", SLOTS, ENTRIES)
    assert catalog.names() == []
    (tmp_path / "index").mkdir()
    assert catalog.names() == []
    _index_file(tmp_path / "index" / "20231114221320000", 1_700_000_000_000, 5)
    assert _phys(catalog) == {"20231114221320000": 5}
    catalog.close()


def test_an_empty_newer_file_does_not_hide_that_the_newest_with_entries_is_full(
        tmp_path, monkeypatch):
    # files emptied in place by a truncation stay as spares, named after the current one
    monkeypatch.setattr(index_reader, "CHECK_NS", 3600 * 10**9)
    a, spare, c = "20231114221320000", "20231114221330000", "20231114221340000"
    _index_file(tmp_path / a, 1_700_000_000_000, 100, ENTRIES - 1)
    (tmp_path / spare).write_bytes(bytes(ixf.file_size(SLOTS, ENTRIES)))
    catalog = IndexCatalog(tmp_path, SLOTS, ENTRIES)
    assert catalog.names() == [spare, a]
    _index_file(tmp_path / c, 1_700_000_020_000, 300)
    assert catalog.names() == [c, spare, a]
    catalog.close()


def test_while_the_newest_has_room_other_changes_are_seen_within_the_check_interval(
        tmp_path, monkeypatch):
    now = [10**12]  # the catalog's monotonic clock, in ns
    monkeypatch.setattr(index_reader, "time", SimpleNamespace(monotonic_ns=lambda: now[0]))
    a, b = "20231114221320000", "20231114221330000"
    _index_file(tmp_path / a, 1_700_000_000_000, 100)
    catalog = IndexCatalog(tmp_path, SLOTS, ENTRIES)
    assert catalog.names() == [a]
    _index_file(tmp_path / b, 1_700_000_010_000, 200)  # put there by hand, say
    now[0] += index_reader.CHECK_NS - 1
    assert catalog.names() == [a]
    now[0] += 1
    assert _phys(catalog) == {b: 200, a: 100}
    catalog.close()


def test_while_the_newest_has_room_a_query_costs_no_look_at_the_directory(
        tmp_path, monkeypatch):
    monkeypatch.setattr(index_reader, "CHECK_NS", 3600 * 10**9)
    a, b = "20231114221320000", "20231114221330000"
    _index_file(tmp_path / a, 1_700_000_000_000, 100, ENTRIES - 2)  # one entry short
    catalog = IndexCatalog(tmp_path, SLOTS, ENTRIES)
    assert catalog.names() == [a]
    _index_file(tmp_path / b, 1_700_000_010_000, 200)  # no writer adds a file now
    assert catalog.names() == [a]
    catalog.close()


def _found(catalog: IndexCatalog, key: str) -> set[int]:
    walk = KeyWalk(catalog, catalog.names(), index_hash(build_key("T", key)), 0, POS_INF,
                   Budget(BudgetLimits()))
    return {e.phy_offset for e in walk if e is not PAUSE}


def test_every_key_the_real_builder_has_applied_is_found_at_once(tmp_path, monkeypatch):
    """The index builder rolls (and after a truncation reuses emptied files) while the
    catalog, told to look at the directory on its own only once an hour, serves lookups:
    every key applied is found right after ``apply`` returns."""
    monkeypatch.setattr(index_reader, "CHECK_NS", 3600 * 10**9)
    layout = StoreLayout.of(tmp_path)
    builder = IndexBuilder(layout, slots=3, entries=9)  # 8 keys a file
    catalog = IndexCatalog(layout.index_dir, 3, 9)
    applied: dict[str, set[int]] = {}

    def apply(first: int, count: int, later_ms: int = 0) -> None:
        records = [DispatchRecord("T", 0, i, 100 * i, 100, 0,
                                  1_700_000_000_000 + 10 * i + later_ms, f"k{i % 11} u{i}",
                                  "", 0, 0)
                   for i in range(first, first + count)]
        builder.apply(Columns.from_records(records))
        for r in records:
            for k in r.keys.split(" "):
                applied.setdefault(k, set()).add(r.phy_offset)
        for k, offsets in applied.items():
            assert offsets <= _found(catalog, k), (k, first)

    for first in range(0, 60, 3):
        apply(first, 3)
    rolled = builder.rolls
    builder.truncate(100 * 30)  # files past the cut are emptied in place and kept as spares
    applied = {k: {o for o in v if o < 100 * 30} for k, v in applied.items()}
    for first in range(30, 60, 5):  # the same records again: the spares are filled again
        apply(first, 5)
    builder.truncate(100 * 45)
    applied = {k: {o for o in v if o < 100 * 45} for k, v in applied.items()}
    for first in range(45, 90, 5):  # other records (later store times): new files
        apply(first, 5, later_ms=5)
    assert rolled >= 10 and builder.rolls > rolled
    builder.close()
    catalog.close()
