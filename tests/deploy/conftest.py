"""Shared by the deploy tests: paths of what we ship, promtool, the metric names we export."""

import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from rmqstore import metrics, metrics_background, metrics_proxy, metrics_remoting
from services.commitlog import ha_slave

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "rmqstore-dashboard.json"
DASHBOARD_SCHEMA = DEPLOY / "grafana" / "schema" / "dashboard.schema.json"
RULES = DEPLOY / "prometheus" / "rules.yml"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"


@pytest.fixture(scope="session")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed (Debian package prometheus; make system-deps)")
    return path


def run_promtool(promtool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [promtool, *args], capture_output=True, text=True, timeout=60, check=False
    )


class _NoPulls:
    suspended = 0
    pulled = 0

    def lag_by_group(self) -> dict[tuple[str, str], int]:
        return {}

    def commit_outcomes(self) -> dict[str, int]:
        return {"applied": 0}


def exported_series_names() -> set[str]:
    """Every sample name a fully set-up registry of all services can expose."""
    registry = metrics.new_registry("all")
    writer = metrics.WriterMetrics(registry)
    writer.watch_store(ROOT)
    metrics.ConsumeQueueBuilderMetrics(registry)
    metrics.IndexBuilderMetrics(registry)
    metrics.QueryMetrics(registry)
    metrics_proxy.ProxyMetrics(registry)
    metrics_background.BackgroundMetrics(registry)
    metrics_proxy.ConsumerGroupMetrics(registry)
    broker = metrics_remoting.RemotingMetrics(registry, "remoting")
    broker.watch_pulls(_NoPulls())
    broker.acl_refusals()  # under --acl
    metrics_remoting.RemotingMetrics(registry, "namesrv")
    ha_slave.watch(registry, _IdleSlave())  # a writer under --role slave
    return _sample_names(registry)


class _IdleSlave:
    """What ``ha_slave.watch`` reads of a slave, for its metric names."""

    connected = diverged = False
    written = frames = connections = 0
    replica = SimpleNamespace(pending=b"")


def _sample_names(registry: CollectorRegistry) -> set[str]:
    names: set[str] = set()
    for family in registry.collect():
        names.add(family.name)
        if family.type == "counter":
            names.update({family.name + "_total", family.name + "_created"})
        elif family.type == "histogram":
            names.update(family.name + s for s in ("_bucket", "_sum", "_count", "_created"))
        names.update(s.name for s in family.samples)
    return names
