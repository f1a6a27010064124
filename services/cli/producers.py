"""``rmqstore put``'s streaming producers, a process each, so that their load is not bound to
one core.

Every process connects first; once all have, they start together and send their batches
over their own ``PutStream`` (``put_stream.send_all``). The parent gathers what each
acknowledged and its latencies, and times the span from the start to the last answer. A
producer's failure comes back as its gRPC status; one that dies without a word is named.
After a failure the others stop at their next batch, so that the messages stored in all
can be told (``Refused.acknowledged``).
"""

import argparse
import asyncio
import collections
import itertools
import multiprocessing as mp
import queue
import time
from collections.abc import Callable, Iterable
from typing import Any

import grpc

from rmqstore import tls
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from services.cli import put_stream

Requests = Callable[[argparse.Namespace, int, int], Iterable[commitlog_pb2.PutBatchRequest]]
_POLL_S = 0.2  # how often the parent looks for producers that died without a word


def run_all(
    args: argparse.Namespace, shares: list[tuple[int, int]], requests: Requests,
    statuses: collections.Counter | None = None,
) -> tuple[int, list[float], float]:  # fmt: skip
    """One producer process per (first message number, count) of ``shares``, sending
    ``requests(args, first, count)`` (a module-level function: it goes to a spawned
    process). Returns the messages acknowledged, every batch's latency, and the seconds from
    the start to the last answer; raises ``put_stream.Refused`` with a producer's status
    and the messages all producers had stored. ``statuses``: messages per put status, added
    up over the producers."""
    ctx = mp.get_context("spawn")  # gRPC does not survive a fork
    results, go, stop = ctx.Queue(), ctx.Event(), ctx.Event()
    procs = [
        ctx.Process(
            target=_producer, args=(i, args, first, count, requests, results, go, stop), daemon=True
        )  # fmt: skip
        for i, (first, count) in enumerate(shares)
    ]
    for p in procs:
        p.start()
    try:
        _gather(results, procs, "ready", stop)
        go.set()
        t0 = time.perf_counter()
        done = _gather(results, procs, "done", stop)
        seconds = time.perf_counter() - t0
        if statuses is not None:
            for d in done:
                statuses.update(d[2] if len(d) > 2 else {})
        return sum(d[0] for d in done), [t for d in done for t in d[1]], seconds
    finally:
        for p in procs:
            p.join(timeout=5 if go.is_set() else 0)
            if p.is_alive():
                p.terminate()
                p.join()


def _gather(results: Any, procs: list, stage: str, stop: Any) -> list[tuple]:
    """Every producer's message of ``stage`` (in producer order). On an error the others
    are told to stop and heard to the end; then the first error is raised, with the
    messages every producer acknowledged."""
    got: dict[int, tuple] = {}
    error: put_stream.Refused | None = None
    while len(got) < len(procs):
        try:
            kind, i, *rest = results.get(timeout=_POLL_S)
        except queue.Empty:
            silent = [i for i, p in enumerate(procs) if i not in got and not p.is_alive()]
            if silent:
                raise put_stream.Refused(
                    grpc.StatusCode.UNKNOWN, f"producer {silent[0]} ended without a word "
                    f"(exit code {procs[silent[0]].exitcode})") from None  # fmt: skip
            continue
        if kind == "error":
            error = error or put_stream.Refused(grpc.StatusCode[rest[0]],
                                                f"producer {i}: {rest[1]}")  # fmt: skip
            if stage == "ready":
                raise error
            stop.set()
            rest = [rest[2], []]
        got[i] = tuple(rest)
    if error is not None:
        error.acknowledged = sum(got[i][0] for i in got)
        raise error
    return [got[i] for i in range(len(procs))]


def _producer(i: int, args: argparse.Namespace, first: int, count: int, requests: Requests,
              results: Any, go: Any, stop: Any) -> None:  # fmt: skip
    acked = [0]
    try:
        asyncio.run(_produce(i, args, first, count, requests, results, go, stop, acked))
    except grpc.RpcError as e:
        results.put(("error", i, e.code().name, e.details(), acked[0]))
    except BaseException as e:  # anything else still reaches the parent
        results.put(("error", i, "UNKNOWN", repr(e), acked[0]))


async def _produce(i: int, args: argparse.Namespace, first: int, count: int,
                   requests: Requests, results: Any, go: Any, stop: Any,
                   acked: list[int]) -> None:  # fmt: skip
    async with tls.aio_client_channel(args.commitlog, args) as ch:
        stub = commitlog_pb2_grpc.CommitLogStub(ch)
        await stub.GetOffsets(commitlog_pb2.GetOffsetsRequest())  # connected before the start
        results.put(("ready", i))
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        latencies: list[float] = []
        batches = itertools.takewhile(lambda _: not stop.is_set(), requests(args, first, count))
        statuses: collections.Counter = collections.Counter()
        sent = await put_stream.send_all(stub, batches, args.inflight, latencies, acked,
                                         statuses)  # fmt: skip
        results.put(("done", i, sent, latencies, dict(statuses)))
