"""Query by message id: offset ids read directly, UNIQ_KEYs through the index."""

import pytest

from rmqstore.errors import BudgetExhaustedError, InvalidArgumentError, NotFoundError
from rmqstore.formats.msgid import month_start_ms
from services.query.app import QueryApp
from services.query.budget import BudgetLimits
from services.query.lookup import uniq_key_windows
from tests.aio import run
from tests.services.query.conftest import GOLDEN_INDEX_ENTRIES, GOLDEN_INDEX_SLOTS

pytestmark = pytest.mark.golden
ROLLBACK = 0xC


def test_every_offset_id_reads_its_record(golden_app: QueryApp, golden_expected: dict):
    for m in golden_expected["messages"]:
        s = m["stored"]
        for msg_id in (s["msgId"], s["msgId"].lower()):
            (rec,) = run(golden_app.keys.by_id(msg_id))
            assert rec.physical_offset == s["phyOffset"]
            assert rec.topic == s["topic"]


def test_every_uniq_key_finds_its_copies(golden_app: QueryApp, golden_expected: dict):
    msgs = [m["stored"] for m in golden_expected["messages"]]
    for uk in sorted({s["uniqKey"] for s in msgs if s.get("uniqKey")}):
        want = sorted((s["phyOffset"] for s in msgs
                       if s.get("uniqKey") == uk and s["sysFlag"] & ROLLBACK != ROLLBACK),
                      reverse=True)
        got = [r.physical_offset for r in run(golden_app.keys.by_id(uk))]
        assert got == want, uk
        for topic in {s["topic"] for s in msgs if s["phyOffset"] in want}:
            got_t = [r.physical_offset for r in run(golden_app.keys.by_id(uk, topic))]
            assert got_t == [p for p in want if any(
                s["phyOffset"] == p and s["topic"] == topic for s in msgs)]


def test_unknown_and_malformed_ids(golden_app: QueryApp):
    assert run(golden_app.keys.by_id("0" * 32)) == []  # offset 0 of host 0.0.0.0:0, no such uniq
    assert run(golden_app.keys.by_id("C633640700002A9F00000000FFFFFFFF")) == []  # past the end
    for bad in ("", "xyz", "0" * 31, "G" * 32, "0" * 33, "0" * 57, "é" * 32):
        with pytest.raises(InvalidArgumentError):
            run(golden_app.keys.by_id(bad))
    with pytest.raises(NotFoundError):
        run(golden_app.keys.by_id("0" * 32, "NoSuchTopic"))


def test_an_id_whose_port_no_host_can_have_is_not_read_as_an_offset_id(
        golden_app: QueryApp, golden_source, golden_expected: dict):
    first = golden_expected["messages"][0]["stored"]  # the record at offset 0
    ip = first["storeHostHex"][:8].upper()
    reads = golden_source.reads
    (rec,) = run(golden_app.keys.by_id(first["msgId"]))  # the same id with the real port
    assert rec.physical_offset == 0 and golden_source.reads == reads + 1
    for port in ("00010000", "FFFFFFFF"):  # above 65535, negative: a UNIQ_KEY's pid bits
        reads = golden_source.reads
        assert run(golden_app.keys.by_id(ip + port + "0" * 16)) == []
        assert golden_source.reads == reads  # offset 0 holds a record, but was not read


def test_uniq_key_windows_go_back_month_by_month():
    now = 1_763_000_000_000  # Nov 2025
    span = 5 * 86_400_000
    uk = "7F000001" + "0001" + "00000000" + f"{span:08X}" + "0000"
    wins = list(uniq_key_windows(uk, now, now - 400 * 86_400_000))
    assert wins[0][1] == 2**63 - 1
    for (b1, _), (b2, e2) in zip(wins, wins[1:], strict=False):
        assert e2 == b1 - 1 and b2 <= e2  # contiguous, newest first
    assert wins[0][0] == month_start_ms(now) + span - 60_000
    assert wins[-1][0] <= now - 400 * 86_400_000


def test_uniq_key_lookup_that_runs_out_of_budget_says_so(golden_store, golden_source,
                                                         golden_expected):
    app = QueryApp.build(golden_store, golden_source, GOLDEN_INDEX_SLOTS, GOLDEN_INDEX_ENTRIES,
                         BudgetLimits(hops=1, bytes=10**9, millis=60_000))
    oldest = golden_expected["messages"][0]["stored"]
    with pytest.raises(BudgetExhaustedError, match="budget"):
        run(app.keys.by_id(oldest["uniqKey"], "TopicA"))
