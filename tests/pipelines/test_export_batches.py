"""The export's record batches hold, record for record, what decoding each record alone
gives (``rows.row``), whatever the properties, hosts and topics."""

from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines import export_batches
from pipelines.export_batches import SCHEMA, range_batches, record_batch
from pipelines.source import iter_range, list_segments, plan_ranges
from pipelines.synthetic import mixed_messages, write_commitlog
from rmqstore.formats import commitlog as cl
from rmqstore.formats.commitlog_columns import decode_columns
from tests.pipelines.rows import row
from tests.rmqstore.formats.test_commitlog import _records

_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x02"),
                max_size=10)  # fmt: skip
_known = st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "a", "ß"])
# segments as parse meets them: well formed, with a known name, empty parts, extra 0x01s,
# names twice, no 0x01 at all
_segment = st.one_of(
    st.tuples(_known, _text).map("\x01".join),
    st.tuples(_text, _text).map("\x01".join),
    _text,
    st.just("KEYS\x01 a  b c "),
)
_properties = st.lists(_segment, max_size=6).map("\x02".join)
# store times near now, and any at all (a corrupt one has no date: years 1 to 9999 only)
_store_times = st.one_of(st.integers(-10**12, 4 * 10**12), st.integers(-(2**63), 2**63 - 1))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_records, _properties, _store_times), min_size=1, max_size=8))
def test_a_batch_holds_each_record_as_decoded_alone(records):
    for r, properties, store_timestamp in records:
        r.properties, r.store_timestamp = properties, store_timestamp
    buf = b"".join(cl.encode(r) for r, _, _ in records)
    cols, _, error = decode_columns(buf)
    assert error is None and len(cols) == len(records)
    batch = record_batch(buf, cols)
    assert batch.schema == SCHEMA
    want = [row(cl.decode(buf, pos)) for pos in cols.position.tolist()]
    assert batch.to_pylist() == want


def _range_rows(r, check_crc=True):
    rows, end = [], None
    for item in range_batches(r, check_crc):
        if isinstance(item, pa.RecordBatch):
            rows += item.to_pylist()
        else:
            end = item
    return rows, end


def test_a_range_is_cut_into_batches_by_records_and_bytes(tmp_path: Path, monkeypatch):
    store = tmp_path / "store"
    write_commitlog(store, mixed_messages(500, body_size=300), segment_size=64 * 1024)
    segments = list_segments(store / "commitlog")
    ranges = plan_ranges(segments, 20_000)
    monkeypatch.setattr(export_batches, "BYTES_PER_BATCH", 3_000)  # about 8 records
    for r in ranges:
        batches = [b for b in range_batches(r, rows=50) if isinstance(b, pa.RecordBatch)]
        assert all(b.num_rows <= 50 for b in batches)
        assert all(sum(b.column("size").to_pylist()) <= 3_000 for b in batches)
        rows, (end, count) = _range_rows(r)
        decoded = [item for item in iter_range(r)]
        *records, want_end = decoded
        assert (end, count) == (want_end, len(records))
        assert rows == [row(rec) for _, rec in records]


def test_a_record_larger_than_a_batch_has_a_batch_of_its_own(tmp_path: Path, monkeypatch):
    store = tmp_path / "store"
    write_commitlog(store, mixed_messages(20, body_size=2_000), segment_size=64 * 1024)
    [r] = plan_ranges(list_segments(store / "commitlog"), 1 << 20)
    monkeypatch.setattr(export_batches, "BYTES_PER_BATCH", 100)
    batches = [b for b in range_batches(r) if isinstance(b, pa.RecordBatch)]
    assert [b.num_rows for b in batches] == [1] * 20
