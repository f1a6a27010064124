"""Batches decoded from files are shared by subscribers at the same offset."""

import threading

import pytest

from rmqstore.v1 import commitlog_pb2
from services.commitlog.dispatch_files import RecentBatches
from services.commitlog.wire_batch import WireBatch


def _batch(n: int) -> WireBatch:
    return WireBatch.of(commitlog_pb2.DispatchBatch(phy_offset=list(range(n)), next_offset=n))


def test_a_second_subscriber_waits_for_the_decode_underway_instead_of_decoding_again():
    recent = RecentBatches()
    started, release = threading.Event(), threading.Event()
    calls = []

    def slow_decode():
        calls.append("first")
        started.set()
        assert release.wait(10)
        return _batch(3)

    got = {}
    first = threading.Thread(target=lambda: got.setdefault("a", recent.get_or_decode(
        100, 4096, slow_decode)))  # fmt: skip
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=lambda: got.setdefault("b", recent.get_or_decode(
        100, 4096, lambda: calls.append("second") or _batch(3))))  # fmt: skip
    second.start()
    release.set()
    first.join(10)
    second.join(10)
    assert calls == ["first"]
    assert got["a"] is got["b"]


def test_a_batch_longer_than_a_subscriber_takes_is_decoded_anew_for_it():
    recent = RecentBatches()
    decoded = []
    recent.get_or_decode(0, 10, lambda: _batch(10))
    assert recent.get_or_decode(0, 4, lambda: decoded.append(4) or _batch(4)).records == 4
    assert decoded == [4]
    short = recent.get_or_decode(0, 20, lambda: decoded.append(20) or _batch(20))
    assert decoded == [4] and short.records <= 20  # a shorter batch is fine


def test_only_the_last_batches_are_kept():
    recent = RecentBatches(capacity=2)
    for pos in (1, 2, 3):
        recent.get_or_decode(pos, 10, lambda: _batch(1))
    decoded = []
    recent.get_or_decode(1, 10, lambda: decoded.append(1) or _batch(1))
    recent.get_or_decode(3, 10, lambda: decoded.append(3) or _batch(1))
    assert decoded == [1]


def test_a_failed_decode_lets_the_next_subscriber_try():
    recent = RecentBatches()

    def broken():
        raise OSError("disk")

    with pytest.raises(OSError, match="disk"):
        recent.get_or_decode(5, 10, broken)
    assert recent.get_or_decode(5, 10, lambda: _batch(2)).records == 2
