"""Appending a stream's batches as they arrive, ahead of their acknowledgements.

Under sync flush a put is answered only once its bytes are durable. A stream that waited for
that before reading its next batch would never let two of its own batches share a group
commit. ``appended_ahead`` reads and appends the batches that follow (at most ``depth``
ahead) in a task of its own while the stream waits for the flush of the one before, so every
batch a producer has in flight rides the same fdatasync. Answers still go out in order.
"""

import asyncio
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from typing import TypeVar

from rmqstore.errors import StoreError

Request = TypeVar("Request")
Outcome = TypeVar("Outcome")
_END = object()


async def appended_ahead(
    requests: AsyncIterable[Request],
    append: Callable[[Request], Outcome],
    depth: int = 16,
) -> AsyncGenerator[tuple[Request, Outcome | StoreError], None]:
    """Yield ``(request, append(request))`` in order, or the StoreError that append raised
    (a refused batch; the stream goes on). An error reading ``requests`` ends the iteration
    with that error; closing the iteration (the call ended) stops the reading."""
    ready: asyncio.Queue = asyncio.Queue(depth)

    async def read() -> None:
        try:
            async for request in requests:
                try:
                    outcome: object = append(request)
                except StoreError as e:
                    outcome = e
                await ready.put((request, outcome))
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # the call broke while reading
            await ready.put(e)
            return
        await ready.put(_END)

    reader = asyncio.ensure_future(read())
    try:
        while (item := await ready.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        reader.cancel()
