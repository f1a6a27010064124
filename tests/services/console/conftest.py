"""The console's test store: a copy of the golden RocketMQ store served by the real writer,
builders and query service, plus messages the tests put (hostile text, binary, JSON), and
consoles started as real processes in front of it."""

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2, query_pb2_grpc
from tests import procs
from tests.services.indexer.test_services import wait_durable

SEGMENT, SLOTS, ENTRIES, CQ_ENTRIES = 65536, 100, 400, 10  # as RocketMQ wrote the golden store
XSS_BODY = "<script>alert(1)</script>"
XSS_PROPERTY = '"><img src=x onerror=alert(1)>'
BINARY_BODY = bytes(range(256)) * 4 + b"\x00\xff"
JSON_BODY = '{"order": 17, "items": ["a", "b"]}'
TOPIC = "ConsoleT"
PAGED_KEY = "paged"
PAGED = 23  # messages with the key PAGED_KEY


@dataclass
class Served:
    store: Path
    writer: procs.ServiceProcess
    query: procs.ServiceProcess
    put: dict[str, commitlog_pb2.PutResult] = field(default_factory=dict)

    def console(self, *extra: str) -> procs.ServiceProcess:
        return procs.start("services.console", "--store", str(self.store), "--query",
                           self.query.address, "--commitlog", self.writer.address,
                           "--listen", "127.0.0.1:0", "--index-entries", str(ENTRIES), *extra)


def _messages() -> list[tuple[str, common_pb2.Message]]:
    out = [
        ("xss", common_pb2.Message(topic=TOPIC, queue_id=0, body=XSS_BODY.encode(), keys="xss",
                                   tags="T1", properties=[common_pb2.Property(
                                       name="note", value=XSS_PROPERTY)])),
        ("binary", common_pb2.Message(topic=TOPIC, queue_id=1, body=BINARY_BODY, keys="bin")),
        ("json", common_pb2.Message(topic=TOPIC, queue_id=0, body=JSON_BODY.encode(),
                                    keys="json")),
    ]
    out += [(f"paged-{i}", common_pb2.Message(topic=TOPIC, queue_id=i % 2,
                                              body=f"paged message {i}".encode(),
                                              keys=f"{PAGED_KEY} n{i}"))
            for i in range(PAGED)]
    return out


@pytest.fixture(scope="session")
def served(golden_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    store = tmp_path_factory.mktemp("console") / "store"
    shutil.copytree(golden_store, store)
    for p in [store, *store.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    started: list[procs.ServiceProcess] = []
    try:
        writer = procs.start("services.commitlog", "--store", str(store), "--listen",
                             "127.0.0.1:0", "--commitlog-segment-size", str(SEGMENT),
                             "--queues-per-topic", "2",
                             "--no-delivery")  # the golden store's delayed ones are long due
        started.append(writer)
        common = ["--store", str(store), "--commitlog", writer.address, "--listen",
                  "127.0.0.1:0", "--flush-interval-ms", "50"]
        cq_b = procs.start("services.indexer", "consume-queue", *common,
                           "--cq-entries-per-file", str(CQ_ENTRIES))
        started.append(cq_b)
        ix_b = procs.start("services.indexer", "index", *common, "--index-slots", str(SLOTS),
                           "--index-entries", str(ENTRIES))
        started.append(ix_b)
        query = procs.start("services.query", "--store", str(store), "--commitlog",
                            writer.address, "--listen", "127.0.0.1:0", "--index-slots",
                            str(SLOTS), "--index-entries", str(ENTRIES))
        started.append(query)
        served = Served(store, writer, query)
        stub = commitlog_pb2_grpc.CommitLogStub(channel(writer.address))
        for name, m in _messages():
            served.put[name] = stub.Put(commitlog_pb2.PutRequest(message=m), timeout=30)
        end = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=10).max_offset
        wait_durable(cq_b, end, 60)
        wait_durable(ix_b, end, 60)
        yield served
    finally:
        for p in reversed(started):
            p.stop()


@pytest.fixture(scope="session")
def query_stub(served: Served) -> query_pb2_grpc.QueryStub:
    return query_pb2_grpc.QueryStub(channel(served.query.address))


@pytest.fixture(scope="session")
def console(served: Served) -> Iterator[str]:
    """Base URL of a console with ``--auth none`` on loopback."""
    proc = served.console()
    yield f"http://{proc.address}"
    proc.stop()
