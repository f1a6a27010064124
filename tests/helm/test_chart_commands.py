"""The pod's command lines, taken from the rendered chart, start the real services, and each
container answers the gRPC health check its probes use (and serves /metrics)."""

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rmqstore.server import channel
from tests import procs
from tests.helm.conftest import broker_sts, render

pytestmark = pytest.mark.integration

# Small files so the test store stays tiny, and delivery and retention values off their
# defaults (the writer must accept them as rendered); every other value is the chart's default.
SMALL = {
    "commitlog": {
        "segmentSize": 1 << 20,
        "delivery": {"delayLevels": "1s 5s 10s"},
        "retention": {"hours": 0.5, "deleteWhen": "always", "diskMaxUsedRatio": 90.5,
                      "checkSeconds": 2.5},
    },
    "consumeQueue": {"entriesPerFile": 1000},
    "indexFile": {"slots": 1000, "entries": 4000},
}
# Services whose --metrics-port already serves rmqstore metrics. The writer accepts the flag
# but does not serve yet: add "commitlog" here once it is wired to rmqstore.metrics.
METRICS_SERVED = {"commitlog", "consume-queue", "index", "query", "proxy"}
DEADLINE_S = 30.0


def _local(args: list[str], store: Path, writer: str | None, metrics_port: int) -> list[str]:
    """The container's args with pod-only values swapped for local ones."""
    out = list(args)
    replace = {
        "--store": str(store),
        "--listen": "127.0.0.1:0",
        "--metrics-port": str(metrics_port),
        "--store-host": "127.0.0.1:10911",  # $(POD_IP) is expanded by the kubelet
    }
    if writer:
        replace["--commitlog"] = writer
    for flag, value in replace.items():
        if flag in out:
            out[out.index(flag) + 1] = value
    return out


def _wait_serving(address: str) -> None:
    stub = health_pb2_grpc.HealthStub(channel(address))
    deadline = time.monotonic() + DEADLINE_S
    status = None
    while time.monotonic() < deadline:
        try:
            status = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2).status
            if status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.RpcError as e:
            status = e.code()
        time.sleep(0.05)
    raise AssertionError(f"{address} not SERVING after {DEADLINE_S}s (last: {status})")


def _metrics_text(port: int) -> str:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                return resp.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_chart_command_lines_start_healthy_services(tmp_path: Path) -> None:
    sts = broker_sts(render(SMALL))
    containers = sts["spec"]["template"]["spec"]["containers"]
    store = tmp_path / "store"
    (init,) = sts["spec"]["template"]["spec"]["initContainers"]
    command = [sys.executable if init["command"][0] == "python" else init["command"][0],
               *init["command"][1:-1], str(store)]
    subprocess.run(command, check=True, timeout=30)
    assert store.is_dir()
    started: list[procs.ServiceProcess] = []
    writer: str | None = None
    try:
        for c in containers:
            if c["name"] == "remoting":  # no gRPC health: tests/helm/test_remoting_commands.py
                continue
            assert c["command"] == ["python"] and c["args"][0] == "-m"
            port = procs.free_port()
            args = _local(c["args"], store, writer, port)
            p = procs.start(args[1], *args[2:])
            started.append(p)
            if c["name"] == "commitlog":
                writer = p.address
            _wait_serving(p.address)  # what the startup/readiness/liveness probes ask
            if c["name"] in METRICS_SERVED:
                assert "rmqstore_" in _metrics_text(port), c["name"]
        names = [c["name"] for c in containers]
        assert names == ["commitlog", "consume-queue", "index", "query", "proxy", "remoting"]
    finally:
        for p in reversed(started):
            p.stop()
    assert all(p.proc.returncode == 0 for p in started), [p.lines[-5:] for p in started]
