"""One writer per store directory, across processes.

A second writer process is refused while the first one runs, and also while the first one
is frozen (SIGSTOP: alive, holding its lock, not answering); the refused process exits with
status 2 and changes no byte of the store. Once the first writer is SIGKILLed, the kernel
drops its lock and a new writer starts on the same directory with every record.
"""

import hashlib
import signal
import time

import pytest

from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from tests import procs
from tests.reliability.cluster import fresh_channel

pytestmark = pytest.mark.integration


def _start(store):
    return procs.start("services.commitlog", "--store", str(store), "--listen", "127.0.0.1:0",
                       "--commitlog-segment-size", str(1 << 20), "--flush", "sync")


def digest(store) -> dict[str, str]:
    """Each file's hash; a file renamed between the listing and its read (the running
    writer finishing a ``.creating`` segment) is left out, and the next digest differs."""
    found = {}
    for p in sorted(store.rglob("*")):
        try:
            found[str(p.relative_to(store))] = hashlib.sha256(p.read_bytes()).hexdigest()
        except (FileNotFoundError, IsADirectoryError):
            continue
    return found


def settled_digest(store, timeout: float = 10.0) -> dict[str, str]:
    """The digest once the running writer's own background work (pre-creating the next
    segment) is done: nothing ``.creating`` and the same digest twice, 0.3 s apart."""
    deadline = time.monotonic() + timeout
    last = digest(store)
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = digest(store)
        if now == last and not any(name.endswith(".creating") for name in now):
            return now
        last = now
    raise AssertionError(f"the store did not settle within {timeout} s")


def test_second_writer_process_is_refused_even_when_the_first_is_frozen(tmp_path):
    store = tmp_path / "store"
    first = _start(store)
    try:
        stub = commitlog_pb2_grpc.CommitLogStub(fresh_channel(first.address))
        rs = stub.PutBatch(commitlog_pb2.PutBatchRequest(messages=[
            common_pb2.Message(topic="Locked", body=b"%d" % i, keys=f"l{i}")
            for i in range(50)]), timeout=10).results
        outcomes = {}
        for state in ("running", "frozen"):
            if state == "frozen":
                first.proc.send_signal(signal.SIGSTOP)
            before = settled_digest(store)
            with pytest.raises(RuntimeError) as err:
                _start(store)
            text = str(err.value)
            outcomes[state] = text.splitlines()[-1]
            assert "exited (2)" in text and "locked by another writer" in text
            assert digest(store) == before, f"the refused writer changed the store ({state})"
        print("second writer:", outcomes)
        first.kill()  # frozen or not, SIGKILL ends it and the kernel releases the lock
        second = _start(store)
        try:
            stub = commitlog_pb2_grpc.CommitLogStub(fresh_channel(second.address))
            raws = stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(
                offsets=[r.phy_offset for r in rs]), timeout=10).records
            assert len(raws) == 50
            print(f"after SIGKILL of the frozen writer a new one serves all {len(raws)} records")
        finally:
            assert second.stop() == 0
    finally:
        first.kill()
