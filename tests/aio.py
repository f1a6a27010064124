"""Plain tests awaiting the query service's lookups: one event loop for the whole session.

Objects bound to a loop (a ``grpc.aio`` channel) must be made on it: ``run(make())``.
"""

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
_loop = asyncio.new_event_loop()


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return _loop.run_until_complete(coroutine)
