"""Prometheus view of a builder's counters, read when scraped (no work on the write path)."""

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from services.indexer.subscriber import Subscriber


class BuilderCollector(Collector):
    def __init__(self, subscriber: Subscriber) -> None:
        self.subscriber = subscriber

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        s = self.subscriber
        b = s.builder
        labels = ["builder"]
        name = [b.name]

        def gauge(metric: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(f"rmqstore_builder_{metric}", doc, labels=labels)
            g.add_metric(name, value)
            return g

        def counter(metric: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(f"rmqstore_builder_{metric}", doc, labels=labels)
            c.add_metric(name, value)
            return c

        yield counter("entries", "entries written since start", b.entries)
        yield gauge("files", "files holding entries", b.files)
        yield gauge("durable_offset_bytes", "commitlog offset whose output is flushed",
                    b.durable_offset)
        yield gauge("built_offset_bytes", "commitlog offset applied to the maps", b.built_offset)
        yield gauge("lag_bytes", "writer max offset minus our durable offset",
                    max(s.writer_max_offset - b.durable_offset, 0))
        yield gauge("connected", "1 while subscribed to the writer", int(s.connected))
        yield counter("flushes", "flushes since start", getattr(b, "flushes", 0))
        yield counter("flush_seconds", "time spent flushing", getattr(b, "total_flush_seconds", 0))
        yield gauge("last_flush_seconds", "duration of the last flush",
                    getattr(b, "last_flush_seconds", 0))
        if hasattr(b, "slot_occupancy"):
            yield gauge("index_slot_occupancy", "share of slots heading a chain (current file)",
                        getattr(b, "slot_occupancy", 0.0))
            yield gauge("index_mean_chain_length", "entries per occupied slot (current file)",
                        getattr(b, "mean_chain_length", 0.0))
