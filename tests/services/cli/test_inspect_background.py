"""``rmqstore inspect STORE`` shows delayed delivery per level and retention."""

import shutil

from services.cli.inspect_background import delivery_rows, retention_row


def test_delivery_rows_read_rocketmqs_progress_file(tmp_path, golden_store):
    store = tmp_path / "store"
    shutil.copytree(golden_store, store)
    (store / "config").mkdir()
    (store / "config" / "delayOffset.json").write_text('{\n\t"offsetTable":{5:1\n\t}\n}')
    rows = {r["level"]: r for r in delivery_rows(store)}
    assert rows[3]["pending"] == 1 and rows[3]["nextDeliveryMs"] == 1_700_000_063_583
    assert rows[5]["pending"] == 0 and rows[5]["offset"] == 1 and rows[5]["nextDeliveryMs"] is None


def test_retention_row_counts_segments(golden_store):
    row = retention_row(golden_store)
    assert row["segments"] == 3 and row["retainedBytes"] == 3 * 65536
    assert row["oldestSegment"] == "00000000000000000000" and row["oldestSegmentAgeSeconds"] >= 0
