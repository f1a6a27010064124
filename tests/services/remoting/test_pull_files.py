"""The mapped consume-queue and commitlog segments a 4.x pull reads (``PullFiles``): what is
kept mapped between pulls is seen to change at once — a segment retention removed, a queue
cut back (units zeroed, a segment removed and made again), new segments, a file replaced
under its name."""

import asyncio
import os
from pathlib import Path

from rmqstore.formats import commitlog
from rmqstore.formats import consume_queue as cq
from rmqstore.layout import StoreLayout
from rmqstore.segments import segment_name
from services.remoting import pull_files
from services.remoting.pull_files import PullFiles

PER_FILE = 4  # units per consume-queue segment
CL_SEGMENT = 4096


def _record(phy: int, i: int) -> bytes:
    return commitlog.encode(commitlog.Record("T", 0, b"x" * 50, queue_offset=i,
                                             physical_offset=phy))  # fmt: skip


class Store:
    """Queue T/0 over commitlog segments of ``CL_SEGMENT`` bytes, written as a writer and a
    builder write them: files at full size, then filled in place."""

    def __init__(self, root: Path) -> None:
        self.layout = StoreLayout.of(root)
        self.cl = self.layout.commitlog_dir
        self.qdir = self.layout.queue_dir("T", 0)
        self.cl.mkdir(parents=True)
        self.qdir.mkdir(parents=True)
        self.end = 0  # the commitlog's end
        self.units: list[tuple[int, int]] = []

    def _file(self, path: Path, size: int) -> None:
        if not path.exists():
            path.write_bytes(bytes(size))

    def append(self) -> tuple[int, int]:
        i = len(self.units)
        raw = _record(self.end, i)
        if self.end % CL_SEGMENT + len(raw) > CL_SEGMENT:  # the next segment
            self.end += CL_SEGMENT - self.end % CL_SEGMENT
            raw = _record(self.end, i)
        start = self.end - self.end % CL_SEGMENT
        self._file(self.cl / segment_name(start), CL_SEGMENT)
        with open(self.cl / segment_name(start), "r+b") as f:
            f.seek(self.end - start)
            f.write(raw)
        unit = (self.end, len(raw))
        self.end += len(raw)
        self.write_unit(i, cq.CqUnit(*unit, 0))
        self.units.append(unit)
        return unit

    def write_unit(self, i: int, unit: cq.CqUnit) -> None:
        first = i - i % PER_FILE
        path = self.qdir / segment_name(first * cq.UNIT_SIZE)
        self._file(path, PER_FILE * cq.UNIT_SIZE)
        with open(path, "r+b") as f:
            f.seek((i - first) * cq.UNIT_SIZE)
            f.write(cq.encode(unit))


def _bounds(files: PullFiles) -> tuple[int, int]:
    segs = files.queue("T", 0)
    mx = files.max_offset("T", 0, segs)
    return files.first_present(segs, files.commitlog_min(), mx), mx


def test_units_and_records_written_after_the_mapping_and_new_segments(tmp_path):
    store = Store(tmp_path)
    files = PullFiles(tmp_path)
    assert files.queue("T", 0).starts == [] and _bounds(files) == (0, 0)
    first = store.append()
    assert _bounds(files) == (0, 1)
    assert files.records([first]) == [store.cl.joinpath(segment_name(0)).read_bytes()[: first[1]]]
    while store.end < CL_SEGMENT + 1:  # into new queue segments and a new commitlog segment
        store.append()
    n = len(store.units)
    assert _bounds(files) == (0, n)
    assert len(files.queue("T", 0).starts) == (n + PER_FILE - 1) // PER_FILE
    units = files.units(files.queue("T", 0), PER_FILE, PER_FILE)
    assert [u[:2] for u in units] == store.units[PER_FILE : 2 * PER_FILE]
    got = files.records(store.units)
    assert None not in got and [len(r) for r in got if r] == [s for _, s in store.units]


def test_retention_removed_segments_are_not_read(tmp_path):
    store = Store(tmp_path)
    files = PullFiles(tmp_path)
    while store.end < 2 * CL_SEGMENT:
        store.append()
    assert None not in files.records(store.units)
    os.unlink(store.cl / segment_name(0))  # retention: the commitlog starts at its 2nd segment
    below = [u for u in store.units if u[0] < CL_SEGMENT]
    mn, mx = _bounds(files)  # the pull's look at the commitlog's minimum, then its reads
    assert files.records(below) == [None] * len(below)
    assert store.units[mn][0] >= CL_SEGMENT > store.units[mn - 1][0] and mx == len(store.units)
    os.unlink(store.qdir / segment_name(0))  # the builder removes the queue's first segment
    segs = files.queue("T", 0)
    assert segs.starts[0] == PER_FILE * cq.UNIT_SIZE
    assert files.units(segs, 0, PER_FILE) == []  # no segment holds offset 0 now


def test_a_cut_queue_and_segments_made_again(tmp_path):
    store = Store(tmp_path)
    files = PullFiles(tmp_path)
    for _ in range(PER_FILE + 2):
        store.append()
    assert _bounds(files) == (0, PER_FILE + 2)
    store.write_unit(PER_FILE + 1, cq.CqUnit(0, 0, 0))  # cut: a unit zeroed in place
    assert _bounds(files) == (0, PER_FILE + 1)
    os.unlink(store.qdir / segment_name(PER_FILE * cq.UNIT_SIZE))  # cut: a segment removed
    assert _bounds(files) == (0, PER_FILE)
    assert files.units(files.queue("T", 0), PER_FILE, 1) == []
    store.write_unit(PER_FILE, cq.CqUnit(*store.units[0], 7))  # made again: a new file
    assert _bounds(files) == (0, PER_FILE + 1)
    assert files.units(files.queue("T", 0), PER_FILE, 2) == [(*store.units[0], 7)]
    # a segment replaced under its name (another inode) is read as the new file
    path = store.qdir / segment_name(0)
    tmp = path.with_name("replacement")
    tmp.write_bytes(cq.encode(cq.CqUnit(*store.units[1], 9)) + bytes((PER_FILE - 1) * 20))
    os.replace(tmp, path)
    assert files.units(files.queue("T", 0), 0, PER_FILE) == [(*store.units[1], 9)]


def test_a_record_not_there_is_none(tmp_path):
    store = Store(tmp_path)
    files = PullFiles(tmp_path)
    phy, size = store.append()
    assert files.records([(phy, size + 1), (phy + 1, size), (phy, 0)]) == [None] * 3
    assert files.records([(CL_SEGMENT * 5, size)]) == [None]  # no segment holds it


def test_queues_past_the_limit_are_unmapped_and_mapped_again(tmp_path, monkeypatch):
    monkeypatch.setattr(pull_files, "MAX_QUEUES", 2)
    layout = StoreLayout.of(tmp_path)
    for q in range(3):
        layout.queue_dir("T", q).mkdir(parents=True)
        unit = cq.encode(cq.CqUnit(100 * q, 10, 0))
        (layout.queue_dir("T", q) / segment_name(0)).write_bytes(unit + bytes(3 * cq.UNIT_SIZE))
    files = PullFiles(tmp_path)
    first = files.queue("T", 0)
    files.queue("T", 1)
    files.queue("T", 2)  # the third: queue 0 goes, its mappings dropped
    assert first.maps == [] and files.max_offset("T", 0, first) == 0
    again = files.queue("T", 0)
    assert again is not first and files.units(again, 0, 4) == [(0, 10, 0)]


def test_runs_of_adjacent_records_in_one_view(tmp_path):
    store = Store(tmp_path)
    files = PullFiles(tmp_path)
    while store.end < CL_SEGMENT + 1:  # the last record in the second segment
        store.append()
    files.commitlog_min()
    units = store.units
    whole = [files.records([u])[0] for u in units]
    runs = files.runs([units[0], units[1], units[3], units[-2], units[-1]])
    assert runs is not None and [bytes(r) for r in runs] == [
        bytes(whole[0]) + bytes(whole[1]),
        bytes(whole[3]),
        bytes(whole[-2]),
        bytes(whole[-1]),
    ]
    assert files.runs([units[0], (units[1][0], units[1][1] + 1)]) is None  # not that record
    assert files.runs([]) == []


def test_runs_in_commitlog_order_from_the_first_and_last_heads(tmp_path):
    store = Store(tmp_path)
    files = PullFiles(tmp_path)
    for _ in range(8):
        store.append()
    files.commitlog_min()
    units = store.units
    def ordered(pairs: list[tuple[int, int]]) -> list[memoryview] | None:
        phys, sizes = zip(*pairs, strict=True)
        return files.ordered_runs(phys, sizes)

    whole = b"".join(bytes(r) for r in files.runs(units[1:7]) or [])
    one = ordered(units[1:7])  # adjacent: one view
    assert one is not None and len(one) == 1 and bytes(one[0]) == whole
    apart = ordered([units[1], units[3], units[6]])  # a view each
    assert apart is not None and [bytes(r) for r in apart] == [
        bytes(r) for r in files.runs([units[1], units[3], units[6]]) or []
    ]
    mixed = [units[1], units[2], units[3], units[5], units[6]]  # two runs: a view each
    two = ordered(mixed)
    assert two is not None and [bytes(r) for r in two] == [
        bytes(r) for r in files.runs(mixed) or []
    ] and len(two) == 2
    last = units[6]
    assert ordered([units[1], (last[0], last[1] + 1)]) is None
    with open(store.cl / segment_name(0), "r+b") as f:  # the commitlog cut back below the last
        f.seek(last[0])
        f.write(bytes(last[1]))
    assert ordered([units[1], units[3], last]) is None


def test_columns_of_written_units_only(tmp_path):
    store = Store(tmp_path)
    files = PullFiles(tmp_path)
    for _ in range(6):
        store.append()
    segs = files.queue("T", 0)
    phys, sizes = files.columns(segs, 1, 3) or ((), ())
    assert list(zip(phys, sizes, strict=True)) == store.units[1:4]
    assert files.columns(segs, 4, 4) is None  # past the segment holding offset 4
    assert files.columns(segs, 6, 2) is None  # not written
    assert files.columns(segs, 9, 1) is None  # no segment holds it


def test_a_directory_checked_once_an_event_loop_iteration(tmp_path):
    store = Store(tmp_path)
    files = PullFiles(tmp_path)
    for _ in range(6):
        store.append()

    async def pulls() -> list[tuple[int, int]]:
        seen = [_bounds(files)]
        (store.qdir / segment_name(0)).unlink()  # the builder removes the first segment
        seen.append(_bounds(files))  # in the same iteration: as checked in it
        await asyncio.sleep(0)  # a pull read after the check
        seen.append(_bounds(files))
        return seen

    assert asyncio.run(pulls()) == [(0, 6), (0, 6), (PER_FILE, 6)]
    (store.qdir / segment_name(PER_FILE * cq.UNIT_SIZE)).unlink()
    assert _bounds(files) == (0, 0)  # outside a loop: every use checks
