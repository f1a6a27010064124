"""The machine-speed workloads do the work they are named for."""

import mmap

from benchmarks import machine
from benchmarks.scale import Scale
from rmqstore.formats import commitlog
from rmqstore.formats.javahash import java_hash


def test_encode_append_writes_real_commitlog_records():
    with mmap.mmap(-1, 3 * machine.RECORD_SIZE) as mm:
        assert machine.encode_append(mm) > 0
        for i in range(3):
            rec = commitlog.decode(mm, i * machine.RECORD_SIZE)  # checks sizes and body CRC
            assert (rec.topic, rec.body, rec.keys) == ("BenchTopic", machine.BODY, "order-1")
            assert (rec.queue_offset, rec.physical_offset) == (i, i * machine.RECORD_SIZE)


def test_java_hashes_are_string_hash_codes():
    keys = ["BenchTopic#key-00042", "~~~~~~~~~~~~~~~~~~~~", "a" * machine.KEY_CHARS]
    got = machine.java_hashes(keys).astype("int32").tolist()
    assert got == [java_hash(k) for k in keys]


def test_measure_gives_both_rates():
    speed = machine.measure(Scale.SMOKE)
    assert set(speed) == {"encode + append 1 KiB records/s", "numpy Java hashes keys/s"}
    assert all(rate > 0 for rate in speed.values())
