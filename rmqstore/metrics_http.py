"""Serving metrics: a registry per service, the ``/metrics`` endpoint, scrape-time hooks and
the store filesystem's size. The metrics themselves are defined in ``rmqstore.metrics``."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Gauge,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rmqstore.errors import InvalidArgumentError
from rmqstore.startup import StartupError, check_port_free, split_address


def _version() -> str:
    try:
        return metadata.version("rmqstore")
    except metadata.PackageNotFoundError:
        return "unknown"


def new_registry(service: str, process: bool = True) -> CollectorRegistry:
    """A fresh registry with ``rmqstore_build_info{service,version}`` and process metrics.

    ``process`` adds prometheus_client's ``process_*`` (CPU, memory, fds; Linux only) and
    ``python_info`` collectors.
    """
    registry = CollectorRegistry(auto_describe=True)
    info = Gauge(
        "rmqstore_build_info",
        "Always 1; labels name the service and the rmqstore version.",
        ["service", "version"],
        registry=registry,
    )
    info.labels(service=service, version=_version()).set(1)
    if process:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
    return registry


class FilesystemCollector(Collector):
    """Size and free space of the filesystem holding a directory, read at every scrape."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def collect(self) -> Iterator[Metric]:
        size = GaugeMetricFamily(
            "rmqstore_store_filesystem_size_bytes",
            "Size of the filesystem holding the store.",
            labels=["path"],
        )
        avail = GaugeMetricFamily(
            "rmqstore_store_filesystem_avail_bytes",
            "Bytes available to the store on its filesystem.",
            labels=["path"],
        )
        try:
            usage = shutil.disk_usage(self.path)
        except OSError:
            return
        size.add_metric([str(self.path)], usage.total)
        avail.add_metric([str(self.path)], usage.free)
        yield size
        yield avail

    def describe(self) -> Iterable[Metric]:
        return []


@dataclass
class MetricsServer:
    """A running ``/metrics`` HTTP endpoint."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def start_metrics_server(
    port: int, registry: CollectorRegistry, host: str = "127.0.0.1"
) -> MetricsServer | None:
    """Serve ``registry`` as Prometheus text on ``http://host:port/metrics`` in a thread.

    ``port`` 0 means metrics are off: nothing is started and None is returned. Services pass
    the host they serve gRPC on (``metrics_host``). The port is bound exclusively; a port in
    use raises ``StartupError`` naming it.
    """
    if port == 0:
        return None
    if not 0 < port < 65536:
        raise InvalidArgumentError(f"metrics port {port} is outside 1..65535 (0 = off)")
    check_port_free(f"{host}:{port}", "metrics")
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        raise StartupError(f"cannot serve metrics on {host}:{port}: {e.strerror}") from None
    return MetricsServer(server, thread)


def metrics_host(listen: str, override: str = "") -> str:
    """Where a service's metrics listen: ``override`` when given, else the host of its gRPC
    ``--listen`` address (so ``--listen 127.0.0.1:…`` keeps metrics on loopback too)."""
    if override:
        return override
    host, _port = split_address(listen)
    return host or "0.0.0.0"


class _OnScrape(Collector):
    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn

    def collect(self) -> Iterator[Metric]:
        self.fn()
        return iter(())

    def describe(self) -> Iterable[Metric]:
        return []


def on_scrape(registry: CollectorRegistry, fn: Callable[[], None]) -> None:
    """Run ``fn`` at every scrape, before the metrics registered after this call are read.

    Services use it to copy their own counters into gauges only when someone looks.
    """
    registry.register(_OnScrape(fn))
