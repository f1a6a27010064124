"""Appending a stream's batches as they arrive, ahead of their acknowledgements.

Under sync flush a put is answered only once its bytes are durable. A stream that waited for
that before reading its next batch would never let two of its own batches share a group
commit. ``appended_ahead`` lets a thread read and append the batches that follow (at most
``depth`` ahead) while the stream waits for the flush of the one before, so every batch a
producer has in flight rides the same fdatasync. Answers still go out in order.
"""

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from rmqstore.errors import StoreError

Request = TypeVar("Request")
Outcome = TypeVar("Outcome")
_END = object()


def appended_ahead(
    requests: Iterable[Request],
    append: Callable[[Request], Outcome],
    alive: Callable[[], bool],
    depth: int = 16,
) -> Iterator[tuple[Request, Outcome | StoreError]]:
    """Yield ``(request, append(request))`` in order, or the StoreError that append raised
    (a refused batch; the stream goes on). ``alive()`` turning False (the call ended) stops
    the reading thread; an error reading ``requests`` ends the iteration with that error."""
    ready: queue.Queue = queue.Queue(depth)
    done = threading.Event()

    def offer(item: object) -> bool:
        while not done.is_set() and alive():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for request in requests:
                try:
                    outcome: object = append(request)
                except StoreError as e:
                    outcome = e
                if not offer((request, outcome)):
                    return
        except BaseException as e:  # the call broke or was cancelled while reading
            offer(e)
            return
        offer(_END)

    reader = threading.Thread(target=read, name="put-stream-ahead", daemon=True)
    reader.start()
    try:
        while True:
            try:
                item = ready.get(timeout=0.1)
            except queue.Empty:
                if not alive() or not reader.is_alive() and ready.empty():
                    return
                continue
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        done.set()
