"""What the broker keeps of the writer's dispatch stream for long polling (``Arrivals.took``):
each queue's end and last units, consecutive, and the pulls it wakes. The stream itself, with
a real writer and a stopped consume-queue builder, is in ``test_pull``."""

import asyncio

from rmqstore.formats.commitlog import TRANSACTION_COMMIT_TYPE, TRANSACTION_PREPARED_TYPE
from rmqstore.v1 import commitlog_pb2
from services.remoting import pull_arrivals
from services.remoting.pull_arrivals import Arrivals


def _batch(*records: tuple[str, int, int, int], flags: list[int] | None = None,
           end: int = 0) -> commitlog_pb2.DispatchBatch:  # fmt: skip
    """Records (topic, queue, queue offset, commitlog offset), 100 bytes each."""
    b = commitlog_pb2.DispatchBatch(next_offset=end)
    for i, (topic, q, o, phy) in enumerate(records):
        b.topic.append(topic)
        b.queue_id.append(q)
        b.queue_offset.append(o)
        b.phy_offset.append(phy)
        b.size.append(100)
        b.tags_code.append(7)
        b.sys_flag.append(flags[i] if flags else 0)
    return b


def _arrivals() -> Arrivals:
    return Arrivals(writer=None)  # type: ignore[arg-type]  # ``took`` never asks the writer


def test_units_kept_per_queue_and_taken_from_an_offset():
    a = _arrivals()
    a.took(_batch(("T", 0, 5, 1000), ("T", 1, 0, 1100), ("T", 0, 6, 1200), end=1300))
    assert (a.tail_start("T", 0), a.tail_end("T", 0), a.position) == (5, 7, 1300)
    assert a.units_from("T", 0, 6) == [(1200, 100, 7)]
    assert a.units_from("T", 0, 5) == [(1000, 100, 7), (1200, 100, 7)]
    assert a.units_from("T", 0, 4) == [] and a.units_from("T", 0, 7) == []
    assert a.knows("T", 0, 7) and a.knows("T", 0, 2) and not a.knows("T", 0, 8)
    assert not a.knows("T", 2, 0) and a.tail_end("T", 2) == 0


def test_a_gap_starts_the_queue_anew_and_prepared_records_are_not_units():
    a = _arrivals()
    a.took(_batch(("T", 0, 0, 0), ("T", 0, 1, 100)))
    a.took(_batch(("T", 0, 0, 900), ("T", 0, 9, 950), ("T", 0, 2, 999),
                  flags=[TRANSACTION_PREPARED_TYPE, 0, TRANSACTION_COMMIT_TYPE]))  # fmt: skip
    # the prepared record has no unit; 9 does not follow 1: the queue starts again at 9, and
    # 2 does not follow 9 either
    assert a.units_from("T", 0, 2) == [(999, 100, 7)] and a.tail_start("T", 0) == 2
    assert a.arrived[("T", 0)] == 10  # the end the stream saw


def test_units_and_queues_kept_are_bounded(monkeypatch):
    monkeypatch.setattr(pull_arrivals, "MAX_TAILS", 2)
    a = _arrivals()
    a.took(_batch(*(("T", 0, o, 100 * o) for o in range(pull_arrivals.TAIL_UNITS + 10))))
    assert a.tail_start("T", 0) == 10 and a.tail_end("T", 0) == pull_arrivals.TAIL_UNITS + 10
    a.took(_batch(("T", 1, 0, 0), ("T", 2, 0, 0)))  # a third queue: the first kept goes
    assert set(a.tails) == {("T", 1), ("T", 2)}


def test_a_record_wakes_the_pulls_held_on_its_queue():
    async def main() -> None:
        a = _arrivals()
        ev0, ev1 = a.event("T", 0), a.event("T", 1)
        a.took(_batch(("T", 0, 0, 0)))
        assert ev0.is_set() and not ev1.is_set()
        assert a.event("T", 0) is not ev0  # the next wait takes a new one

    asyncio.run(main())
