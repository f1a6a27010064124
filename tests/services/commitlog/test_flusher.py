"""The flusher's group commit as seen by a put that does not wait in a thread."""

import threading

from services.commitlog.flusher import Flusher


def _flusher(flushed_to: list[int]) -> Flusher:
    return Flusher(lambda: flushed_to[0], lambda: None, sync=True, interval_s=0.01)


def test_on_durable_calls_back_once_a_flush_covers_the_offset():
    end = [100]
    f = _flusher(end)
    f.start(0)
    try:
        got: list[tuple[int, bool]] = []
        called = threading.Event()

        def done(ok: bool, offset: int) -> None:
            got.append((offset, ok))
            if len(got) == 2:
                called.set()

        f.on_durable(40, lambda ok: done(ok, 40))
        f.on_durable(100, lambda ok: done(ok, 100))
        assert called.wait(5)
        assert sorted(got) == [(40, True), (100, True)]
        now: list[bool] = []
        f.on_durable(90, now.append)  # durable already: called at once, in this thread
        assert now == [True]
    finally:
        f.stop()


def test_on_durable_says_false_when_the_flusher_stops_first():
    f = _flusher([0])  # the disk never gets past offset 0
    f.start(0)
    got: list[bool] = []
    f.on_durable(10, got.append)
    f.stop()
    assert got == [False]
    f.on_durable(20, got.append)  # after the stop: at once
    assert got == [False, False]
