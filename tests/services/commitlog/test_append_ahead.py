"""Appending a stream's batches ahead of their acknowledgements."""

import threading
import time

import pytest

from rmqstore.errors import InvalidArgumentError
from services.commitlog.append_ahead import appended_ahead


def _wait_for(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_answers_in_order_and_a_refusal_does_not_end_the_stream():
    def append(n: int) -> int:
        if n == 2:
            raise InvalidArgumentError("two is refused")
        return n * 10

    out = list(appended_ahead(iter(range(5)), append, lambda: True))
    assert [r for r, _ in out] == [0, 1, 2, 3, 4]
    assert [o for _, o in out if not isinstance(o, Exception)] == [0, 10, 30, 40]
    assert isinstance(out[2][1], InvalidArgumentError)


def test_batches_are_appended_before_the_first_is_taken_up_to_the_depth():
    appended: list[int] = []
    items = appended_ahead(iter(range(100)), lambda n: appended.append(n) or n, lambda: True,
                           depth=4)
    assert next(items) == (0, 0)
    _wait_for(lambda: len(appended) >= 5)  # 1 taken + 4 waiting
    time.sleep(0.05)
    assert len(appended) <= 6  # at most one more, appended while waiting for room
    assert [n for n, _ in items] == list(range(1, 100))


def test_an_error_reading_the_requests_ends_the_iteration_with_it():
    def requests():
        yield 1
        raise RuntimeError("stream cancelled")

    items = appended_ahead(requests(), lambda n: n, lambda: True)
    assert next(items) == (1, 1)
    with pytest.raises(RuntimeError, match="stream cancelled"):
        next(items)


def test_a_call_that_ended_stops_the_reading_thread():
    alive = threading.Event()
    alive.set()
    blocked = threading.Event()

    def requests():
        yield 1
        blocked.wait()  # a client that sends nothing more
        yield 2

    before = threading.active_count()
    items = appended_ahead(requests(), lambda n: n, alive.is_set, depth=1)
    assert next(items) == (1, 1)
    alive.clear()  # the call was cancelled
    assert list(items) == []
    blocked.set()
    _wait_for(lambda: threading.active_count() == before)
