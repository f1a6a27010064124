"""The queue catalog sees a queue as it is now: units written in place, segments added,
replaced or removed, and queues created, even between listings of their directories."""

import os
import time

import numpy as np

from rmqstore import listing
from rmqstore.formats import consume_queue as cq
from services.query.queue_reader import QueueCatalog

EPF = 4  # units per segment file


def _write(path, first_phy: int, count: int) -> None:
    """A full-size segment whose first ``count`` units point at first_phy, first_phy + 1..."""
    data = bytearray(cq.file_size(EPF))
    phys = np.arange(first_phy, first_phy + count, dtype=np.int64)
    data[: count * cq.UNIT_SIZE] = cq.encode_many(
        phys, np.full(count, 100, np.int32), np.zeros(count, np.int64))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # linked into place at full size, as the builder does


def _seg(n: int) -> str:
    return f"{n * EPF * cq.UNIT_SIZE:020d}"


def _seen(catalog: QueueCatalog, queue: int = 0) -> tuple[int, int, list[int]] | None:
    view = catalog.view("T", queue)
    if view is None:
        return None
    phys = [view.unit(o)[0] for o in range(view.min_offset, view.max_offset)]  # type: ignore[index]
    return view.min_offset, view.max_offset, phys


def _changes_seen(root, catalog: QueueCatalog, pause: float) -> None:
    qdir = root / "T" / "0"
    assert _seen(catalog) is None
    qdir.mkdir(parents=True)
    _write(qdir / _seg(0), 10, 2)  # a queue created after it was asked for
    time.sleep(pause)
    assert _seen(catalog) == (0, 2, [10, 11])
    _write(qdir / _seg(0), 10, 4)  # grown (a new file here; in place below)
    _write(qdir / _seg(1), 14, 1)  # a segment added
    time.sleep(pause)
    assert _seen(catalog) == (0, 5, [10, 11, 12, 13, 14])
    _write(qdir / _seg(1), 20, 3)  # replaced under its name, as a rebuild does
    time.sleep(pause)
    assert _seen(catalog) == (0, 7, [10, 11, 12, 13, 20, 21, 22])
    os.unlink(qdir / _seg(1))  # removed
    time.sleep(pause)
    assert _seen(catalog) == (0, 4, [10, 11, 12, 13])


def test_changes_right_after_each_other_are_seen(tmp_path):
    catalog = QueueCatalog(tmp_path)
    _changes_seen(tmp_path, catalog, 0)
    catalog.close()


def test_a_settled_queue_is_seen_through_its_mappings(tmp_path, monkeypatch):
    monkeypatch.setattr(listing, "SETTLE_NS", 50_000_000)
    catalog = QueueCatalog(tmp_path)
    _changes_seen(tmp_path, catalog, 0.06)
    time.sleep(0.06)
    first = catalog.view("T", 0)
    assert first is not None and catalog.view("T", 0).segments is first.segments  # type: ignore[union-attr]
    # units written in place change no directory: the mapping shows them
    seg = tmp_path / "T" / "0" / _seg(0)
    with open(seg, "r+b") as f:
        f.seek(2 * cq.UNIT_SIZE)
        f.write(bytes(cq.UNIT_SIZE * 2))  # units 2 and 3 zeroed, as a truncation does
    assert _seen(catalog) == (0, 2, [10, 11])
    with open(seg, "r+b") as f:
        f.seek(2 * cq.UNIT_SIZE)
        f.write(cq.encode_many(np.array([30, 31]), np.array([1, 1]), np.array([0, 0])))
    assert _seen(catalog) == (0, 4, [10, 11, 30, 31])
    catalog.close()


def test_a_removed_segment_is_no_longer_mapped(tmp_path):
    qdir = tmp_path / "T" / "0"
    qdir.mkdir(parents=True)
    _write(qdir / _seg(0), 10, 4)
    _write(qdir / _seg(1), 14, 4)
    catalog = QueueCatalog(tmp_path)
    assert _seen(catalog) == (0, 8, list(range(10, 18)))
    os.unlink(qdir / _seg(0))
    assert _seen(catalog) == (4, 8, list(range(14, 18)))
    assert sorted(catalog._files._maps) == [str(qdir / _seg(1))]
    catalog.close()


def test_a_directory_swapped_for_an_older_one_is_listed_again(tmp_path, monkeypatch):
    monkeypatch.setattr(listing, "SETTLE_NS", 50_000_000)
    live, staged = tmp_path / "consumequeue", tmp_path / "staged"
    (staged / "T" / "0").mkdir(parents=True)
    _write(staged / "T" / "0" / _seg(0), 50, 3)  # made first: older
    time.sleep(0.06)
    (live / "T" / "0").mkdir(parents=True)
    _write(live / "T" / "0" / _seg(0), 10, 1)
    time.sleep(0.06)
    catalog = QueueCatalog(live)
    assert _seen(catalog) == (0, 1, [10])
    time.sleep(0.06)
    os.rename(live, tmp_path / "old")
    os.rename(staged, live)  # as a rebuild swaps its output in
    assert _seen(catalog) == (0, 3, [50, 51, 52])
    catalog.close()
