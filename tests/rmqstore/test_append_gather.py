"""The synchronous senders' group commit of the appender (``Gathering``) on its own; with a
real writer in ``test_appender``."""

import asyncio

from rmqstore.append_gather import RECENT_S, Gathering


def test_a_batch_waits_for_the_recent_senders_until_each_has_a_put_queued() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        g = Gathering(gather_s=30.0, batch_max=100)
        g.put("a", loop.time())
        await asyncio.wait_for(g.wait(loop, 1), 5)  # a sender alone: no wait
        g.put("b", loop.time())
        g.queued("put-a", "a", 1)  # the batch's first put, a's
        waiting = asyncio.ensure_future(g.wait(loop, 1))
        await asyncio.sleep(0)
        assert not waiting.done()  # b is missing
        second = asyncio.ensure_future(g.wait(loop, 1))  # another slot's batch goes as it is
        await asyncio.wait_for(second, 5)
        assert not waiting.done()
        g.queued("put-b", "b", 2)  # b came: the wait is over
        await asyncio.wait_for(waiting, 5)
        g.taken("put-a")
        g.taken("put-b")

    asyncio.run(run())


def test_the_wait_ends_at_its_time_or_at_the_batch_limit_and_forgets_old_senders() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        g = Gathering(gather_s=0.01, batch_max=3)
        now = loop.time()
        g.put("a", now)
        g.put("b", now)
        await asyncio.wait_for(g.wait(loop, 1), 5)  # b never comes: over after gather_s
        g.put("a", now)
        g.put("b", now)
        await asyncio.wait_for(g.wait(loop, 3), 5)  # batch_max waiting: no wait at all
        slow = Gathering(gather_s=30.0, batch_max=3)
        slow.put("a", now - 2 * RECENT_S)  # not recent any more: b is a sender alone
        slow.put("b", now)
        await asyncio.wait_for(slow.wait(loop, 1), 5)
        assert "a" not in slow.recent

    asyncio.run(run())
