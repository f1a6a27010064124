"""Concurrency: 8 producers put single messages at once over 4 queues of one topic.

Checked: per-queue offsets in the acknowledgements are unique and contiguous; records do not
overlap in the commitlog; after the builders catch up every queue holds exactly the
acknowledged messages at their offsets (Pull), every batch-shared key finds its messages
once, and the index files hold exactly one entry per (key, record): unique key, own key and
shared key of every message, each reachable once. Short: 8 × 600 in ``make test``;
soak: 8 × 10,000.
"""

import random
import threading
from collections import Counter

import pytest

from rmqstore.formats.javahash import index_hash
from rmqstore.v1 import commitlog_pb2, common_pb2
from tests.reliability.cluster import INDEX_ENTRIES, INDEX_SLOTS, Cluster, Sent, verify
from tests.services.indexer.helpers import index_files, open_index

pytestmark = pytest.mark.integration
TOPIC = "Busy"
PRODUCERS = 8
QUEUES = 4


def produce(cluster: Cluster, n: int, count: int, out: list[Sent], errors: list[str]) -> None:
    rng = random.Random(n)
    stub = cluster.writer
    try:
        for i in range(count):
            m = common_pb2.Message(topic=TOPIC, queue_id=rng.randrange(QUEUES),
                                   body=rng.randbytes(rng.randint(1, 400)), tags="T",
                                   keys=f"p{n}-{i} p{n}-b{i // 10}")
            r = stub.Put(commitlog_pb2.PutRequest(message=m), timeout=30)
            key, group = m.keys.split(" ")
            out.append(Sent(key, group, m.tags, m.body, r))
    except Exception as e:  # reported by the test
        errors.append(f"producer {n}: {e!r}")


def chained_pairs(store) -> Counter:
    """(key hash, phy offset) of every index entry reachable from a slot, with counts."""
    pairs: Counter = Counter()
    entries = 0
    for path in index_files(store / "index"):
        f = open_index(path, INDEX_SLOTS, INDEX_ENTRIES)
        count = f.header.index_count
        entries += max(count - 1, 0)
        for s in range(f.slots):
            n = f.slot(s)
            while 0 < n < count:
                h, phy, _diff, prev = f.entry(n)
                pairs[(h, phy)] += 1
                n = prev
    pairs[("entries", None)] = entries
    return pairs


def run(tmp_path, per_producer: int, flush: str) -> None:
    cluster = Cluster(tmp_path / "store", flush=flush).start_all()
    try:
        outs: list[list[Sent]] = [[] for _ in range(PRODUCERS)]
        errors: list[str] = []
        threads = [threading.Thread(target=produce, args=(cluster, n, per_producer, outs[n],
                                                          errors)) for n in range(PRODUCERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        sent = [s for o in outs for s in o]
        assert len(sent) == PRODUCERS * per_producer
        per_queue: dict[int, list[int]] = {}
        for s in sent:
            per_queue.setdefault(s.result.queue_id, []).append(s.result.queue_offset)
        for qid, offs in per_queue.items():
            assert sorted(offs) == list(range(len(offs))), f"queue {qid} offsets"
        spans = sorted((s.result.phy_offset, s.result.size) for s in sent)
        overlaps = sum(1 for (a, n), (b, _) in zip(spans, spans[1:], strict=False) if a + n > b)
        end = cluster.wait_caught_up(timeout=120)
        found = verify(cluster, sent, by_key=False, by_id=False)
        pairs = chained_pairs(cluster.store)
        missing = duplicated = 0
        for s in sent:
            for key in (s.result.unique_key, s.key, s.group):
                c = pairs[(index_hash(f"{TOPIC}#{key}"), s.result.phy_offset)]
                missing += c == 0
                duplicated += c > 1
        sizes = dict(sorted(Counter(s.result.queue_id for s in sent).items()))
        print(f"concurrency ({flush} flush): {PRODUCERS} producers x {per_producer} = "
              f"{len(sent)} puts over {QUEUES} queues {sizes}, "
              f"commitlog {end} bytes, overlaps {overlaps}, pulled {found.pulled}, index "
              f"entries {pairs[('entries', None)]}, missing {missing}, duplicated {duplicated}, "
              f"problems {len(found.problems)}")
        assert overlaps == 0
        assert not found.problems, "\n".join(found.problems)
        assert found.pulled == len(sent)
        assert missing == 0 and duplicated == 0
        assert pairs[("entries", None)] == 3 * len(sent)
        assert set(cluster.stop_all().values()) == {0}
    finally:
        cluster.stop_all()


def test_eight_producers_short(tmp_path):
    run(tmp_path, 600, "sync")


@pytest.mark.soak
def test_eight_producers_ten_thousand_each(tmp_path):
    run(tmp_path, 10_000, "async")
