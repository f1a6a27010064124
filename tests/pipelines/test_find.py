"""Find records by key and time range by scanning the commitlog."""

from pathlib import Path

import pytest

from pipelines.find import Criteria, find
from pipelines.stores import StoreRef
from pipelines.synthetic import mixed_messages, write_commitlog
from rmqstore.errors import InvalidArgumentError
from tests.pipelines.forged import forged_store

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[Path, list]:
    root = tmp_path_factory.mktemp("find") / "store"
    written = write_commitlog(root, mixed_messages(400, step_ms=10), segment_size=16 * 1024)
    return root, written


def _expect(written, topic=None, key=None, begin=None, end=None) -> list[int]:
    out = []
    for w in written:
        m = w.message
        keys = [k for k in m.properties.get("KEYS", "").split(" ") if k]
        if topic is not None and m.topic != topic:
            continue
        if key is not None and key not in keys and key != m.properties.get("UNIQ_KEY"):
            continue
        if begin is not None and m.store_timestamp < begin:
            continue
        if end is not None and m.store_timestamp > end:
            continue
        out.append(w.phy_offset)
    return out


@pytest.mark.parametrize("criteria", [
    dict(topic="Topic1", key="Aa"),
    dict(topic="Topic2", key="user-5", begin=1_700_000_001_000, end=1_700_000_002_500),
    dict(key="order-42"),
    dict(key="7F00000100002A9F0000000000000007"),
    dict(begin=1_700_000_000_990, end=1_700_000_001_000),  # inclusive at both ends
    dict(topic="SCHEDULE_TOPIC_XXXX"),
    dict(topic="Topic0", key="no-such-key"),
], ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_find_matches_exactly(spark, store, criteria, tmp_path: Path):
    root, written = store
    result = find(spark, root, Criteria(**criteria), tmp_path / "found", split_bytes=6_000)
    expected = _expect(written, **criteria)
    assert _offsets(result) == expected and result.matches == len(expected)
    assert result.records_scanned == len(written)
    # the matches are a dataset of JSON lines, one file per range that had any
    assert sorted(p.name for p in result.out.iterdir()) == sorted(
        ["_SUCCESS"] + [p.name for p in result.parts()])
    assert len(result.parts()) <= len(expected)
    assert [m["phyOffset"] for m in result.read(limit=3)] == expected[:3]


def _offsets(result) -> list[int]:
    return [m["phyOffset"] for m in result.read()]


def test_find_refuses_an_output_that_holds_files(spark, store, tmp_path: Path):
    root, _ = store
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("")
    with pytest.raises(InvalidArgumentError, match="not empty"):
        find(spark, root, Criteria(topic="Topic1"), tmp_path / "taken")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_find_needs_criteria_in_order():
    with pytest.raises(InvalidArgumentError):
        Criteria()
    with pytest.raises(InvalidArgumentError, match="after end"):
        Criteria(begin=5, end=4)


def test_find_stops_at_a_corrupt_record_and_says_where(spark, tmp_path: Path):
    root = tmp_path / "store"
    written = write_commitlog(root, mixed_messages(200, step_ms=10), segment_size=1 << 20)
    bad = written[120]
    seg = root / "commitlog" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    data[bad.phy_offset + bad.size - 120] ^= 0xFF  # inside the body: its CRC fails
    seg.write_bytes(bytes(data))
    result = find(spark, root, Criteria(topic="Topic1"), tmp_path / "found", split_bytes=6_000)
    assert _offsets(result) == _expect(written[:120], topic="Topic1")
    assert result.records_scanned == 120
    [c] = result.corruptions
    assert (c.offset, "CRC" in c.reason) == (bad.phy_offset, True)


def test_find_cuts_again_by_walking_after_a_cut_inside_a_record(spark, tmp_path: Path):
    root, written, fake = forged_store(tmp_path)
    result = find(spark, root, Criteria(topic="Topic1"), tmp_path / "found", split_bytes=fake)
    assert _offsets(result) == _expect(written, topic="Topic1")
    assert result.records_scanned == len(written) and result.corruptions == []
    [note] = result.notes
    assert f"cut at position {fake} did not begin at a record" in note


def test_find_across_two_brokers_names_each_match_s_broker(spark, store, tmp_path: Path):
    root_a, written_a = store
    root_b = tmp_path / "b"  # its own messages; keys and offsets like broker a's
    written_b = write_commitlog(root_b, mixed_messages(200, step_ms=10, topics=2),
                                segment_size=1 << 20)
    bad = written_b[120]  # broker b's data ends there; broker a's is read to its end
    seg = root_b / "commitlog" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    data[bad.phy_offset + bad.size - 120] ^= 0xFF
    seg.write_bytes(bytes(data))
    stores = [StoreRef("b", root_b), StoreRef("a", root_a)]
    result = find(spark, stores, Criteria(topic="Topic1", key="Aa"), tmp_path / "found",
                  split_bytes=12_000)
    expected = ([("b", o) for o in _expect(written_b[:120], topic="Topic1", key="Aa")]
                + [("a", o) for o in _expect(written_a, topic="Topic1", key="Aa")])
    assert [(m["broker"], m["phyOffset"]) for m in result.read()] == expected  # store order
    assert result.matches == len(expected) and {b for b, _ in expected} == {"a", "b"}
    assert result.brokers == {"b": 120, "a": len(written_a)}
    assert result.records_scanned == 120 + len(written_a)
    [c] = result.corruptions
    assert c.offset == bad.phy_offset and str(root_b) in c.file
    assert all(n.startswith("broker b: ") for n in result.notes) and result.notes
