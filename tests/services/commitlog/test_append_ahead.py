"""Appending a stream's batches ahead of their acknowledgements."""

import asyncio

import pytest

from rmqstore.errors import InvalidArgumentError
from services.commitlog.append_ahead import appended_ahead


async def _numbers(n: int, then: BaseException | None = None, wait: asyncio.Event | None = None):
    for i in range(n):
        yield i
        await asyncio.sleep(0)
    if wait is not None:
        await wait.wait()  # a client that sends nothing more
    if then is not None:
        raise then


def test_answers_in_order_and_a_refusal_does_not_end_the_stream():
    def append(n: int) -> int:
        if n == 2:
            raise InvalidArgumentError("two is refused")
        return n * 10

    async def run():
        return [item async for item in appended_ahead(_numbers(5), append)]

    out = asyncio.run(run())
    assert [r for r, _ in out] == [0, 1, 2, 3, 4]
    assert [o for _, o in out if not isinstance(o, Exception)] == [0, 10, 30, 40]
    assert isinstance(out[2][1], InvalidArgumentError)


def test_batches_are_appended_before_the_first_is_taken_up_to_the_depth():
    appended: list[int] = []

    async def run():
        items = appended_ahead(_numbers(100), lambda n: appended.append(n) or n, depth=4)
        first = await anext(items)
        for _ in range(50):  # let the reader run as far as it may
            await asyncio.sleep(0)
        ahead = len(appended)
        rest = [n async for n, _ in items]
        return first, ahead, rest

    first, ahead, rest = asyncio.run(run())
    assert first == (0, 0)
    assert 5 <= ahead <= 6  # 1 taken + 4 waiting, and at most one more waiting for room
    assert rest == list(range(1, 100))


def test_an_error_reading_the_requests_ends_the_iteration_with_it():
    async def run():
        items = appended_ahead(_numbers(1, RuntimeError("stream cancelled")), lambda n: n)
        assert await anext(items) == (0, 0)
        with pytest.raises(RuntimeError, match="stream cancelled"):
            await anext(items)

    asyncio.run(run())


def test_a_call_that_ended_stops_the_reading():
    async def run():
        never = asyncio.Event()
        items = appended_ahead(_numbers(1, wait=never), lambda n: n, depth=1)
        assert await anext(items) == (0, 0)
        await items.aclose()  # the call ended: the reader waiting for requests is cancelled
        await asyncio.sleep(0)
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    assert asyncio.run(run()) == []
