"""A scan of every record of a commitlog on Spark, in ranges, with the rebuild's rule for the
end of the data: nothing after the first corrupt record (or a segment that ends without a
blank marker) counts. ``outcome`` judges what the tasks report of each range's end."""

from dataclasses import dataclass, field
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

    @classmethod
    def of(cls, store: str | Path, split_bytes: int = DEFAULT_SPLIT_BYTES,
           walk: bool = False) -> "ScanPlan":
        """Ranges cut near every ``split_bytes`` (``walk``: cut by walking record sizes)."""
        segments = list_segments(commitlog_dir(store))
        return cls(plan_ranges(segments, split_bytes, walk), sum(map(data_end, segments)))


@dataclass
class ScanOutcome:
    included: set[int]
    corruptions: list[Corruption] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    records: int = 0
    bytes: int = 0
    complete: bool = True  # False: ranges holding records were left out after the fact
    misaligned: list[ByteRange] = field(default_factory=list)  # non-empty: scan again, walked


def outcome(plan: ScanPlan, ends: dict[int, tuple[RangeEnd, int]]) -> ScanOutcome:
    """What a scan found, once every range has reported its end."""
    bad = misaligned(plan.ranges, {n: e for n, (e, _) in ends.items()})
    if bad:
        return ScanOutcome(set(), misaligned=bad, complete=False)
    included, notes = valid_prefix(plan.ranges, {n: e for n, (e, _) in ends.items()},
                                   {n: c > 0 for n, (_, c) in ends.items()})
    out = ScanOutcome(included, notes=notes)
    for n in sorted(included):
        end, count = ends[n]
        out.records += count
        out.bytes += end.position - plan.ranges[n].begin
        if end.corruption is not None:
            out.corruptions.append(end.corruption)
    out.complete = all(ends[n][1] == 0 for n in ends if n not in included)
    return out
