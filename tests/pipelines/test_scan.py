"""A scan plan over the stores of several brokers, and where each one's data ends."""

from pathlib import Path

from pipelines.scan import ScanPlan, outcome
from pipelines.source import ENDED_AT_CORRUPT, Corruption, RangeEnd, iter_range
from pipelines.stores import StoreRef
from pipelines.synthetic import mixed_messages, write_commitlog


def _ends(plan: ScanPlan) -> dict[int, tuple[RangeEnd, int]]:
    out = {}
    for r in plan.ranges:
        *records, end = iter_range(r)
        out[r.number] = (end, len(records))
    return out


def test_the_ranges_of_several_stores_are_one_plan(tmp_path: Path):
    a = write_commitlog(tmp_path / "a", mixed_messages(200), segment_size=16 * 1024)
    b = write_commitlog(tmp_path / "b", mixed_messages(60), segment_size=8 * 1024)
    one = ScanPlan.of(tmp_path / "a", split_bytes=5_000)
    assert {r.broker for r in one.ranges} == {None} and one.brokers == []
    plan = ScanPlan.of([StoreRef("a", tmp_path / "a"), StoreRef("b", tmp_path / "b")],
                       split_bytes=5_000)  # fmt: skip
    assert [r.number for r in plan.ranges] == list(range(len(plan.ranges)))
    assert [r.broker for r in plan.ranges] == (["a"] * len(one.ranges)
                                               + ["b"] * (len(plan.ranges) - len(one.ranges)))
    assert plan.total_bytes == one.total_bytes + ScanPlan.of(tmp_path / "b").total_bytes
    assert plan.brokers == ["a", "b"] and [len(g) for g in plan.by_store()] == [
        len(one.ranges), len(plan.ranges) - len(one.ranges)]
    ends = _ends(plan)
    result = outcome(plan, ends)  # b's first segment starts at 0, after a's last: no gap
    assert (result.records, result.brokers, result.notes) == (
        len(a) + len(b), {"a": len(a), "b": len(b)}, [])
    # a corrupt record ends its own broker's data only
    bad = plan.ranges[2]
    ends[bad.number] = (RangeEnd(bad.begin, ENDED_AT_CORRUPT,
                                 Corruption(bad.segment.path, bad.begin, 0, "test")), 0)
    result = outcome(plan, ends)
    assert result.brokers["b"] == len(b) and result.brokers["a"] < len(a)
    assert result.included == {0, 1, 2} | {r.number for r in plan.ranges if r.broker == "b"}
    assert result.notes and all(n.startswith("broker a: ") for n in result.notes)
    assert [c.reason for c in result.corruptions] == ["test"]
