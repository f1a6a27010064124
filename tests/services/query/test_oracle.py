"""Key lookups against an in-memory model of what was put, over small index files.

Small slot counts force long shared chains (collisions, equal hashes such as Aa/BB) and small
entry counts force roll-overs to new index files; answers must equal the model's exactly,
page after page.
"""

import asyncio
import random

import pytest

from rmqstore.formats.index_file import ENTRY, HEADER, IndexFile
from rmqstore.formats.javahash import index_hash
from services.query import index_reader
from services.query.app import QueryApp
from services.query.budget import BudgetLimits
from services.query.index_reader import PAUSE_EVERY
from services.query.lookup import KeyLookup
from tests.aio import run
from tests.services.query.segment_source import SegmentRecordSource
from tests.services.query.store_builder import (
    BuiltStore,
    build_store,
    open_mmap,
    random_messages,
)

VOCAB = ["Aa", "BB", "AaAa", "BBBB", "k1", "k2", "k3", "order-1", "order-2", "x"]
TOPICS = ["T1", "T2"]


def _app(store: BuiltStore, limits: BudgetLimits | None = None) -> tuple[QueryApp, object]:
    source = SegmentRecordSource(store.root / "commitlog", store.segment_size)
    app = QueryApp.build(store.root, source, store.slots, store.entries, limits)
    return app, source


def _page_all(keys: KeyLookup, topic: str, key: str, begin: int, end: int, limit: int,
              max_pages: int = 10_000) -> tuple[list[int], int]:
    got: list[int] = []
    cursor, pages = "", 0
    while pages < max_pages:
        pages += 1
        res = run(keys.by_key(topic, key, begin, end, limit, cursor))
        assert len(res.records) <= limit
        got.extend(r.physical_offset for r in res.records)
        if not res.truncated:
            return got, pages
        assert res.cursor
        cursor = res.cursor
    raise AssertionError("paging did not end")


@pytest.mark.parametrize("seed", range(4))
def test_random_queries_match_the_model(tmp_path, seed: int):
    rng = random.Random(seed)
    msgs = random_messages(rng, 300, TOPICS, VOCAB)
    store = build_store(tmp_path / "store", msgs, slots=rng.choice((1, 3, 7)),
                        entries=rng.choice((20, 60, 150)))
    assert len(list((tmp_path / "store" / "index").iterdir())) > 1  # roll-overs happened
    app, _ = _app(store)
    times = [m.store_timestamp for m in store.messages]
    uniq = [m.uniq_key for m in store.messages if m.uniq_key]
    for _ in range(60):
        topic = rng.choice(TOPICS)
        key = rng.choice(VOCAB + [rng.choice(uniq), "absent", ""])
        begin = rng.choice((0, rng.choice(times), rng.choice(times) - rng.randrange(2000)))
        end = rng.choice((0, rng.choice(times), rng.choice(times) + rng.randrange(2000)))
        if end and end < begin:
            begin, end = end, begin
        limit = rng.choice((1, 2, 5, 64, 1000))
        want = store.expected(topic, key, max(begin, 0), end or 2**62)
        res = run(app.keys.by_key(topic, key, max(begin, 0), end, limit))
        assert [r.physical_offset for r in res.records] == want[:limit]
        assert res.truncated == (len(want) > limit)
        got, _ = _page_all(app.keys, topic, key, max(begin, 0), end, limit)
        assert got == want


def test_tiny_budgets_still_page_to_the_exact_answer(tmp_path):
    rng = random.Random(11)
    store = build_store(tmp_path / "store", random_messages(rng, 200, TOPICS, VOCAB),
                        slots=1, entries=40)
    app, _ = _app(store, BudgetLimits(hops=5, bytes=10**9, millis=60_000))
    res = run(app.keys.by_key("T1", "k1", 0, 0, 1000))
    assert res.budget_exhausted and res.truncated and res.cursor
    assert res.hops <= 5
    got, pages = _page_all(app.keys, "T1", "k1", 0, 0, 1000)
    assert got == store.expected("T1", "k1", 0, 2**62)
    assert pages > 1

    app2, _ = _app(store, BudgetLimits(hops=10**9, bytes=1, millis=60_000))
    got2, _ = _page_all(app2.keys, "T1", "k1", 0, 0, 1000)
    assert got2 == got


def test_entries_at_or_past_the_header_count_are_not_returned(tmp_path):
    """A builder writes the entry, then the slot, then the header: a reader that sees the new
    slot but the old header must not return the new entry, yet still find the older ones."""
    rng = random.Random(5)
    msgs = random_messages(rng, 30, ["T1"], ["k1"])
    for m in msgs:
        m["keys"] = "k1"
    store = build_store(tmp_path / "store", msgs, slots=3, entries=1000)
    (path,) = sorted((tmp_path / "store" / "index").iterdir())
    app, _ = _app(store)
    before = [r.physical_offset for r in run(app.keys.by_key("T1", "k1")).records]
    assert before == store.expected("T1", "k1", 0, 2**62)
    mm = open_mmap(path)
    index = IndexFile(mm, store.slots, store.entries)
    old = index.header
    newest = store.messages[-1]
    index.put(index_hash("T1#k1"), newest.phy, newest.store_timestamp + 5)
    HEADER.pack_into(mm, 0, *old)  # header not yet updated
    mm.flush()
    assert index.slot(index_hash("T1#k1") % store.slots) == old.index_count  # slot points at it
    after = run(app.keys.by_key("T1", "k1"))
    assert [r.physical_offset for r in after.records] == before
    mm.close()


def test_cursor_of_another_query_is_refused(tmp_path):
    from rmqstore.errors import InvalidArgumentError

    rng = random.Random(3)
    store = build_store(tmp_path / "store", random_messages(rng, 100, TOPICS, VOCAB),
                        slots=2, entries=500)
    app, _ = _app(store)
    res = run(app.keys.by_key("T1", "k1", 0, 0, 1))
    assert res.truncated
    for other in (("T1", "k2", 0, 0), ("T2", "k1", 0, 0), ("T1", "k1", 1, 0),
                  ("T1", "k1", 0, 2**40)):
        with pytest.raises(InvalidArgumentError, match="another query"):
            run(app.keys.by_key(*other, 1, res.cursor))
    for garbage in ("x", "!!!", res.cursor[:-3], "A" * 200):
        with pytest.raises(InvalidArgumentError):
            run(app.keys.by_key("T1", "k1", 0, 0, 1, garbage))


def test_first_entry_time_shifted_like_rocketmq_is_still_found(tmp_path):
    """RocketMQ measures a new file's entry #1 against the previous file's end (spec §6.3 Q2),
    so its index time can read later than its store time; a range ending at the real store
    time must still find it."""
    msgs = random_messages(random.Random(2), 5, ["T1"], ["k1"])
    for m in msgs:
        m["keys"] = "k1"
    store = build_store(tmp_path / "store", msgs, slots=3, entries=100)
    (path,) = sorted((tmp_path / "store" / "index").iterdir())
    mm = open_mmap(path)
    index = IndexFile(mm, store.slots, store.entries)
    kh, phy, _diff, prev = index.entry(1)
    ENTRY.pack_into(mm, HEADER.size + 4 * store.slots + ENTRY.size, kh, phy, 15, prev)
    mm.flush()
    mm.close()
    app, _ = _app(store)
    first = store.messages[0]
    res = run(app.keys.by_key("T1", first.uniq_key, 0, first.store_timestamp))
    assert [r.physical_offset for r in res.records] == [first.phy]


def test_index_file_replaced_under_its_name_is_read_again(tmp_path, monkeypatch):
    """A file swapped in under the same name (a rebuild's, say) is read again once the
    catalog looks at the directory (at once here; within ``CHECK_NS`` in general)."""
    monkeypatch.setattr(index_reader, "CHECK_NS", 0)
    rng = random.Random(8)
    msgs = random_messages(rng, 40, ["T1"], ["k1"])
    for m in msgs:
        m["keys"] = "k1"
    store = build_store(tmp_path / "store", msgs, slots=3, entries=1000)
    (path,) = sorted((tmp_path / "store" / "index").iterdir())
    app, _ = _app(store)
    assert len(run(app.keys.by_key("T1", "k1", 0, 0, 1000)).records) == 40
    index = IndexFile(bytearray(path.read_bytes()), store.slots, store.entries)
    hdr = index.header
    # keep entries 1..20 only (every message's keys are k1 and maybe a UNIQ_KEY)
    cut = hdr._replace(index_count=21)
    fresh = bytearray(len(index.buf))
    fresh[: len(index.buf)] = index.buf
    HEADER.pack_into(fresh, 0, *cut)
    tmp = path.with_name("rebuilt.tmp")
    tmp.write_bytes(bytes(fresh))
    tmp.replace(path)
    got = [r.physical_offset for r in run(app.keys.by_key("T1", "k1", 0, 0, 1000)).records]
    kept = sorted({index.entry(n)[1] for n in range(1, 21)}, reverse=True)
    assert 0 < len(kept) < 40 and got == kept


def test_a_long_walk_lets_other_queries_run(tmp_path):
    """One slot holds every key, so finding the oldest message walks all (about 13,000)
    entries; on the event loop the walk pauses every 4,096 hops and another task runs."""
    rng = random.Random(3)
    msgs = random_messages(rng, 7000, ["T1"], ["x"])
    for i, m in enumerate(msgs):
        m["keys"] = "needle" if i == 0 else f"x{i}"
    store = build_store(tmp_path / "store", msgs, slots=1, entries=20_000)
    app, _ = _app(store)
    ran_meanwhile = 0

    async def both() -> list[int]:
        nonlocal ran_meanwhile
        walk = asyncio.ensure_future(app.keys.by_key("T1", "needle"))
        while not walk.done():
            ran_meanwhile += 1
            await asyncio.sleep(0)
        return [r.physical_offset for r in walk.result().records]

    assert run(both()) == store.expected("T1", "needle", 0, 2**62)
    assert PAUSE_EVERY == 4096  # the message count above is chosen for it
    assert ran_meanwhile >= 1 + 3  # before the walk began, then at each pause
