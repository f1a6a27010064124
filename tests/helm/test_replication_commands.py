"""The writer command lines the chart gives pod 0 and pod 1 under ``replication.slaves``,
started as real processes: pod 1 follows pod 0, a sync put is PUT_OK once it holds it, and a
put to pod 1 is refused naming its master."""

import time
from pathlib import Path

import grpc
import pytest

from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from tests import procs
from tests.helm.conftest import NAMESPACE, RELEASE, broker_sts, render
from tests.helm.test_chart_commands import SMALL, _local
from tests.helm.test_replication import _exec_line, _fake_python

pytestmark = pytest.mark.integration

FULLNAME = f"{RELEASE}-rmqstore"
DNS_MASTER = f"{FULLNAME}-0.{FULLNAME}-headless.{NAMESPACE}.svc:10912"
DEADLINE_S = 30.0


def _pod_args(writer: dict, ordinal: int, tmp_path: Path, bin_dir: Path, ha_port: int,
              master: str = "") -> list[str]:  # fmt: skip
    """What pod ``ordinal``'s writer runs, with pod-only values swapped for local ones (the
    master's writer at ``master``; a master keeps its peers' pod names, which do not resolve
    here: peers that do not answer are skipped)."""
    args = _exec_line(writer, f"{FULLNAME}-{ordinal}", bin_dir)
    args = _local(args, tmp_path / f"store-{ordinal}", None, procs.free_port())
    swap = {"--ha-port": str(ha_port), "--ha-master": f"127.0.0.1:{ha_port}",
            "--put-socket": str(tmp_path / f"put-{ordinal}.sock")}  # fmt: skip
    if master:
        swap |= {"--ha-master-commitlog": master, "--ha-peers": master}
    for flag, value in swap.items():
        if flag in args:
            args[args.index(flag) + 1] = value
    return args


def _writer_container() -> dict:
    """The commitlog container of a broker with one slave, sync, as the chart renders it."""
    values = {**SMALL, "replication": {"slaves": 1, "mode": "sync"}}
    (writer,) = [c for c in broker_sts(render(values))["spec"]["template"]["spec"]
                 ["containers"] if c["name"] == "commitlog"]  # fmt: skip
    return writer


def _until(what: str, check) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_pod_1_follows_pod_0_as_the_chart_starts_them(tmp_path: Path) -> None:
    writer = _writer_container()
    bin_dir = _fake_python(tmp_path)
    ha_port = procs.free_port()
    master_args = _pod_args(writer, 0, tmp_path, bin_dir, ha_port)
    assert master_args[master_args.index("--role") + 1] == "sync_master"
    started: list[procs.ServiceProcess] = []
    try:
        master = procs.start(master_args[1], *master_args[2:])
        started.append(master)
        slave_args = _pod_args(writer, 1, tmp_path, bin_dir, ha_port, master.address)
        assert slave_args[slave_args.index("--role") + 1] == "slave"
        slave = procs.start(slave_args[1], *slave_args[2:])
        started.append(slave)
        to_master = commitlog_pb2_grpc.CommitLogStub(channel(master.address))
        to_slave = commitlog_pb2_grpc.CommitLogStub(channel(slave.address))
        status = commitlog_pb2.GetStatusRequest()
        _until("the slave reports to the master",
               lambda: to_master.GetStatus(status, timeout=5).replication.in_sync == 1)
        put = commitlog_pb2.PutRequest(message=common_pb2.Message(topic="Orders", body=b"hi"))
        result = to_master.Put(put, timeout=10)
        assert commitlog_pb2.PutStatus.Name(result.status) == "PUT_OK"
        end = to_master.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=5).max_offset
        _until("the slave holds the put", lambda: to_slave.GetOffsets(
            commitlog_pb2.GetOffsetsRequest(), timeout=5).max_offset == end)
        assert to_slave.GetStatus(status, timeout=5).replication.role == "slave"
        with pytest.raises(grpc.RpcError) as refused:
            to_slave.Put(put, timeout=10)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert f"slave of 127.0.0.1:{ha_port}" in (refused.value.details() or "")
    finally:
        for p in reversed(started):
            p.stop()
    assert all(p.proc.returncode == 0 for p in started), [p.lines[-5:] for p in started]


def test_pod_0_restarted_after_pod_1_was_promoted_becomes_its_slave(tmp_path: Path) -> None:
    """The chart's own command lines through a switchover: pod 0 stopped, pod 1 promoted by
    hand, pod 0 started again with the master's command line the chart gives it (still
    ``replication.master: 0``): its --ha-peers find pod 1 a master of a later term, and it
    follows pod 1."""
    writer = _writer_container()
    bin_dir = _fake_python(tmp_path)
    ha_port = procs.free_port()
    master_args = _pod_args(writer, 0, tmp_path, bin_dir, ha_port)
    started: list[procs.ServiceProcess] = []
    status = commitlog_pb2.GetStatusRequest()
    put = commitlog_pb2.PutRequest(message=common_pb2.Message(topic="Orders", body=b"hi"))
    try:
        master = procs.start(master_args[1], *master_args[2:])
        started.append(master)
        slave_args = _pod_args(writer, 1, tmp_path, bin_dir, ha_port, master.address)
        slave = procs.start(slave_args[1], *slave_args[2:])
        started.append(slave)
        to_master = commitlog_pb2_grpc.CommitLogStub(channel(master.address))
        to_slave = commitlog_pb2_grpc.CommitLogStub(channel(slave.address))
        _until("the slave reports to the master",
               lambda: to_master.GetStatus(status, timeout=5).replication.in_sync == 1)
        assert commitlog_pb2.PutStatus.Name(to_master.Put(put, timeout=10).status) == "PUT_OK"
        master.stop()
        # as the docs say it: no HA port given, the pod's own (--ha-port, the chart's 10912)
        promoted = to_slave.Promote(commitlog_pb2.PromoteRequest(role="sync_master"),
                                    timeout=30)  # fmt: skip
        assert promoted.term == 1

        # pod 0 as its pod restarts it: the master's command line, its peer pod 1
        again = list(master_args)
        again[again.index("--ha-peers") + 1] = slave.address
        back = procs.start(again[1], *again[2:])
        started.append(back)
        to_back = commitlog_pb2_grpc.CommitLogStub(channel(back.address))
        assert to_back.GetStatus(status, timeout=5).replication.role == "slave"
        assert any("starting as its slave" in line for line in back.lines)
        _until("pod 0 reports to pod 1",
               lambda: to_slave.GetStatus(status, timeout=5).replication.in_sync == 1)
        assert commitlog_pb2.PutStatus.Name(to_slave.Put(put, timeout=10).status) == "PUT_OK"
    finally:
        for p in reversed(started):
            p.stop()
