"""rmqstore.metrics: names follow Prometheus conventions, groups share a registry, the
endpoint serves what services set."""

import re
import shutil
import socket
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from rmqstore import metrics, metrics_proxy
from rmqstore.errors import InvalidArgumentError

NAME = re.compile(r"^rmqstore_[a-z][a-z0-9_]*$")
UNITS = ("_bytes", "_seconds", "_ratio")


def _all_groups(registry: CollectorRegistry, store: Path) -> dict[str, object]:
    writer = metrics.WriterMetrics(registry)
    writer.watch_store(store)
    return {
        "writer": writer,
        "cq": metrics.ConsumeQueueBuilderMetrics(registry),
        "index": metrics.IndexBuilderMetrics(registry),
        "query": metrics.QueryMetrics(registry),
        "proxy": metrics_proxy.ProxyMetrics(registry),
    }


def _families(registry: CollectorRegistry) -> dict[str, object]:
    return {f.name: f for f in registry.collect()}


def test_every_group_fits_on_one_registry(tmp_path: Path) -> None:
    registry = metrics.new_registry("serve", process=False)
    _all_groups(registry, tmp_path)
    names = _families(registry)
    assert "rmqstore_writer_puts" in names  # counter family, exposed as ..._total
    assert "rmqstore_builder_lag_bytes" in names
    assert "rmqstore_index_slot_occupancy_ratio" in names
    assert "rmqstore_query_latency_seconds" in names


def test_names_follow_prometheus_conventions(tmp_path: Path) -> None:
    registry = metrics.new_registry("x", process=False)
    _all_groups(registry, tmp_path)
    for family in registry.collect():
        assert NAME.match(family.name), family.name
        assert family.documentation, family.name
        if family.type == "counter":
            # prometheus_client strips _total from the family and adds it to the sample
            assert not family.name.endswith("_total")
        if family.type == "histogram":
            assert family.name.endswith(("_seconds", "_length", "_hops", "_records",
                                         "_results", "_messages", "_scanned")), family.name
        for unit in ("_ms", "_milliseconds", "_kb", "_mb", "_percent"):
            assert not family.name.endswith(unit), family.name


def test_histograms_use_increasing_buckets() -> None:
    for buckets in (metrics.IO_LATENCY_BUCKETS, metrics.QUERY_LATENCY_BUCKETS,
                    metrics.CHAIN_BUCKETS, metrics.COUNT_BUCKETS):
        assert list(buckets) == sorted(set(buckets))


def test_builders_share_families_and_keep_their_own_values(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    cq = metrics.BuilderMetrics("consume-queue", registry)
    index = metrics.IndexBuilderMetrics(registry)
    again = metrics.BuilderMetrics("consume-queue", registry)  # a restarted builder
    cq.lag_bytes.set(10)
    index.lag_bytes.set(20)
    again.entries.inc(3)
    cq.entries.inc(2)
    assert registry.get_sample_value("rmqstore_builder_lag_bytes",
                                     {"builder": "consume-queue"}) == 10
    assert registry.get_sample_value("rmqstore_builder_lag_bytes", {"builder": "index"}) == 20
    assert registry.get_sample_value("rmqstore_builder_entries_total",
                                     {"builder": "consume-queue"}) == 5
    other = CollectorRegistry()
    metrics.BuilderMetrics("consume-queue", other).lag_bytes.set(99)
    assert registry.get_sample_value("rmqstore_builder_lag_bytes",
                                     {"builder": "consume-queue"}) == 10


def test_writer_lag_and_builder_lag_use_the_same_label(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    writer = metrics.WriterMetrics(registry)
    builder = metrics.IndexBuilderMetrics(registry)
    writer.subscriber_lag.labels(builder=builder.name).set(7)
    assert registry.get_sample_value("rmqstore_writer_subscriber_lag_bytes",
                                     {"builder": metrics.INDEX_BUILDER}) == 7


def test_filesystem_is_read_at_scrape_time(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    writer = metrics.WriterMetrics(registry)
    writer.watch_store(tmp_path)
    writer.watch_store(tmp_path)  # once per path
    labels = {"path": str(tmp_path)}
    assert registry.get_sample_value("rmqstore_store_filesystem_size_bytes", labels) == (
        shutil.disk_usage(tmp_path).total
    )
    assert registry.get_sample_value("rmqstore_store_filesystem_avail_bytes", labels) > 0
    gone = tmp_path / "gone"
    writer.watch_store(gone)  # a missing directory exports nothing rather than failing
    assert registry.get_sample_value("rmqstore_store_filesystem_size_bytes",
                                     {"path": str(gone)}) is None


def test_build_info_names_the_service() -> None:
    registry = metrics.new_registry("query")
    samples = {
        (s.name, s.labels.get("service")): s.value
        for f in registry.collect() for s in f.samples if s.name == "rmqstore_build_info"
    }
    assert samples == {("rmqstore_build_info", "query"): 1.0}
    assert registry.get_sample_value("process_resident_memory_bytes") is not None


def test_port_zero_means_off() -> None:
    assert metrics.start_metrics_server(0, CollectorRegistry()) is None


@pytest.mark.parametrize("port", [-1, 65536])
def test_bad_port_is_refused(port: int) -> None:
    with pytest.raises(InvalidArgumentError, match=str(port)):
        metrics.start_metrics_server(port, CollectorRegistry())


def test_server_serves_the_registry_and_stops(tmp_path: Path) -> None:
    registry = metrics.new_registry("commitlog", process=False)
    groups = _all_groups(registry, tmp_path)
    writer = groups["writer"]
    writer.puts.labels(topic="Orders", status="ok").inc(4)
    writer.put_latency.observe(0.002)
    groups["query"].budget_exhausted.labels(kind="key", budget="hops").inc()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = metrics.start_metrics_server(port, registry, host="127.0.0.1")
    assert server is not None and server.port == port
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    finally:
        server.stop()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text) for s in f.samples
    }
    assert samples[("rmqstore_writer_puts_total", (("status", "ok"), ("topic", "Orders")))] == 4
    assert samples[("rmqstore_writer_put_latency_seconds_count", ())] == 1
    assert samples[("rmqstore_query_budget_exhausted_total",
                    (("budget", "hops"), ("kind", "key")))] == 1
    with socket.socket() as s:  # nothing listens there any more (TIME_WAIT may remain)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_a_group_can_be_built_again_on_its_registry() -> None:
    """A builder restarted inside one process (``rmqstore serve``) gets the same metrics."""
    registry = CollectorRegistry()
    first = metrics.IndexBuilderMetrics(registry)
    first.slot_occupancy.set(0.5)
    first.entries.inc(4)
    second = metrics.IndexBuilderMetrics(registry)
    assert second.slot_occupancy is first.slot_occupancy
    second.entries.inc(1)
    assert registry.get_sample_value("rmqstore_builder_entries_total", {"builder": "index"}) == 5
    assert registry.get_sample_value("rmqstore_index_slot_occupancy_ratio") == 0.5
