"""Offset by time: exact LOWER/UPPER boundaries, first/last of equal runs; queue offsets."""

import bisect
import random

import pytest

from rmqstore.errors import InvalidArgumentError, NotFoundError
from services.query.offset_by_time import Boundary, TimeSearch
from services.query.queue_reader import QueueCatalog
from tests.aio import run
from tests.services.query.segment_source import SegmentRecordSource
from tests.services.query.store_builder import build_store, random_messages


def _lower(times: list[int], t: int) -> int:
    return bisect.bisect_left(times, t)  # first at or after t; len(times) if none


def _upper(times: list[int], t: int) -> int:
    return bisect.bisect_right(times, t) - 1  # last at or before t; -1 if none


@pytest.mark.golden
def test_golden_queues(golden_store, golden_source, golden_expected):
    search = TimeSearch(QueueCatalog(golden_store / "consumequeue"), golden_source)
    time_of = {m["stored"]["phyOffset"]: m["stored"]["storeTimestamp"]
               for m in golden_expected["messages"]}
    for name, units in golden_expected["consumeQueues"].items():
        topic, qid = name.split("/")
        times = [time_of[u["phyOffset"]] for u in units]
        bounds = golden_expected["consumeQueueMaxOffsets"][name]
        assert run(search.offsets(topic, int(qid))) == (bounds["min"], bounds["max"])
        probes = {times[0] - 10**6, times[-1] + 10**6}
        for t in times:
            probes |= {t - 1, t, t + 1}
        for t in sorted(probes):
            assert run(search.offset_by_time(topic, int(qid), t)) == _lower(times, t)
            upper = run(search.offset_by_time(topic, int(qid), t, Boundary.UPPER))
            assert upper == _upper(times, t)


@pytest.mark.parametrize("seed", range(3))
def test_equal_time_runs(tmp_path, seed):
    rng = random.Random(seed)
    msgs = random_messages(rng, rng.choice((1, 2, 17, 300)), ["T1"], ["k"])
    for m in msgs:
        m["queue_id"] = 0
    store = build_store(tmp_path / "store", msgs, slots=5, entries=2000,
                        cq_entries_per_file=rng.choice((7, 300_000)))
    source = SegmentRecordSource(store.root / "commitlog", store.segment_size)
    search = TimeSearch(QueueCatalog(store.root / "consumequeue"), source)
    times = [m.store_timestamp for m in store.messages]
    assert run(search.offsets("T1", 0)) == (0, len(times))
    for t in sorted({times[0] - 5, times[-1] + 5, *times, *(x + 1 for x in times)}):
        assert run(search.offset_by_time("T1", 0, t, Boundary.LOWER)) == _lower(times, t)
        assert run(search.offset_by_time("T1", 0, t, Boundary.UPPER)) == _upper(times, t)


@pytest.mark.golden
def test_unknown_and_invalid(golden_store, golden_source):
    search = TimeSearch(QueueCatalog(golden_store / "consumequeue"), golden_source)
    with pytest.raises(NotFoundError, match="NoSuch"):
        run(search.offset_by_time("NoSuch", 0, 0))
    with pytest.raises(NotFoundError, match="queue 9"):
        run(search.offsets("TopicA", 9))
    with pytest.raises(InvalidArgumentError):
        run(search.offsets("TopicA", -1))
    with pytest.raises(InvalidArgumentError):
        run(search.offset_by_time("bad/topic", 0, 0))
