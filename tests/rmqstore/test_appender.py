"""The appender's group commit for synchronous senders (``gather_s``, ``merge_below``), against
a real writer over its put socket."""

import asyncio

import grpc
import pytest

from rmqstore.appender import Appender, AppendError, Plain
from tests import procs

pytestmark = pytest.mark.integration
HOSTS = [f"127.0.0.1:{5000 + i}" for i in range(4)]  # one synchronous sender each


def _plain(i: int, host: str, topic: str = "GroupT") -> Plain:
    return Plain(topic, i % 4, f"body{i}".encode(), "t", f"k{i}", f"ID{i:04d}", host)


def test_concurrent_synchronous_senders_share_one_writer_request(tmp_path) -> None:
    path = str(tmp_path / "w.sock")
    writer = procs.start("services.commitlog", "--store", str(tmp_path / "store"), "--listen",
                         "127.0.0.1:0", "--commitlog-segment-size", str(1 << 20),
                         "--put-socket", path)  # fmt: skip

    async def run() -> tuple[list, int, AppendError]:
        channel = grpc.aio.insecure_channel(writer.address)
        appender = Appender(channel, slots=1, put_socket=path, gather_s=0.05, merge_below=16)
        try:
            # each sender puts once: now all four are synchronous senders seen lately
            await asyncio.gather(*(appender.put([_plain(i, h)], sender=h)
                                   for i, h in enumerate(HOSTS)))  # fmt: skip
            before = appender.batches
            # all four at once: queued together, none missing, one batch and one request
            rounds = [
                await asyncio.gather(
                    *(appender.put([_plain(10 * r + i, h)], sender=h) for i, h in enumerate(HOSTS))
                )  # fmt: skip
                for r in range(1, 4)
            ]
            batches = appender.batches - before
            # a refused message fails its own send only; the others of its batch are stored
            bad = _plain(99, HOSTS[3])._replace(queue_id=10_000)
            results = await asyncio.gather(
                *(appender.put([_plain(90 + i, h)], sender=h) for i, h in enumerate(HOSTS[:3])),
                appender.put([bad], sender=HOSTS[3]),
                return_exceptions=True,
            )
            assert all(isinstance(r, list) for r in results[:3]), results
            assert isinstance(results[3], AppendError)
            return rounds, batches, results[3]
        finally:
            await appender.close()
            await channel.close()

    try:
        rounds, batches, refused = asyncio.run(run())
    finally:
        writer.stop()
    assert batches == 3  # one writer request per round of four sends
    stored = [s for round_ in rounds for [s] in round_]
    assert len({s.phy_offset for s in stored}) == 12  # each send its own record
    for round_ in rounds:  # in arrival order, back to back
        offsets = [s.phy_offset for [s] in round_]
        assert offsets == sorted(offsets)
    assert [s.queue_offset for s in stored[::4]] == [1, 2, 3]  # queue 0: one a round
    assert refused.kind == "refused" and "queue id" in str(refused)


def test_submit_answers_through_its_callback_as_put_would(tmp_path) -> None:
    """``submit``: never called back from inside the call; the sends of several synchronous
    senders share one request as with ``put``; a refused message fails its own callback; a
    sender alone goes straight out (no queue) and is answered the same way."""
    path = str(tmp_path / "w.sock")
    writer = procs.start("services.commitlog", "--store", str(tmp_path / "store"), "--listen",
                         "127.0.0.1:0", "--commitlog-segment-size", str(1 << 20),
                         "--put-socket", path)  # fmt: skip

    async def submit_all(appender: Appender, puts: list[tuple[Plain, str]]) -> list:
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in puts]
        for (record, host), f in zip(puts, futures, strict=True):
            appender.submit([record], lambda s, e, f=f: f.set_result((s, e)), sender=host)
        assert not any(f.done() for f in futures)  # answered later, from the loop
        return await asyncio.gather(*futures)

    async def run() -> tuple[list, int, list, list]:
        channel = grpc.aio.insecure_channel(writer.address)
        appender = Appender(channel, slots=1, put_socket=path, gather_s=0.05, merge_below=16)
        try:
            alone = await submit_all(appender, [(_plain(0, "127.0.0.1:4999"), "")])
            await submit_all(appender, [(_plain(i, h), h) for i, h in enumerate(HOSTS)])
            before = appender.batches
            together = await submit_all(appender, [(_plain(10 + i, h), h)
                                                   for i, h in enumerate(HOSTS)])  # fmt: skip
            batches = appender.batches - before
            bad = _plain(99, HOSTS[3])._replace(queue_id=10_000)
            mixed = await submit_all(appender, [*((_plain(20 + i, h), h)
                                                  for i, h in enumerate(HOSTS[:3])),
                                                (bad, HOSTS[3])])  # fmt: skip
            return alone, batches, together, mixed
        finally:
            await appender.close()
            await channel.close()

    try:
        alone, batches, together, mixed = asyncio.run(run())
    finally:
        writer.stop()
    [(stored, error)] = alone
    assert error is None and len(stored) == 1
    assert batches == 1 and all(e is None and len(s) == 1 for s, e in together)
    offsets = [s[0].phy_offset for s, _e in together]
    assert offsets == sorted(offsets) and len(set(offsets)) == 4
    assert all(e is None for _s, e in mixed[:3])
    stored, error = mixed[3]
    assert stored is None and isinstance(error, AppendError) and error.kind == "refused"


def test_two_slots_gathering_synchronous_senders_answer_every_put(tmp_path) -> None:
    """With two slots, both may take a batch while synchronous senders gather: each waits on
    its own gathering (one slot's wait once replaced the other's, whose first put was then
    never answered, and its sender hung)."""
    path = str(tmp_path / "w.sock")
    writer = procs.start("services.commitlog", "--store", str(tmp_path / "store"), "--listen",
                         "127.0.0.1:0", "--commitlog-segment-size", str(4 << 20),
                         "--put-socket", path)  # fmt: skip

    async def sender(appender: Appender, i: int, host: str) -> int:
        for n in range(60):  # one send at a time, as a synchronous producer
            await appender.put([_plain(100 * i + n, host)], sender=host)
        return 60

    async def run() -> list[int]:
        channel = grpc.aio.insecure_channel(writer.address)
        appender = Appender(channel, slots=2, put_socket=path, gather_s=0.002, merge_below=16)
        try:
            return await asyncio.wait_for(asyncio.gather(
                *(sender(appender, i, h) for i, h in enumerate(HOSTS))), 60)  # fmt: skip
        finally:
            await appender.close()
            await channel.close()

    try:
        assert asyncio.run(run()) == [60] * 4
    finally:
        writer.stop()


def test_a_lone_submit_goes_out_from_the_call_with_no_task(tmp_path) -> None:
    """A synchronous sender alone, its put-socket connection open and idle: the request is
    written in ``submit`` itself and answered from the callback that reads the reply (no task
    made); a refused one fails its own callback and leaves the slot free for the next."""
    path = str(tmp_path / "w.sock")
    writer = procs.start("services.commitlog", "--store", str(tmp_path / "store"), "--listen",
                         "127.0.0.1:0", "--commitlog-segment-size", str(1 << 20),
                         "--put-socket", path)  # fmt: skip
    host = HOSTS[0]

    async def submitted(appender: Appender, record: Plain) -> tuple[set, tuple]:
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        before = asyncio.all_tasks()
        appender.submit([record], lambda s, e: done.set_result((s, e)), sender=host)
        made = asyncio.all_tasks() - before
        return made, await done

    async def run() -> list[tuple[set, tuple]]:
        channel = grpc.aio.insecure_channel(writer.address)
        appender = Appender(channel, slots=1, put_socket=path, gather_s=0.05, merge_below=16)
        try:
            await appender.put([_plain(0, host)], sender=host)  # the connection opened
            return [await submitted(appender, record) for record in (
                _plain(1, host), _plain(2, host)._replace(queue_id=10_000), _plain(3, host))]
        finally:
            await appender.close()
            await channel.close()

    try:
        (made1, (stored1, e1)), (made2, (stored2, e2)), (made3, (stored3, e3)) = asyncio.run(run())
    finally:
        writer.stop()
    assert made1 == made2 == made3 == set()
    assert e1 is None and e3 is None and stored1[0].phy_offset < stored3[0].phy_offset
    assert stored2 is None and isinstance(e2, AppendError) and e2.kind == "refused"
