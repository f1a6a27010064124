"""How fast this machine is right now, from two fixed workloads the issue gives figures for.

This VM's speed changes by the hour (the same code has measured 2–2.5× apart), so every run
reads it before each benchmark and after the last. The workloads are written out here,
apart from rmqstore's encoders and hashing (only the record's layout comes from
``rmqstore.formats.commitlog``), so that they stay the same as rmqstore changes:

* **encode + append**: 1 KiB records with a v1 commitlog header (17 fixed fields, body CRC),
  packed one by one and copied into an anonymous mmap; the issue measured about 1,000,000
  records/s on this machine.
* **numpy hashes**: Java ``String.hashCode`` of 20-character keys, 4,096 at a time as rows
  of one matrix with numpy; the issue measured about 6,000,000 keys/s (how many at a time
  it does not say).

The issue does not give its exact code, so these rates compare runs with each other more
than with its figures: a benchmark row is best compared with rows of runs whose readings were
alike.
"""

import mmap
import statistics
import time
import zlib

import numpy as np

from benchmarks.scale import Scale
from rmqstore.formats import commitlog

HEADER = commitlog._FIXED[(False, False)]  # a v1 record's fixed fields, IPv4 hosts
BODY = bytes(i % 251 for i in range(1024))
TOPIC, PROPERTIES = b"BenchTopic", b"KEYS\x01order-1\x02"
TAIL = bytes([len(TOPIC)]) + TOPIC + commitlog._SHORT.pack(len(PROPERTIES)) + PROPERTIES
RECORD_SIZE = HEADER.size + len(BODY) + len(TAIL)
KEY_CHARS = 20
HASH_BATCH = 4096
POWERS = np.array([pow(31, KEY_CHARS - 1 - k, 1 << 32) for k in range(KEY_CHARS)], np.uint32)


def encode_append(mm: mmap.mmap) -> float:
    """Records/s: each one's header packed, joined with its body and copied into ``mm``
    (whose pages the caller has touched), until it is full."""
    ip, port, pos, magic = b"\x7f\x00\x00\x01", 10911, 0, commitlog.MAGIC_V1
    t0 = time.perf_counter()
    for i in range(len(mm) // RECORD_SIZE):
        crc = zlib.crc32(BODY) & 0x7FFFFFFF
        rec = HEADER.pack(RECORD_SIZE, magic, crc, i % 8, 0, i, pos, 0, 1_700_000_000_000,
                          ip, port, 1_700_000_000_000, ip, port, 0, 0, len(BODY))
        mm[pos : pos + RECORD_SIZE] = rec + BODY + TAIL
        pos += RECORD_SIZE
    return len(mm) // RECORD_SIZE / (time.perf_counter() - t0)


def java_hashes(keys: list[str]) -> np.ndarray:
    """``String.hashCode`` of ASCII keys of ``KEY_CHARS`` characters, as uint32."""
    codes = np.frombuffer("".join(keys).encode("ascii"), np.uint8).reshape(-1, KEY_CHARS)
    return (codes.astype(np.uint32) * POWERS).sum(axis=1, dtype=np.uint32)


def hash_rate(calls: int) -> float:
    """Keys/s of ``java_hashes`` over ``HASH_BATCH`` keys at a time, the keys' text included.
    The arrays stay small: a batch of millions measured the memory the process had at hand
    (its first call in a run was a fifth of the speed of later ones)."""
    keys = [f"BenchTopic#key-{i:05d}"[-KEY_CHARS:] for i in range(HASH_BATCH)]
    t0 = time.perf_counter()
    for _ in range(calls):
        java_hashes(keys)
    return calls * HASH_BATCH / (time.perf_counter() - t0)


def measure(scale: Scale = Scale.FULL) -> dict:
    """The median of a few short runs of each workload (under a second in all at full scale)."""
    reps = scale.pick(5, 5, 1)
    with mmap.mmap(-1, scale.pick(50_000, 50_000, 2_000) * RECORD_SIZE) as mm:
        mm.write(b"\x01" * len(mm))  # every page touched before any clock starts
        appends = statistics.median(encode_append(mm) for _ in range(reps))
    hashes = statistics.median(hash_rate(scale.pick(100, 100, 5)) for _ in range(reps))
    return {"encode + append 1 KiB records/s": appends, "numpy Java hashes keys/s": hashes}
