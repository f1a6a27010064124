"""The index catalog lists the directory again only when it changed, and always sees a file
added, replaced or removed."""

import os
import time

import numpy as np

from rmqstore.formats import index_file as ixf
from services.query import listing
from services.query.index_reader import IndexCatalog

SLOTS, ENTRIES = 16, 8


def _index_file(path, first_ms: int, phy: int) -> None:
    buf = bytearray(ixf.file_size(SLOTS, ENTRIES))
    ixf.IndexFile(buf, SLOTS, ENTRIES).put_many(
        np.array([7], np.int64), np.array([phy], np.int64), np.array([first_ms], np.int64))
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


def test_changes_right_after_each_other_are_seen(tmp_path):
    catalog = IndexCatalog(tmp_path, SLOTS, ENTRIES)
    _changes_seen(tmp_path, catalog, 0)
    catalog.close()


def test_a_settled_directory_is_not_listed_again_until_it_changes(tmp_path, monkeypatch):
    monkeypatch.setattr(listing, "SETTLE_NS", 50_000_000)
    catalog = IndexCatalog(tmp_path, SLOTS, ENTRIES)
    _changes_seen(tmp_path, catalog, 0.06)
    first = catalog.names()
    time.sleep(0.06)
    settled = catalog.names()
    assert catalog.names() is settled  # the same listing, not a new one
    assert settled == first
    catalog.close()


def test_a_missing_directory_has_no_files(tmp_path):
    catalog = IndexCatalog(tmp_path / "index", SLOTS, ENTRIES)
    assert catalog.names() == []
    (tmp_path / "index").mkdir()
    _index_file(tmp_path / "index" / "20231114221320000", 1_700_000_000_000, 5)
    assert _phys(catalog) == {"20231114221320000": 5}
    catalog.close()


def test_a_change_that_leaves_the_directory_time_as_it_was_is_seen(tmp_path):
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


def test_a_directory_swapped_for_an_older_one_is_listed_again(tmp_path, monkeypatch):
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
