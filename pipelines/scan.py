"""A scan of every record of one or several commitlogs on Spark, in ranges, with the
rebuild's rule for the end of each commitlog's data: nothing after its first corrupt record (or
a segment that ends without a blank marker) counts. ``outcome`` judges what the tasks report of
each range's end. Several stores (each a broker's) are one plan: their ranges one after the
other, numbered over all of them, each tagged with its broker."""

from dataclasses import dataclass, field, replace
from itertools import groupby
from pathlib import Path

from pyspark.accumulators import AccumulatorParam

from pipelines.source import (
    DEFAULT_SPLIT_BYTES,
    ByteRange,
    Corruption,
    RangeEnd,
    commitlog_dir,
    data_end,
    list_segments,
    misaligned,
    plan_ranges,
    valid_prefix,
)
from pipelines.stores import StoreRef, as_stores


class DictParam(AccumulatorParam):
    """Accumulates a dict (range number -> (RangeEnd, records))."""

    def zero(self, value):
        return {}

    def addInPlace(self, value1, value2):
        merged = dict(value1)
        merged.update(value2)
        return merged


@dataclass
class ScanPlan:
    ranges: list[ByteRange]
    total_bytes: int
    brokers: list[str] = field(default_factory=list)  # the named stores' brokers, in order

    @classmethod
    def of(cls, stores: str | Path | list[StoreRef], split_bytes: int = DEFAULT_SPLIT_BYTES,
           walk: bool = False) -> "ScanPlan":
        """Ranges of every store, store after store, cut near every ``split_bytes`` (``walk``:
        cut by walking record sizes)."""
        ranges: list[ByteRange] = []
        total = 0
        stores = as_stores(stores)
        for store in stores:
            segments = list_segments(commitlog_dir(store.path))
            for r in plan_ranges(segments, split_bytes, walk):
                ranges.append(replace(r, number=len(ranges), broker=store.broker))
            total += sum(map(data_end, segments))
        return cls(ranges, total, [s.broker for s in stores if s.broker is not None])

    def by_store(self) -> list[list[ByteRange]]:
        """The ranges of each store, in order."""
        return [list(g) for _, g in groupby(self.ranges, key=lambda r: r.broker)]


@dataclass
class ScanOutcome:
    included: set[int]
    corruptions: list[Corruption] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    records: int = 0
    bytes: int = 0
    complete: bool = True  # False: ranges holding records were left out after the fact
    misaligned: list[ByteRange] = field(default_factory=list)  # non-empty: scan again, walked
    brokers: dict[str, int] = field(default_factory=dict)  # records per broker (named stores)


def outcome(plan: ScanPlan, ends: dict[int, tuple[RangeEnd, int]]) -> ScanOutcome:
    """What a scan found, once every range has reported its end."""
    bad = misaligned(plan.ranges, {n: e for n, (e, _) in ends.items()})
    if bad:
        return ScanOutcome(set(), misaligned=bad, complete=False)
    out = ScanOutcome(set(), brokers=dict.fromkeys(plan.brokers, 0))
    for ranges in plan.by_store():  # each commitlog's data ends on its own
        included, notes = valid_prefix(ranges, {n: e for n, (e, _) in ends.items()},
                                       {n: c > 0 for n, (_, c) in ends.items()})
        broker = ranges[0].broker
        out.included |= included
        out.notes += [f"broker {broker}: {n}" for n in notes] if broker is not None else notes
        if broker is not None:
            out.brokers[broker] = sum(ends[n][1] for n in included)
    for n in sorted(out.included):
        end, count = ends[n]
        out.records += count
        out.bytes += end.position - plan.ranges[n].begin
        if end.corruption is not None:
            out.corruptions.append(end.corruption)
    out.complete = all(ends[n][1] == 0 for n in ends if n not in included)
    return out
