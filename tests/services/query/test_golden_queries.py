"""The 40 golden index queries against RocketMQ's own store, checked against the messages."""

import pytest

from services.query.app import QueryApp
from tests.aio import run
from tests.services.query.golden_model import DIFFERS_FROM_ROCKETMQ, expected_page, matching

pytestmark = pytest.mark.golden


def _query(golden_expected: dict, qid: int) -> dict:
    (q,) = [q for q in golden_expected["queries"] if q["id"] == qid]
    return q


@pytest.mark.parametrize("qid", range(1, 41))
def test_golden_query_returns_exactly_the_matching_messages(golden_app: QueryApp,
                                                            golden_expected: dict, qid: int):
    q = _query(golden_expected, qid)
    want, truncated = expected_page(golden_expected["messages"], q)
    res = run(golden_app.keys.by_key(q["topic"], q["key"], q["begin"], q["end"], q["maxNum"]))
    assert [r.physical_offset for r in res.records] == want, q["note"]
    assert res.truncated == truncated
    assert bool(res.cursor) == truncated
    assert not res.budget_exhausted
    for r in res.records:
        assert r.topic == q["topic"]
        assert q["key"] in r.keys.split(" ") or r.uniq_key == q["key"]
        assert q["begin"] <= r.store_timestamp <= q["end"]


def test_differences_from_rocketmq_are_the_named_ones(golden_expected: dict):
    differs = set()
    for q in golden_expected["queries"]:
        want, _ = expected_page(golden_expected["messages"], q)
        if sorted(want) != sorted(q["expected"]["queryMessageKeyMatch"]):
            differs.add(q["id"])
    assert differs == set(DIFFERS_FROM_ROCKETMQ)


def test_colliding_keys_aa_and_bb_never_leak(golden_app: QueryApp, golden_expected: dict):
    for key, other in (("Aa", "BB"), ("BB", "Aa")):
        res = run(golden_app.keys.by_key("TopicA", key))
        assert res.records, key
        for r in res.records:
            assert key in r.keys.split(" ")
            assert other not in r.keys.split(" ")
        assert [r.physical_offset for r in res.records] == matching(
            golden_expected["messages"], "TopicA", key, 0, 2**62
        )


@pytest.mark.parametrize("page", [1, 7, 64])
def test_cursor_pages_through_the_hot_key(golden_app: QueryApp, golden_expected: dict,
                                          page: int):
    want = matching(golden_expected["messages"], "TopicB", "hot", 0, 2**62)
    got: list[int] = []
    cursor = ""
    for _ in range(len(want) + 2):
        res = run(golden_app.keys.by_key("TopicB", "hot", 0, 0, page, cursor))
        assert len(res.records) <= page
        got.extend(r.physical_offset for r in res.records)
        if not res.truncated:
            break
        cursor = res.cursor
    assert got == want


def test_exact_begin_hit_kept_across_index_rollover(golden_app: QueryApp,
                                                    golden_expected: dict):
    """Every message found by its own exact store time as [begin, end] (both index files)."""
    for m in golden_expected["messages"]:
        s = m["stored"]
        if s["sysFlag"] & 0xC == 0xC or not s.get("uniqKey"):
            continue
        t = s["storeTimestamp"]
        res = run(golden_app.keys.by_key(s["topic"], s["uniqKey"], t, t, 0))
        assert s["phyOffset"] in [r.physical_offset for r in res.records], m["i"]
