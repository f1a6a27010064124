"""Two rmqstore nodes on loopback for the replication tests: a node is a writer (master or
slave) with its consume-queue and index builders, each a real process."""

import signal
import subprocess
import sys
from pathlib import Path

from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from tests import procs
from tests.services.commitlog.replicas import SEGMENT, wait_for
from tests.services.indexer.test_services import progress, start_builder

CQ_ENTRIES, SLOTS, ENTRIES = 100, 100, 400


class Node:
    """A store, its writer on a fixed address and HA port (restarts reuse them), builders."""

    def __init__(self, root: Path, name: str) -> None:
        self.store = root / name
        self.address = f"127.0.0.1:{procs.free_port()}"
        self.ha_port = procs.free_port()
        self.writer: procs.ServiceProcess | None = None
        self.builders: list[procs.ServiceProcess] = []
        self._stub: commitlog_pb2_grpc.CommitLogStub | None = None

    @property
    def ha(self) -> str:
        return f"127.0.0.1:{self.ha_port}"

    def start(self, *flags: str, builders: bool = True) -> "Node":
        self.writer = procs.start(
            "services.commitlog", "--store", str(self.store), "--listen", self.address,
            "--commitlog-segment-size", str(SEGMENT), "--flush-interval-ms", "50",
            "--ha-port", str(self.ha_port), "--ha-retry-seconds", "0.1", *flags,
        )  # fmt: skip
        if builders and not self.builders:
            self.builders = [
                start_builder("consume-queue", self.store, self.address,
                              "--cq-entries-per-file", str(CQ_ENTRIES)),
                start_builder("index", self.store, self.address, "--index-slots", str(SLOTS),
                              "--index-entries", str(ENTRIES)),
            ]  # fmt: skip
        return self

    def master(self, *flags: str, builders: bool = True) -> "Node":
        return self.start("--role", "sync_master", *flags, builders=builders)

    def slave_of(self, master: "Node", *flags: str, builders: bool = True) -> "Node":
        return self.start("--role", "slave", "--ha-master", master.ha, "--ha-master-commitlog",
                          master.address, *flags, builders=builders)  # fmt: skip

    def stub(self) -> commitlog_pb2_grpc.CommitLogStub:
        if self._stub is None:  # one channel: it reconnects to a restarted writer
            self._stub = commitlog_pb2_grpc.CommitLogStub(channel(self.address))
        return self._stub

    def max_offset(self) -> int:
        return self.stub().GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=10).max_offset

    def replication(self) -> commitlog_pb2.ReplicationStatus:
        return self.stub().GetStatus(commitlog_pb2.GetStatusRequest(), timeout=10).replication

    def put(self, start: int, n: int = 1) -> commitlog_pb2.PutBatchResponse:
        return self.stub().PutBatch(commitlog_pb2.PutBatchRequest(
            messages=[message(start + i) for i in range(n)]), timeout=30)  # fmt: skip

    def status(self, i: int) -> str:
        """One put's status name."""
        return commitlog_pb2.PutStatus.Name(self.put(i).results[0].status)

    def wait_slaves(self, n: int, timeout: float = 60) -> None:
        wait_for(lambda: self.replication().in_sync >= n, timeout, f"{n} slave(s) in sync")

    def wait_built(self, offset: int, timeout: float = 90) -> None:
        for b in self.builders:
            wait_for(lambda b=b: progress(b).durable_offset >= offset, timeout,
                     f"{b.address} to build up to {offset}")  # fmt: skip

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the writer; SIGSTOP returns once the kernel shows it stopped (the
        signal is delivered asynchronously: a put sent right after could still be acked)."""
        assert self.writer is not None
        self.writer.proc.send_signal(sig)
        if sig == signal.SIGSTOP:
            tasks = Path(f"/proc/{self.writer.proc.pid}/task")
            wait_for(lambda: all(_state(t) == "T" for t in tasks.iterdir()), 10,
                     "every thread of the writer to stop")  # fmt: skip

    def kill_writer(self) -> None:
        if self.writer is not None:
            self.writer.kill()

    def stop(self) -> None:
        for p in [*self.builders, *([self.writer] if self.writer else [])]:
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGCONT)  # a frozen one must hear the SIGTERM
            p.stop()


def _state(task: Path) -> str:
    """A thread's state letter from ``/proc/PID/task/TID/stat`` (``T``: stopped)."""
    try:
        return (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:  # the thread ended meanwhile
        return "T"


def message(i: int) -> common_pb2.Message:
    """Message ``i``: three topics, four queues, keys and tags."""
    return common_pb2.Message(topic=f"Topic{i % 3}", queue_id=i % 4, tags=f"tag{i % 2}",
                              keys=f"key-{i} order-{i % 7}",
                              body=(f"message {i} " * 40).encode())  # fmt: skip


def admin(*argv: str) -> subprocess.CompletedProcess:
    """``rmqstore admin ...`` in a process of its own."""
    return subprocess.run([sys.executable, "-m", "services.cli.main", "admin", *argv],
                          cwd=procs.ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
