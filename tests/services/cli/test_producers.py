"""``producers.run_all``: producer processes against a real writer, and one that dies."""

import argparse
import os

import grpc
import pytest

from rmqstore.v1 import commitlog_pb2
from services.cli import producers, put_stream
from tests.services.cli.dispatched import dispatched

pytestmark = pytest.mark.integration


def _args(address: str) -> argparse.Namespace:
    return argparse.Namespace(commitlog=address, inflight=2, tls_cert="", tls_key="",
                              tls_ca="", tls_server_name="")  # fmt: skip


def numbered(args: argparse.Namespace, first: int, count: int):
    """Batches of 5 messages keyed by their numbers (sent from a producer process)."""
    for at in range(first, first + count, 5):
        n = min(5, first + count - at)
        yield put_stream.request(commitlog_pb2.MessageColumns(
            topic="Procs", body_size=[1] * n, bodies=b"x" * n, queue_id=[0],
            keys=[f"k-{i}" for i in range(at, at + n)]))  # fmt: skip


def dies(args: argparse.Namespace, first: int, count: int):
    """A producer that dies at once, with nothing said."""
    os._exit(3)


def test_each_process_sends_its_share(writer):
    sent, latencies, seconds = producers.run_all(_args(writer.address),
                                                 [(0, 12), (12, 10), (22, 3)], numbered)
    assert sent == 25 and len(latencies) == 3 + 2 + 1 and seconds > 0
    keys = [k for b in dispatched(writer.address) for k in b.keys]
    assert sorted(keys) == sorted(f"k-{i}" for i in range(25))


def test_a_producer_that_dies_is_named(writer):
    with pytest.raises(put_stream.Refused) as e:
        producers.run_all(_args(writer.address), [(0, 5), (5, 5)], dies)
    assert e.value.code() == grpc.StatusCode.UNKNOWN
    assert "ended without a word (exit code 3)" in e.value.details()
